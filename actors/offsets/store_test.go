package offsets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		if got.meta != s.meta || len(got.offsets) != len(s.offsets) {
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

func TestDecodeFileRejects(t *testing.T) {
	good, _ := encodeFile("g", sampleState())
	cases := map[string]string{
		"empty":          "",
		"truncated":      string(good[:len(good)/2]),
		"not json":       "garbage",
		"no version":     `{"group":"g","meta":{},"offsets":[]}`,
		"future version": `{"version":2,"group":"g","meta":{},"offsets":[]}`,
		"no group":       `{"version":1,"meta":{},"offsets":[]}`,
		"unknown field":  `{"version":1,"group":"g","meta":{},"offsets":[],"extra":1}`,
		"trailing":       `{"version":1,"group":"g","meta":{},"offsets":[]} {}`,
		"duplicate":      `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}`,
		"negative part":  `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":-1}]}`,
		"bad base64":     `{"version":1,"group":{"base64":"%%"},"meta":{},"offsets":[]}`,
		"array":          `[]`,
		"null":           `null`,
	}
	for name, in := range cases {
		if _, _, err := decodeFile([]byte(in)); err == nil {
			t.Errorf("%s: decodeFile(%q) accepted it", name, in)
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
		if err != nil || id2 != id || s2.meta != s.meta || len(s2.offsets) != len(s.offsets) {
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
	seeds := map[string][]byte{
		"valid":      good,
		"empty":      empty,
		"truncated":  good[:len(good)/3],
		"base64":     []byte(`{"version":1,"group":{"base64":"/w=="},"meta":{"protocol_type":"consumer","generation":1,"empty_since":0},"offsets":[{"topic":{"base64":"/w=="},"partition":0,"offset":1,"leader_epoch":-1,"metadata":"","commit_time":1,"expire_time":0}]}`),
		"duplicates": []byte(`{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0},{"topic":"t","partition":0}]}`),
		"version2":   []byte(`{"version":2,"group":"g","meta":{},"offsets":[]}`),
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
