package offsets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleState() state {
	s := newState()
	s.meta = GroupMeta{ProtocolType: "consumer", Generation: 7, EmptySince: 1700000000000}
	s.offsets[TopicPartition{"t", 0}] = Committed{Offset: 42, LeaderEpoch: 3, Metadata: "m", CommitTime: 1700000000001}
	s.offsets[TopicPartition{"t", 1}] = Committed{Offset: -1, LeaderEpoch: -1, CommitTime: 5, ExpireTime: 9}
	s.offsets[TopicPartition{"\xffbad topic", 2}] = Committed{Offset: 1, LeaderEpoch: -1, Metadata: "\x00\xfe\"quote\\"}
	s.offsets[TopicPartition{"ünï", 0}] = Committed{Offset: 1 << 62, Metadata: strings.Repeat("🎉", 10)}
	return s
}

func TestFileRoundTrip(t *testing.T) {
	for _, group := range []string{"g", "", "bad \xff utf8", "a/b"} {
		s := sampleState()
		b, err := encodeFile(group, s)
		if err != nil {
			t.Fatal(err)
		}
		id, got, err := decodeFile(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if id != group {
			t.Errorf("group = %q, want %q", id, group)
		}
		if !reflect.DeepEqual(got.meta, s.meta) || len(got.offsets) != len(s.offsets) {
			t.Fatalf("state = %+v, want %+v", got, s)
		}
		for tp, o := range s.offsets {
			if got.offsets[tp] != o {
				t.Errorf("%v = %+v, want %+v", tp, got.offsets[tp], o)
			}
		}
		// Equal states make equal files.
		again, _ := encodeFile(group, got)
		if !bytes.Equal(b, again) {
			t.Errorf("re-encoding differs:\n%s\n%s", b, again)
		}
	}
}

// sampleStateMembers is a Stable group saved with its generation's members.
func sampleStateMembers() state {
	s := sampleState()
	s.meta.EmptySince = 0
	s.meta.Protocol = "range"
	s.meta.Leader = "c-1"
	s.meta.Members = []MemberMeta{
		{MemberID: "c-1", ClientID: "c", ClientHost: "/127.0.0.1", SessionTimeout: 45 * time.Second,
			RebalanceTimeout: 5 * time.Minute, Subscription: []byte{0, 1, 2}, Assignment: []byte{3, 4}},
		{MemberID: "i\xff-2", InstanceID: "i\xff", ClientID: "\x00bad", ClientHost: "/::1",
			SessionTimeout: 10 * time.Millisecond, RebalanceTimeout: time.Second,
			Subscription: []byte{}, Assignment: []byte{}},
	}
	return s
}

// A group saved with members round-trips as version 2; one without members is still
// written as version 1, byte for byte what a broker reading only version 1 expects.
func TestFileRoundTripMembers(t *testing.T) {
	s := sampleStateMembers()
	b, err := encodeFile("g", s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"version":2,`)) {
		t.Fatalf("with members: %s", b)
	}
	id, got, err := decodeFile(b)
	if err != nil || id != "g" {
		t.Fatalf("decode %s: %q %v", b, id, err)
	}
	if !reflect.DeepEqual(got.meta, s.meta) {
		t.Fatalf("meta = %+v, want %+v", got.meta, s.meta)
	}
	again, _ := encodeFile("g", got)
	if !bytes.Equal(b, again) {
		t.Errorf("re-encoding differs:\n%s\n%s", b, again)
	}
	plain, _ := encodeFile("g", sampleState())
	if !bytes.HasPrefix(plain, []byte(`{"version":1,`)) || bytes.Contains(plain, []byte("members")) {
		t.Fatalf("without members: %s", plain)
	}
}

// The writer assembles the file around the cached meta; the bytes are what json.Marshal
// makes of the whole object.
func TestEncodeFileIsMarshal(t *testing.T) {
	for _, s := range []state{sampleState(), sampleStateMembers(), newState()} {
		for _, group := range []string{"g", "bad \xff", "<a&b>"} {
			got, err := encodeFile(group, s)
			if err != nil {
				t.Fatal(err)
			}
			meta, _ := encodeMeta(s.meta)
			want, err := encodeFileWith(group, s, meta)
			if err != nil {
				t.Fatal(err)
			}
			var f fileOut
			if err := json.Unmarshal(got, &f); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			f.Offsets = append([]fileOffset{}, f.Offsets...)
			m, _ := json.Marshal(f)
			if !bytes.Equal(got, want) || !bytes.Equal(got, append(m, '\n')) {
				t.Fatalf("assembled:\n%s\nmarshalled:\n%s", got, m)
			}
		}
	}
}

// A file written before members were saved still loads: no members, as before.
func TestDecodeOldFile(t *testing.T) {
	old := `{"version":1,"group":"g","meta":{"protocol_type":"consumer","generation":4,"empty_since":1700000000000},` +
		`"offsets":[{"topic":"t","partition":0,"offset":42,"leader_epoch":3,"metadata":"m","commit_time":1700000000001,"expire_time":0}]}` + "\n"
	id, s, err := decodeFile([]byte(old))
	if err != nil || id != "g" {
		t.Fatalf("decode: %q %v", id, err)
	}
	want := GroupMeta{ProtocolType: "consumer", Generation: 4, EmptySince: 1700000000000}
	if !reflect.DeepEqual(s.meta, want) || s.offsets[TopicPartition{"t", 0}].Offset != 42 {
		t.Fatalf("state %+v", s)
	}
}

func TestDecodeFileRejects(t *testing.T) {
	good, _ := encodeFile("g", sampleState())
	cases := map[string]string{
		"empty":          "",
		"truncated":      string(good[:len(good)/2]),
		"not json":       "garbage",
		"no version":     `{"group":"g","meta":{},"offsets":[]}`,
		"future version": `{"version":3,"group":"g","meta":{},"offsets":[]}`,
		"v2 no members":  `{"version":2,"group":"g","meta":{},"offsets":[]}`,
		"v1 members":     `{"version":1,"group":"g","meta":{"leader":"a","members":[{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1}]},"offsets":[]}`,
		"member twice":   `{"version":2,"group":"g","meta":{"protocol":"r","leader":"a","members":[{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1},{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1}]},"offsets":[]}`,
		"instance twice": `{"version":2,"group":"g","meta":{"protocol":"r","leader":"a","members":[{"member_id":"a","instance_id":"i","session_timeout_ms":1,"rebalance_timeout_ms":1},{"member_id":"b","instance_id":"i","session_timeout_ms":1,"rebalance_timeout_ms":1}]},"offsets":[]}`,
		"no timeouts":    `{"version":2,"group":"g","meta":{"protocol":"r","leader":"a","members":[{"member_id":"a"}]},"offsets":[]}`,
		"no protocol":    `{"version":2,"group":"g","meta":{"leader":"a","members":[{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1}]},"offsets":[]}`,
		"stray leader":   `{"version":2,"group":"g","meta":{"protocol":"r","leader":"x","members":[{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1}]},"offsets":[]}`,
		"member field":   `{"version":2,"group":"g","meta":{"protocol":"r","leader":"a","members":[{"member_id":"a","session_timeout_ms":1,"rebalance_timeout_ms":1,"x":1}]},"offsets":[]}`,
		"no group":       `{"version":1,"meta":{},"offsets":[]}`,
		"unknown field":  `{"version":1,"group":"g","meta":{},"offsets":[],"extra":1}`,
		"trailing":       `{"version":1,"group":"g","meta":{},"offsets":[]} {}`,
		"duplicate":      `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}`,
		"negative part":  `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":-1}]}`,
		"offset 2^63":    `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":9223372036854775808,"leader_epoch":-1,"commit_time":1}]}`,
		"epoch 2^31":     `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":1,"leader_epoch":2147483648,"commit_time":1}]}`,
		"offset 1.5":     `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":1.5,"leader_epoch":-1,"commit_time":1}]}`,
		"commit time -1": `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":1,"leader_epoch":-1,"commit_time":-1}]}`,
		"generation -1":  `{"version":1,"group":"g","meta":{"generation":-1},"offsets":[]}`,
		"empty since -1": `{"version":1,"group":"g","meta":{"empty_since":-1},"offsets":[]}`,
		"bad base64":     `{"version":1,"group":{"base64":"%%"},"meta":{},"offsets":[]}`,
		"array":          `[]`,
		"null":           `null`,
	}
	for name, in := range cases {
		if _, _, err := decodeFile([]byte(in)); err == nil {
			t.Errorf("%s: decodeFile(%q) accepted it", name, in)
		}
	}
	// Any int64 offset and int32 leader epoch is a value a client may commit (Apache
	// stores them unchecked): a file is judged by its structure, not by their range.
	for _, v := range []struct {
		offset int64
		epoch  int32
	}{{-1, -1}, {-2, -1}, {math.MinInt64, math.MinInt32}, {math.MaxInt64, math.MaxInt32}, {-1000, -5}} {
		in := fmt.Sprintf(`{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":%d,"leader_epoch":%d,"commit_time":1}]}`, v.offset, v.epoch)
		_, s, err := decodeFile([]byte(in))
		if err != nil {
			t.Errorf("decodeFile refused offset %d, leader epoch %d: %v", v.offset, v.epoch, err)
			continue
		}
		if got := s.offsets[TopicPartition{"t", 0}]; got.Offset != v.offset || got.LeaderEpoch != v.epoch {
			t.Errorf("offset %d, leader epoch %d decoded as %+v", v.offset, v.epoch, got)
		}
	}
}

// FuzzDecodeFile checks that the decoder never panics and that whatever it accepts
// encodes back to something it decodes to the same state. The seed corpus is under
// testdata/fuzz/FuzzDecodeFile, so plain `go test` runs it.
func FuzzDecodeFile(f *testing.F) {
	good, _ := encodeFile("g", sampleState())
	f.Add(good)
	f.Add([]byte(`{"version":1,"group":"","meta":{},"offsets":[]}`))
	withMembers, _ := encodeFile("g", sampleStateMembers())
	f.Add(withMembers)
	f.Fuzz(func(t *testing.T, b []byte) {
		id, s, err := decodeFile(b)
		if err != nil {
			return
		}
		again, err := encodeFile(id, s)
		if err != nil {
			t.Fatalf("encode of a decoded file: %v", err)
		}
		id2, s2, err := decodeFile(again)
		if err != nil || id2 != id || !reflect.DeepEqual(s2.meta, s.meta) || len(s2.offsets) != len(s.offsets) {
			t.Fatalf("round trip of %q: %q %+v %v", b, id2, s2, err)
		}
		for tp, o := range s.offsets {
			if s2.offsets[tp] != o {
				t.Fatalf("round trip of %q changed %v", b, tp)
			}
		}
	})
}

func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("KAAS_WRITE_SEEDS") == "" {
		t.Skip("set KAAS_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzDecodeFile")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFile")
	must(t, os.MkdirAll(dir, 0o755))
	good, _ := encodeFile("g", sampleState())
	empty, _ := encodeFile("", newState())
	members, _ := encodeFile("g", sampleStateMembers())
	seeds := map[string][]byte{
		"valid":      good,
		"empty":      empty,
		"truncated":  good[:len(good)/3],
		"base64":     []byte(`{"version":1,"group":{"base64":"/w=="},"meta":{"protocol_type":"consumer","generation":1,"empty_since":0},"offsets":[{"topic":{"base64":"/w=="},"partition":0,"offset":1,"leader_epoch":-1,"metadata":"","commit_time":1,"expire_time":0}]}`),
		"duplicates": []byte(`{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}`),
		"version2":   []byte(`{"version":2,"group":"g","meta":{},"offsets":[]}`),
		"members":    members,
		"negative":   []byte(`{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":-2,"leader_epoch":-1,"metadata":"","commit_time":1,"expire_time":0},{"topic":"t","partition":1,"offset":-9223372036854775808,"leader_epoch":-2147483648,"metadata":"","commit_time":1,"expire_time":0}]}`),
	}
	for name, b := range seeds {
		content := "go test fuzz v1\n[]byte(" + quoteGo(b) + ")\n"
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

func quoteGo(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			sb.WriteString(`\x`)
			sb.WriteByte("0123456789abcdef"[c>>4])
			sb.WriteByte("0123456789abcdef"[c&0xf])
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// A meta with members is encoded through the cache, made for it; one without is
// encoded afresh and drops the cache: a group that only commits keeps none.
func TestMetaCacheOnlyForMembers(t *testing.T) {
	var c *metaCache
	for _, m := range []GroupMeta{sampleStateMembers().meta, {ProtocolType: "consumer", Generation: 3}} {
		got, err := encodeMetaCached(&c, m)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := encodeMeta(m)
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded %s, want %s", got, want)
		}
		if kept := c != nil; kept != (len(m.Members) > 0) {
			t.Fatalf("%d members: cache kept %v", len(m.Members), kept)
		}
	}
}
