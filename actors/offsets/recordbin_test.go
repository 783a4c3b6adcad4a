package offsets

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"kaas/actors/journal"
)

// everyOp is one op of each kind, with the values that test an encoding's edges.
func everyOp(t *testing.T) []op {
	t.Helper()
	pid := int64(-7)
	cons, err := encodeConsumerOp(GroupMeta{ProtocolType: "consumer", Generation: 4},
		&ConsumerDelta{Header: json.RawMessage(`{"epoch":4}`), Set: map[string]json.RawMessage{"m1": json.RawMessage(`{"id":"m1"}`)}, Del: []string{"m0"}})
	if err != nil {
		t.Fatal(err)
	}
	return []op{
		{Set: []fileOffset{
			{Topic: "t", Partition: 0, Offset: 42, LeaderEpoch: -1, Metadata: "m", CommitTime: 1_700_000_000_000, ExpireTime: -1},
			{Topic: "t", Partition: 2147483647, Offset: -9223372036854775808, LeaderEpoch: -2147483648},
			{Topic: "\xff\x00é", Partition: 1, Offset: 9223372036854775807, Metadata: "\xfe"},
		}},
		{Del: []fileTP{{Topic: "t", Partition: 1}, {Topic: "u", Partition: -1}}},
		metaOp(t, GroupMeta{ProtocolType: "consumer", Generation: 3}, false),
		metaOp(t, GroupMeta{ProtocolType: "consumer", Generation: 5}, true),
		{Consumer: cons, NoCreate: true},
		{Consumer: cons},
		{Clear: true},
		{TxnSet: &txnSet{ProducerID: 9, Offsets: []fileOffset{{Topic: "t", Partition: 3, Offset: 5, LeaderEpoch: -1}}}},
		{TxnApply: []fileOffset{{Topic: "t", Partition: 3, Offset: 5, LeaderEpoch: -1}}},
		{TxnDrop: &pid},
	}
}

// TestCompactRecordRoundTrip: every op kind, every edge value of its fields and any
// group id decode from the compact format as they were encoded, the record leads with
// its format byte, and it is smaller than the JSON of the same ops.
func TestCompactRecordRoundTrip(t *testing.T) {
	ops := everyOp(t)
	for _, group := range []string{"g", "", "../x", "\xff\xfe", string(make([]byte, 300))} {
		for _, epoch := range []uint64{0, 7, 1 << 63} {
			b, err := encodeCompactRecord(group, epoch, ops)
			must(t, err)
			if b[0] != recordCompact {
				t.Fatalf("compact record starts with %#x", b[0])
			}
			g, e, got, err := decodeRecordEpoch(b)
			if err != nil || g != group || e != epoch || !sameOps(got, ops) {
				t.Fatalf("round trip of group %q epoch %d: %q %d %+v %v", group, epoch, g, e, got, err)
			}
			j, err := encodeRecord(group, epoch, ops)
			must(t, err)
			if len(b) >= len(j) {
				t.Fatalf("compact record of %d bytes, JSON of %d", len(b), len(j))
			}
		}
	}
}

// TestCompactRecordRefusesWhatItDoesNotUnderstand: a compact record cut short at any
// byte, with a byte after its last op, or with an op kind this version does not know is
// refused, never taken for part of what it says.
func TestCompactRecordRefusesWhatItDoesNotUnderstand(t *testing.T) {
	b, err := encodeCompactRecord("g", 3, everyOp(t))
	must(t, err)
	for n := 1; n < len(b); n++ {
		if _, _, _, err := decodeRecordEpoch(b[:n]); err == nil {
			t.Fatalf("record cut at %d of %d bytes decoded", n, len(b))
		}
	}
	if _, _, _, err := decodeRecordEpoch(append(slices.Clone(b), 0)); err == nil {
		t.Fatal("record with a byte after its last op decoded")
	}
	unknown := []byte{recordCompact, 1, 'g', 0, 1, 99}
	if _, _, _, err := decodeRecordEpoch(unknown); err == nil {
		t.Fatal("record with an unknown op kind decoded")
	}
	empty := []byte{recordCompact, 1, 'g', 0, 1, opSet, 0}
	if _, _, _, err := decodeRecordEpoch(empty); err == nil {
		t.Fatal("record with an empty set decoded")
	}
}

// TestReplayReadsBothFormats: a journal holding the JSON records an older version wrote
// and, after them, compact records of the same groups (the broker was upgraded between)
// replays both, in order, written eagerly and behind.
func TestReplayReadsBothFormats(t *testing.T) {
	for _, behind := range []bool{false, true} {
		dir, jdir := replayDirs(t)
		compact := func(group string, ops ...op) []byte {
			b, err := encodeCompactRecord(group, 0, ops)
			must(t, err)
			return b
		}
		writeSegment(t, jdir, 1, slices.Concat(
			seqFrame(1, encRecord(t, "a", setOp(entry("t", 0, 10), entry("t", 1, 11))), encRecord(t, "b", setOp(entry("t", 0, 20)))),
			seqFrame(3, compact("a", setOp(entry("t", 0, 12)), delOp(TopicPartition{"t", 1})), compact("c", setOp(entry("u", 5, 30)))),
			make([]byte, 512)))
		out, err := Replay(ReplayConfig{OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop(), Behind: behind})
		must(t, err)
		want := map[string]map[TopicPartition]int64{
			"a": {{"t", 0}: 12},
			"b": {{"t", 0}: 20},
			"c": {{"u", 5}: 30},
		}
		got := map[string]map[TopicPartition]int64{}
		if behind {
			for _, u := range out.Unsaved {
				s, exists, err := unsavedState(u)
				must(t, err)
				if !exists {
					t.Fatalf("behind=%v: group %q replayed to no file", behind, u.Key)
				}
				got[u.Key] = offsetsOf(s)
			}
		} else {
			for g := range want {
				s, ok := groupFile(t, dir, g)
				if !ok {
					t.Fatalf("behind=%v: no file for group %q", behind, g)
				}
				got[g] = offsetsOf(s)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("behind=%v: replayed %v, want %v", behind, got, want)
		}
		for g, w := range want {
			if !mapsEqual(got[g], w) {
				t.Fatalf("behind=%v: group %q replayed %v, want %v", behind, g, got[g], w)
			}
		}
	}
}

func offsetsOf(s state) map[TopicPartition]int64 {
	m := map[TopicPartition]int64{}
	for tp, c := range s.offsets {
		m[tp] = c.Offset
	}
	return m
}

func mapsEqual(a, b map[TopicPartition]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestBrokerAloneJournalsCompactRecords: the offsets actor of a broker alone journals
// compact records, which survive a crash: the replay of its journal gives every
// acknowledged commit. In a cluster (a Gate) it journals JSON, which a peer of an older
// version taking the group over still reads.
func TestBrokerAloneJournalsCompactRecords(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	gated, _ := gatedActor(j, "in-cluster")
	e := Entry{TopicPartition{"t", 0}, Committed{Offset: 5, LeaderEpoch: 2, Metadata: "m"}}
	if got := j.commit(e, entry("t", 1, 6)); !codesOK(got) {
		t.Fatalf("commit codes %v", got)
	}
	if got := j.commitTo(gated, entry("t", 0, 9)); !codesOK(got) {
		t.Fatalf("commit codes of the gated group %v", got)
	}
	formats := map[string][]byte{}
	for _, name := range j.segmentFiles() {
		first, _ := journal.ParseSegmentName(name)
		b, err := os.ReadFile(filepath.Join(j.jdir, name))
		must(t, err)
		for _, r := range journal.ScanSegment(b, first).Records {
			g, _, err := decodeRecord(r.Data)
			must(t, err)
			formats[g] = append(formats[g], r.Data[0])
		}
	}
	if !bytes.Equal(formats["g"], []byte{recordCompact}) || !bytes.Equal(formats["in-cluster"], []byte{'{'}) {
		t.Fatalf("record formats by group %q, want g compact and in-cluster JSON", formats)
	}

	img := j.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	s, ok := groupFile(t, Dir(img), "g")
	got := s.offsets[TopicPartition{"t", 0}]
	if !ok || got.Offset != 5 || got.LeaderEpoch != 2 || got.Metadata != "m" || got.CommitTime != j.nowMs.Load() ||
		s.offsets[TopicPartition{"t", 1}].Offset != 6 {
		t.Fatalf("group g replayed from its compact record: %+v (file %v)", s.offsets, ok)
	}
}

// TestGroupsInCompactRecords: the group ids that damaged bytes of compact records still
// show are read, as those of JSON records are.
func TestGroupsInCompactRecords(t *testing.T) {
	var b []byte
	for _, g := range []string{"a", "b/../c", ""} {
		r, err := encodeCompactRecord(g, 0, []op{setOp(entry("t", 0, 1))})
		must(t, err)
		b = append(b, frame(r)...)
	}
	b = append(b, frame(encRecord(t, "json", setOp(entry("t", 0, 1))))...)
	got := groupsIn(b[3:]) // a damaged range need not start at a frame
	if !slices.Equal(got, []string{"a", "b/../c", "", "json"}) {
		t.Fatalf("groups in damaged bytes %q", got)
	}
}
