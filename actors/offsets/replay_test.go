package offsets

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/storage"
)

// frame is a journal frame holding the one record payload, as the journal writes a
// batch of one.
func frame(payload []byte) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	body = append(body, payload...)
	var h [journal.FrameHeader]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(body)))
	binary.BigEndian.PutUint32(h[4:8], journal.Checksum(body))
	return append(h[:], body...)
}

func frames(payloads ...[]byte) []byte {
	var b []byte
	for _, p := range payloads {
		b = append(b, frame(p)...)
	}
	return b
}

func encRecord(t *testing.T, group string, ops ...op) []byte {
	t.Helper()
	b, err := encodeRecord(group, 0, ops)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func setOp(entries ...Entry) op {
	o := op{Set: []fileOffset{}}
	for _, e := range entries {
		o.Set = append(o.Set, fileOffset{
			Topic: jsonString(e.Topic), Partition: e.Partition, Offset: e.Offset, LeaderEpoch: e.LeaderEpoch,
			Metadata: jsonString(e.Metadata), CommitTime: e.CommitTime, ExpireTime: e.ExpireTime,
		})
	}
	return o
}

func delOp(tps ...TopicPartition) op {
	o := op{Del: []fileTP{}}
	for _, tp := range tps {
		o.Del = append(o.Del, fileTP{Topic: jsonString(tp.Topic), Partition: tp.Partition})
	}
	return o
}

func metaOp(t *testing.T, m GroupMeta, create bool) op {
	t.Helper()
	b, err := encodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	return op{Meta: b, NoCreate: !create}
}

func clearOp() op { return op{Clear: true} }

func writeSegment(t *testing.T, dir string, first uint64, data []byte) string {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, journal.SegmentName(first))
	must(t, os.WriteFile(path, data, 0o644))
	return path
}

func writeGroupFile(t *testing.T, dir, group string, s state) {
	t.Helper()
	b, err := encodeFile(group, s)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, FileName(group)), b, 0o644))
}

// replayDirs is a fresh data dir's offsets and journal directories.
func replayDirs(t *testing.T) (offsetsDir, journalDir string) {
	root := t.TempDir()
	return Dir(root), JournalDir(root, 1)
}

func sameState(a, b state) bool {
	return reflect.DeepEqual(a.meta, b.meta) && maps.Equal(a.offsets, b.offsets)
}

// groupState is a state with the given meta and offsets.
func groupState(meta GroupMeta, offsets map[TopicPartition]Committed) state {
	s := newState()
	s.meta = meta
	maps.Copy(s.offsets, offsets)
	return s
}

// TestReplayAfterCrash: commits acknowledged through the journal, never checkpointed
// (CheckpointInterval 1h), are all in the group files after a crash and ReplayJournal;
// replay deletes the segments, returns the sequence number after the last record, and
// replaying again (a crash in the middle of the first replay) changes nothing.
func TestReplayAfterCrash(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	g2 := j.spawn("g2")
	want := map[TopicPartition]Committed{}
	for i := range 5 {
		e := Entry{TopicPartition{"t", int32(i % 3)}, Committed{Offset: int64(10 + i), LeaderEpoch: int32(i), Metadata: fmt.Sprint("m", i)}}
		if got := j.commit(e); !codesOK(got) {
			t.Fatal(got)
		}
		e.CommitTime = j.nowMs.Load()
		want[e.TopicPartition] = e.Committed
		j.advance(1000)
		if got := j.commitTo(g2, entry("x", int32(i), int64(i))); !codesOK(got) {
			t.Fatal(got)
		}
	}
	if c := j.result(func(p actor.Promise) any { return &Delete{Partitions: []TopicPartition{{"t", 2}}, Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	delete(want, TopicPartition{"t", 2})
	if c := wait[*Result](t, j.sendTo(g2, func(p actor.Promise) any { return &DeleteAll{Reply: p} })).ErrorCode; c != 0 {
		t.Fatal(c)
	}
	if _, exists := j.onDisk(); exists {
		t.Fatal("group file written before the crash")
	}

	img := j.crashImage()
	dir, jdir := Dir(img), JournalDir(img, 1)
	segs := segmentFilesIn(t, jdir)
	if len(segs) == 0 {
		t.Fatal("no journal segment in the crash image")
	}
	// The last sequence number the journal used: the last segment's first plus its
	// records.
	saved := map[string][]byte{}
	var last uint64
	for _, s := range segs {
		b, err := os.ReadFile(filepath.Join(jdir, s))
		must(t, err)
		saved[s] = b
		first, _ := journal.ParseSegmentName(s)
		payloads, end := journal.ReadFrames(b)
		if end != len(b) && !journal.AllZero(b[end:]) {
			t.Fatalf("segment %s of acknowledged records has a torn tail at %d of %d", s, end, len(b))
		}
		last = max(last, first+uint64(len(payloads))-1)
	}
	if last != 12 {
		t.Fatalf("last sequence number %d, want 12 (one record per acknowledged request)", last)
	}

	logs := &syncBuffer{}
	next, err := ReplayJournal(storage.NewFaultFS(nil), dir, jdir, zerolog.New(logs))
	must(t, err)
	if next <= last {
		t.Fatalf("ReplayJournal returned %d, not after the last sequence number %d", next, last)
	}
	check := func() []byte {
		t.Helper()
		s, exists := groupFile(t, dir, "g")
		if !exists || !maps.Equal(s.offsets, want) {
			t.Fatalf("replayed file %+v\nwant %+v", s.offsets, want)
		}
		if _, exists := groupFile(t, dir, "g2"); exists {
			t.Fatal("g2's DeleteAll was not replayed")
		}
		if got := segmentFilesIn(t, jdir); len(got) != 0 {
			t.Fatalf("segments %q left after replay", got)
		}
		b, err := os.ReadFile(filepath.Join(dir, "g.json"))
		must(t, err)
		return b
	}
	file := check()
	if !strings.Contains(logs.String(), "offsets_journal_replayed") {
		t.Fatalf("replay not logged:\n%s", logs)
	}

	// A crash after the files were written but before the segments were deleted: the
	// same segments replay over the files they made.
	for name, b := range saved {
		must(t, os.WriteFile(filepath.Join(jdir, name), b, 0o644))
	}
	again, err := ReplayJournal(nil, dir, jdir, zerolog.Nop())
	must(t, err)
	if again != next {
		t.Fatalf("second replay returned %d, first %d", again, next)
	}
	if b := check(); !bytes.Equal(b, file) {
		t.Fatalf("second replay changed the file:\n%s\n%s", file, b)
	}
	// And with nothing left to replay, a third run starts the journal at 1 and touches
	// nothing.
	if n, err := ReplayJournal(nil, dir, jdir, zerolog.Nop()); err != nil || n != 1 {
		t.Fatalf("replay of an empty journal: %d, %v", n, err)
	}
	if b := check(); !bytes.Equal(b, file) {
		t.Fatal("replay of an empty journal changed the file")
	}
	// A data dir that never had a journal.
	if n, err := ReplayJournal(nil, dir, filepath.Join(img, "absent"), zerolog.Nop()); err != nil || n != 1 {
		t.Fatalf("replay of a missing journal dir: %d, %v", n, err)
	}
}

// TestReplaySuffix: a group file checkpointed at any point of the group's records,
// replayed with every record from any earlier point, ends at the live state: records the
// file already holds are set again, never to an older value, and deletions, a Clear and
// the meta follow in order.
func TestReplaySuffix(t *testing.T) {
	c := func(off int64) Committed {
		return Committed{Offset: off, LeaderEpoch: int32(off), Metadata: fmt.Sprint("md", off), CommitTime: 1000 + off, ExpireTime: off % 2}
	}
	e := func(topic string, p int32, off int64) Entry { return Entry{TopicPartition{topic, p}, c(off)} }
	a0, a1, b0 := TopicPartition{"a", 0}, TopicPartition{"a", 1}, TopicPartition{"b", 0}
	m1 := GroupMeta{ProtocolType: "consumer", Generation: 3, EmptySince: 77}
	m2 := GroupMeta{ProtocolType: "consumer", Generation: 4}
	recs := [][]byte{
		encRecord(t, "g", setOp(e("a", 0, 1), e("a", 1, 1))),
		encRecord(t, "g", setOp(e("a", 0, 2))),
		encRecord(t, "g", delOp(a1)),
		encRecord(t, "g", metaOp(t, m1, true)),
		encRecord(t, "g", setOp(e("b", 0, 7)), delOp(a0)),
		encRecord(t, "g", clearOp()),
		encRecord(t, "g", setOp(e("a", 0, 9))),
		encRecord(t, "g", metaOp(t, m2, false)),
	}
	// live[k] is the group after its first k records, as the live actor had it; nil: no
	// file.
	type live = *state
	st := func(m GroupMeta, o map[TopicPartition]Committed) live { s := groupState(m, o); return &s }
	states := []live{
		nil,
		st(GroupMeta{}, map[TopicPartition]Committed{a0: c(1), a1: c(1)}),
		st(GroupMeta{}, map[TopicPartition]Committed{a0: c(2), a1: c(1)}),
		st(GroupMeta{}, map[TopicPartition]Committed{a0: c(2)}),
		st(m1, map[TopicPartition]Committed{a0: c(2)}),
		st(m1, map[TopicPartition]Committed{b0: c(7)}),
		nil,
		st(GroupMeta{}, map[TopicPartition]Committed{a0: c(9)}),
		st(m2, map[TopicPartition]Committed{a0: c(9)}),
	}
	run := func(t *testing.T, recs [][]byte, states []live, k, p int) {
		t.Helper()
		dir, jdir := replayDirs(t)
		if s := states[k]; s != nil {
			writeGroupFile(t, dir, "g", *s)
		}
		if p < len(recs) {
			writeSegment(t, jdir, uint64(p+1), frames(recs[p:]...))
		}
		next, err := ReplayJournal(nil, dir, jdir, zerolog.Nop())
		must(t, err)
		if p < len(recs) && next != uint64(len(recs)+1) {
			t.Fatalf("next seq %d, want %d", next, len(recs)+1)
		}
		got, exists := groupFile(t, dir, "g")
		want := states[len(states)-1]
		switch {
		case want == nil && exists:
			t.Fatalf("file at record %d, records from %d: file %+v left, want none", k, p, got)
		case want != nil && !exists:
			t.Fatalf("file at record %d, records from %d: no file", k, p)
		case want != nil && !sameState(got, *want):
			t.Fatalf("file at record %d, records from %d: replayed %+v\nwant %+v", k, p, got, *want)
		}
		if segs := segmentFilesIn(t, jdir); len(segs) != 0 {
			t.Fatalf("segments left %q", segs)
		}
	}
	// The fixture itself: replaying the first k records from nothing gives states[k].
	for k := range states {
		t.Run(fmt.Sprintf("prefix/%d", k), func(t *testing.T) { run(t, recs[:k], states[:k+1], 0, 0) })
	}
	for k := range states {
		for p := 0; p <= k && p <= len(recs); p++ {
			t.Run(fmt.Sprintf("file_at_%d/records_from_%d", k, p), func(t *testing.T) { run(t, recs, states, k, p) })
		}
	}

	// A group whose last record is a Clear: its file goes, wherever it was checkpointed.
	gone := [][]byte{
		encRecord(t, "g", setOp(e("a", 0, 1))),
		encRecord(t, "g", clearOp()),
	}
	goneStates := []live{nil, st(GroupMeta{}, map[TopicPartition]Committed{a0: c(1)}), nil}
	for k := range goneStates {
		for p := 0; p <= k; p++ {
			t.Run(fmt.Sprintf("clear_last/file_at_%d/records_from_%d", k, p), func(t *testing.T) { run(t, gone, goneStates, k, p) })
		}
	}
	// A meta saved without a reply does not create the file of a group that has none.
	noCreate := [][]byte{encRecord(t, "g", metaOp(t, m2, false))}
	t.Run("meta_no_create", func(t *testing.T) { run(t, noCreate, []live{nil, nil}, 0, 0) })
}

// TestReplayTornTail: a segment's valid frames are replayed up to a tail a crash or a
// failed write cut short (short frame, bad checksum, zeros the filesystem extended), with
// a warning; a later segment goes on. A whole frame that does not decode stops the start.
func TestReplayTornTail(t *testing.T) {
	r1 := encRecord(t, "g", setOp(entry("t", 0, 1)))
	r2 := encRecord(t, "g", setOp(entry("t", 1, 2)))
	r3 := encRecord(t, "g", setOp(entry("t", 0, 3)))
	whole := frames(r1, r2)
	badCRC := frame(r3)
	badCRC[len(badCRC)-1] ^= 0xff
	headerOnly := frame(r3)[:journal.FrameHeader]
	zeros := make([]byte, 4096)
	two := map[TopicPartition]int64{{"t", 0}: 1, {"t", 1}: 2}
	for _, tc := range []struct {
		name string
		tail []byte
		want map[TopicPartition]int64
		next uint64
		warn bool
	}{
		{"whole", nil, two, 3, false},
		{"cut short", frame(r3)[:journal.FrameHeader+len(r3)/2], two, 3, true},
		{"header only", headerOnly, two, 3, true},
		{"half a header", frame(r3)[:7], two, 3, true},
		{"bad checksum", badCRC, two, 3, true},
		{"bad checksum then zeros", append(slices.Clone(badCRC), zeros...), two, 3, true},
		{"zeros then a torn frame", append(slices.Clone(zeros), frame(r3)[:20]...), two, 3, true},
		// Zeros alone are what a crash leaves of a file the filesystem extended, and the
		// unused end of a preallocated segment: the whole frames before them replay; the
		// warning is not asserted (it is not one once segments are zero-filled ahead).
		{"zeros", zeros, two, 3, false},
		{"whole then zeros", append(frame(r3), zeros[:100]...), map[TopicPartition]int64{{"t", 0}: 3, {"t", 1}: 2}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, jdir := replayDirs(t)
			writeSegment(t, jdir, 1, append(slices.Clone(whole), tc.tail...))
			logs := &syncBuffer{}
			next, err := ReplayJournal(nil, dir, jdir, zerolog.New(logs))
			must(t, err)
			s, exists := groupFile(t, dir, "g")
			if !exists || len(s.offsets) != len(tc.want) {
				t.Fatalf("replayed %+v, want %v", s.offsets, tc.want)
			}
			for tp, o := range tc.want {
				if s.offsets[tp].Offset != o {
					t.Fatalf("replayed %v = %+v, want %d", tp, s.offsets[tp], o)
				}
			}
			got := strings.Contains(logs.String(), "offsets_journal_tail_ignored")
			if tc.warn && !got {
				t.Fatalf("torn tail not logged:\n%s", logs)
			}
			if len(tc.tail) == 0 && got {
				t.Fatalf("a whole segment logged as torn:\n%s", logs)
			}
			if next != tc.next {
				t.Fatalf("next seq %d, want %d", next, tc.next)
			}
			if segs := segmentFilesIn(t, jdir); len(segs) != 0 {
				t.Fatalf("segments left %q", segs)
			}
		})
	}

	// A write failed mid-frame and the journal went on in a new segment: both replay.
	t.Run("torn then next segment", func(t *testing.T) {
		dir, jdir := replayDirs(t)
		writeSegment(t, jdir, 1, append(frames(r1), frame(r2)[:10]...))
		writeSegment(t, jdir, 3, frames(r3, encRecord(t, "g", setOp(entry("t", 2, 4)))))
		logs := &syncBuffer{}
		next, err := ReplayJournal(nil, dir, jdir, zerolog.New(logs))
		must(t, err)
		s, _ := groupFile(t, dir, "g")
		if len(s.offsets) != 2 || s.offsets[TopicPartition{"t", 0}].Offset != 3 || s.offsets[TopicPartition{"t", 2}].Offset != 4 {
			t.Fatalf("replayed %+v", s.offsets)
		}
		if next != 5 {
			t.Fatalf("next seq %d, want 5", next)
		}
		if !strings.Contains(logs.String(), `"segment":"00000000000000000001.log"`) ||
			!strings.Contains(logs.String(), "offsets_journal_tail_ignored") {
			t.Fatalf("tail of the first segment not logged:\n%s", logs)
		}
	})

	// A frame with a good checksum that this broker cannot decode is not a torn tail:
	// replay refuses to start and leaves the journal and the files as they were.
	for name, bad := range map[string][]byte{
		"not json":      []byte("not json"),
		"unknown field": []byte(`{"group":"g","ops":[],"extra":1}`),
		"no group":      []byte(`{"ops":[]}`),
		"two changes":   []byte(`{"group":"g","ops":[{"set":[],"clear":true}]}`),
		"empty set":     []byte(`{"group":"g","ops":[{"set":[]}]}`),
		"trailing data": []byte(`{"group":"g","ops":[]} {}`),
		"negative part": encRecord(t, "g", setOp(Entry{TopicPartition{"t", -1}, Committed{}})),
		"bad meta":      encRecord(t, "g", op{Meta: []byte(`{"protocol_type":"c","generation":1,"empty_since":0,"members":[{"member_id":"m"}]}`)}),
	} {
		t.Run("undecodable/"+name, func(t *testing.T) {
			dir, jdir := replayDirs(t)
			old := groupState(GroupMeta{}, map[TopicPartition]Committed{{"t", 0}: {Offset: 100}})
			writeGroupFile(t, dir, "g", old)
			before, _ := os.ReadFile(filepath.Join(dir, "g.json"))
			seg1 := writeSegment(t, jdir, 1, frames(r1, r2))
			seg3 := writeSegment(t, jdir, 3, frames(r3, bad))
			if _, err := ReplayJournal(nil, dir, jdir, zerolog.Nop()); err == nil {
				t.Fatal("ReplayJournal accepted a record it cannot decode")
			}
			for _, p := range []string{seg1, seg3} {
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("segment gone after a failed replay: %v", err)
				}
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "g.json")); !bytes.Equal(after, before) {
				t.Fatalf("file changed by a failed replay:\n%s", after)
			}
		})
	}
}

// TestReplayUnusableFile: a group whose file cannot be read or understood keeps it byte
// for byte; its records are saved under unapplied/, one per line, with an error logged;
// the other groups of the journal are replayed.
func TestReplayUnusableFile(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, dir string) *storage.FaultFS{
		"corrupt": func(t *testing.T, dir string) *storage.FaultFS {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte("not json {"), 0o644))
			return storage.NewFaultFS(nil)
		},
		"another group": func(t *testing.T, dir string) *storage.FaultFS {
			writeGroupFile(t, dir, "other", groupState(GroupMeta{}, map[TopicPartition]Committed{{"t", 0}: {Offset: 1}}))
			must(t, os.Rename(filepath.Join(dir, "other.json"), filepath.Join(dir, "bad.json")))
			return storage.NewFaultFS(nil)
		},
		"unreadable": func(t *testing.T, dir string) *storage.FaultFS {
			writeGroupFile(t, dir, "bad", groupState(GroupMeta{}, map[TopicPartition]Committed{{"t", 0}: {Offset: 1}}))
			f := storage.NewFaultFS(nil)
			f.Before = func(op storage.Op, path string) error {
				if op == storage.OpRead && filepath.Base(path) == "bad.json" {
					return storage.ErrInjected
				}
				return nil
			}
			return f
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, jdir := replayDirs(t)
			fsys := setup(t, dir)
			before, err := os.ReadFile(filepath.Join(dir, "bad.json"))
			must(t, err)
			badRecs := [][]byte{
				encRecord(t, "bad", setOp(entry("t", 0, 5))),
				encRecord(t, "bad", delOp(TopicPartition{"t", 0}), setOp(entry("u", 1, 6))),
			}
			good1 := encRecord(t, "good", setOp(entry("t", 0, 7)))
			good2 := encRecord(t, "good", setOp(entry("t", 1, 8)))
			writeSegment(t, jdir, 1, frames(badRecs[0], good1))
			writeSegment(t, jdir, 3, frames(good2, badRecs[1]))
			logs := &syncBuffer{}
			next, err := ReplayJournal(fsys, dir, jdir, zerolog.New(logs))
			must(t, err)
			if next != 5 {
				t.Fatalf("next seq %d", next)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "bad.json")); !bytes.Equal(after, before) {
				t.Fatalf("unusable file changed:\n%s\nwas\n%s", after, before)
			}
			s, exists := groupFile(t, dir, "good")
			if !exists || len(s.offsets) != 2 || s.offsets[TopicPartition{"t", 0}].Offset != 7 || s.offsets[TopicPartition{"t", 1}].Offset != 8 {
				t.Fatalf("good group replayed %+v", s.offsets)
			}
			names, err := os.ReadDir(filepath.Join(jdir, "unapplied"))
			must(t, err)
			if len(names) != 1 || !strings.HasPrefix(names[0].Name(), "bad.json.") || !strings.HasSuffix(names[0].Name(), ".log") {
				t.Fatalf("unapplied/ holds %v", names)
			}
			saved, err := os.ReadFile(filepath.Join(jdir, "unapplied", names[0].Name()))
			must(t, err)
			var lines [][]byte
			sc := bufio.NewScanner(bytes.NewReader(saved))
			for sc.Scan() {
				lines = append(lines, slices.Clone(sc.Bytes()))
			}
			if len(lines) != len(badRecs) || !bytes.HasSuffix(saved, []byte("\n")) {
				t.Fatalf("saved records:\n%s", saved)
			}
			for i, l := range lines {
				if !bytes.Equal(l, badRecs[i]) {
					t.Fatalf("saved record %d = %s, want %s", i, l, badRecs[i])
				}
				if g, _, err := decodeRecord(l); err != nil || g != "bad" {
					t.Fatalf("saved record %d does not decode: %q %v", i, g, err)
				}
			}
			out := logs.String()
			if !strings.Contains(out, "offsets_journal_records_not_applied_file_unusable") || !strings.Contains(out, `"level":"error"`) ||
				!strings.Contains(out, `"group":"bad"`) {
				t.Fatalf("no error logged for the unusable file:\n%s", out)
			}
			if segs := segmentFilesIn(t, jdir); len(segs) != 0 {
				t.Fatalf("segments left %q", segs)
			}
			// The saved records are outside the journal: a second start does not apply them.
			if n, err := ReplayJournal(nil, dir, jdir, zerolog.Nop()); err != nil || n != 1 {
				t.Fatalf("second replay %d %v", n, err)
			}
		})
	}
}

// TestReplayMeta: a SaveMeta with members goes through the journal and replays into a
// version-2 file equal to what was sent; a DeleteAll replays as the file's removal.
func TestReplayMeta(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	meta := sampleStateMembers().meta
	if c := j.result(func(p actor.Promise) any { return &SaveMeta{Meta: meta, Reply: p} }); c != 0 {
		t.Fatalf("SaveMeta %d", c)
	}
	if got := j.commit(entry("t", 0, 4)); !codesOK(got) {
		t.Fatal(got)
	}
	// A SaveMeta without a reply is journaled too (with no_create), behind the commit.
	later := meta
	later.Generation++
	later.Members = slices.Clone(meta.Members)
	j.sys.Send(j.pid, &SaveMeta{Meta: later})
	// Queued behind the SaveMeta's append: answered, the meta is applied too.
	if got := j.commit(entry("t", 1, 5)); !codesOK(got) {
		t.Fatal(got)
	}
	if s := j.stat(); !reflect.DeepEqual(s.Meta, later) {
		t.Fatalf("stat %+v", s)
	}
	if _, exists := j.onDisk(); exists {
		t.Fatal("file written before the crash")
	}

	img := j.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	b, err := os.ReadFile(filepath.Join(Dir(img), "g.json"))
	must(t, err)
	if !bytes.HasPrefix(b, []byte(`{"version":2,`)) {
		t.Fatalf("replayed file is not version 2:\n%s", b)
	}
	s, _ := groupFile(t, Dir(img), "g")
	if !reflect.DeepEqual(s.meta, later) || len(s.offsets) != 2 || s.offsets[TopicPartition{"t", 0}].Offset != 4 ||
		s.offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Fatalf("replayed %+v\nwant meta %+v", s, later)
	}

	// The file is checkpointed, then the group deleted: replay removes the file.
	j.flushTo(j.pid)
	if _, exists := j.onDisk(); !exists {
		t.Fatal("no file after Flush")
	}
	if c := j.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != 0 {
		t.Fatalf("DeleteAll %d", c)
	}
	img = j.crashImage()
	if _, exists := groupFile(t, Dir(img), "g"); !exists {
		t.Fatal("the crash image has no file to remove (CheckpointInterval 1h)")
	}
	_, err = ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	if _, exists := groupFile(t, Dir(img), "g"); exists {
		t.Fatal("DeleteAll not replayed: the file is still there")
	}
}

// TestBatchFrameIsAllOrNothing: the journal writes a batch as one frame, so a write cut
// short anywhere leaves none of its records valid (a batch answered with an error is
// never replayed in part), and a frame whose records do not fill it exactly is not read.
func TestBatchFrameIsAllOrNothing(t *testing.T) {
	r1 := encRecord(t, "a", op{Clear: true})
	r2 := encRecord(t, "b", op{Clear: true})
	body := binary.BigEndian.AppendUint32(nil, uint32(len(r1)))
	body = append(body, r1...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(r2)))
	body = append(body, r2...)
	mk := func(body []byte) []byte {
		var h [journal.FrameHeader]byte
		binary.BigEndian.PutUint32(h[0:4], uint32(len(body)))
		binary.BigEndian.PutUint32(h[4:8], journal.Checksum(body))
		return append(h[:], body...)
	}
	whole := append(frame(r1), mk(body)...)
	recs, end := journal.ReadFrames(whole)
	if len(recs) != 3 || end != len(whole) || string(recs[2]) != string(r2) {
		t.Fatalf("whole: %d records, end %d of %d", len(recs), end, len(whole))
	}
	for cut := len(frame(r1)) + 1; cut < len(whole); cut++ {
		if recs, end := journal.ReadFrames(whole[:cut]); len(recs) != 1 || end != len(frame(r1)) {
			t.Fatalf("cut at %d: %d records, end %d", cut, len(recs), end)
		}
	}
	// Valid checksum, but the records' lengths do not add up to the frame.
	bad := append(slices.Clone(body[:len(body)-1]), 0)
	bad = binary.BigEndian.AppendUint32(bad, 7)
	if recs, end := journal.ReadFrames(append(frame(r1), mk(bad)...)); len(recs) != 1 || end != len(frame(r1)) {
		t.Fatalf("malformed frame: %d records, end %d", len(recs), end)
	}
}

// TestReplaySyncsOnceThenDeletes: replay writes the group files without an fsync each,
// makes them durable with one syncfs (or, where there is none, an fsync of each file),
// and only then deletes the segments; a failed sync fails the replay with the segments
// kept, and the next replay does it again.
func TestReplaySyncsOnceThenDeletes(t *testing.T) {
	setup := func(t *testing.T) (string, string) {
		dir, jdir := replayDirs(t)
		writeGroupFile(t, dir, "gone", groupState(GroupMeta{}, map[TopicPartition]Committed{{"t", 0}: {Offset: 1}}))
		writeSegment(t, jdir, 1, frames(
			encRecord(t, "a", setOp(entry("t", 0, 5))),
			encRecord(t, "b", setOp(entry("t", 1, 6))),
			encRecord(t, "gone", clearOp()),
		))
		return dir, jdir
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		if s, ok := groupFile(t, dir, "a"); !ok || s.offsets[TopicPartition{"t", 0}].Offset != 5 {
			t.Fatalf("a: %+v", s.offsets)
		}
		if s, ok := groupFile(t, dir, "b"); !ok || s.offsets[TopicPartition{"t", 1}].Offset != 6 {
			t.Fatalf("b: %+v", s.offsets)
		}
		if _, ok := groupFile(t, dir, "gone"); ok {
			t.Fatal("a cleared group's file is still there")
		}
	}

	t.Run("syncfs", func(t *testing.T) {
		dir, jdir := setup(t)
		fsys := storage.NewFaultFS(nil)
		_, err := ReplayJournal(fsys, dir, jdir, zerolog.Nop())
		must(t, err)
		check(t, dir)
		if fsys.Count(storage.OpSyncFS) != 1 || fsys.Count(storage.OpSync) != 0 {
			t.Fatalf("%d syncfs and %d file fsyncs, want one syncfs", fsys.Count(storage.OpSyncFS), fsys.Count(storage.OpSync))
		}
		if got := segmentFilesIn(t, jdir); len(got) != 0 {
			t.Fatalf("segments left %q", got)
		}
	})
	t.Run("no syncfs", func(t *testing.T) {
		dir, jdir := setup(t)
		fsys := storage.NewFaultFS(nil)
		fsys.FailNext(storage.OpSyncFS, errors.ErrUnsupported)
		_, err := ReplayJournal(fsys, dir, jdir, zerolog.Nop())
		must(t, err)
		check(t, dir)
		if fsys.Count(storage.OpSync) != 2 {
			t.Fatalf("%d file fsyncs, want one for each of the 2 files written", fsys.Count(storage.OpSync))
		}
	})
	// A failed sync does not stop the start: every group written stays in the journal,
	// which gets their state to serve and to write again.
	t.Run("sync fails", func(t *testing.T) {
		dir, jdir := setup(t)
		fsys := storage.NewFaultFS(nil)
		fsys.FailNext(storage.OpSyncFS, nil)
		r, err := Replay(ReplayConfig{FS: fsys, OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()})
		must(t, err)
		var unsaved []string
		for _, u := range r.Unsaved {
			unsaved = append(unsaved, u.Key)
		}
		slices.Sort(unsaved)
		if !slices.Equal(unsaved, []string{"a", "b", "gone"}) || len(r.Kept) != 1 || len(r.Kept[0].Keys) != 3 || r.Next != 4 {
			t.Fatalf("after a failed sync: unsaved %q, kept %+v, next %d", unsaved, r.Kept, r.Next)
		}
		if got := segmentFilesIn(t, jdir); len(got) != 1 {
			t.Fatalf("segments after a failed sync %q, want the one kept", got)
		}
		_, err = ReplayJournal(fsys, dir, jdir, zerolog.Nop())
		must(t, err)
		check(t, dir)
		if got := segmentFilesIn(t, jdir); len(got) != 0 {
			t.Fatalf("segments left %q", got)
		}
	})
}
