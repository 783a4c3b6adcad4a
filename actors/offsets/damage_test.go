package offsets

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"kaas/actors/journal"
	"kaas/internal/testwait"
	"kaas/storage"
)

// seqFrame is a journal frame as the journal writes it: flagged, with the sequence
// number of its first record.
func seqFrame(seq uint64, payloads ...[]byte) []byte {
	body := binary.BigEndian.AppendUint64(nil, seq)
	for _, p := range payloads {
		body = binary.BigEndian.AppendUint32(body, uint32(len(p)))
		body = append(body, p...)
	}
	var h [journal.FrameHeader]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(body))|journal.SeqFlag)
	binary.BigEndian.PutUint32(h[4:8], journal.Checksum(body))
	return append(h[:], body...)
}

// TestReplayDamagedMidSegment: a bad frame with valid frames after it is damage, not a
// torn tail: every valid frame replays, the segment goes to quarantine/ with a hold
// marker naming the segment's groups and those still readable in the damaged bytes,
// an error is logged and the metric counted; the hold is read again at the next start
// until the marker is removed. A bad frame followed by zeros only is still a torn tail.
func TestReplayDamagedMidSegment(t *testing.T) {
	t.Run("json", func(t *testing.T) { testReplayDamagedMidSegment(t, encodeRecord) })
	t.Run("compact", func(t *testing.T) { testReplayDamagedMidSegment(t, encodeCompactRecord) })
}

// testReplayDamagedMidSegment is TestReplayDamagedMidSegment with records of one format.
func testReplayDamagedMidSegment(t *testing.T, enc func(string, uint64, []op) ([]byte, error)) {
	r := func(group string, off int64) []byte {
		b, err := enc(group, 0, []op{setOp(entry("t", 0, off))})
		must(t, err)
		return b
	}
	flip := func(f []byte, at int) []byte {
		f = slices.Clone(f)
		f[at] ^= 0x10
		return f
	}
	mid := seqFrame(3, r("a", 49), r("lonely", 1))
	for _, tc := range []struct {
		name    string
		damaged []byte
	}{
		{"payload bit", flip(mid, len(mid)-3)},
		{"length bit", flip(mid, 2)},
		{"checksum bit", flip(mid, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, jdir := replayDirs(t)
			seg := slices.Concat(seqFrame(1, r("a", 10)), seqFrame(2, r("b", 20)), tc.damaged,
				seqFrame(5, r("a", 100)), seqFrame(6, r("c", 30)), make([]byte, 4096))
			path := writeSegment(t, jdir, 1, seg)
			logs := &syncBuffer{}
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			out, err := Replay(ReplayConfig{OffsetsDir: dir, JournalDir: jdir, Log: zerolog.New(logs), Metrics: m})
			must(t, err)
			for g, want := range map[string]int64{"a": 100, "b": 20, "c": 30} {
				if s, ok := groupFile(t, dir, g); !ok || s.offsets[TopicPartition{"t", 0}].Offset != want {
					t.Fatalf("group %s replayed %+v, want %d", g, s.offsets, want)
				}
			}
			if out.Next != 7 {
				t.Fatalf("next seq %d, want 7", out.Next)
			}
			marker := filepath.Join(journal.QuarantineDir(jdir), journal.SegmentName(1)+heldSuffix)
			// The segment's groups, and "lonely", whose only record is in the damaged
			// frame: the damaged bytes still name it.
			held := []string{"a", "b", "c", "lonely"}
			for _, g := range held {
				if !slices.Equal(out.Held[g], []string{marker}) {
					t.Fatalf("group %s held by %q, want the marker (held: %v)", g, out.Held[g], out.Held)
				}
			}
			if len(out.Held) != len(held) {
				t.Fatalf("held %v, want %v", out.Held, held)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("damaged segment left in the journal (err %v)", err)
			}
			if b, err := os.ReadFile(filepath.Join(journal.QuarantineDir(jdir), journal.SegmentName(1))); err != nil || len(b) != len(seg) {
				t.Fatalf("damaged segment not kept whole in quarantine: %d bytes, %v", len(b), err)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), `"level":"error"`) ||
				!strings.Contains(logs.String(), "offsets_journal_damaged_mid_segment_groups_held_until_marker_removed") ||
				!strings.Contains(logs.String(), `"records_lost":2`) {
				t.Fatalf("damage not logged as an error with the records lost:\n%s", logs)
			}
			if got := counterValue(m.corruptFrames); got != 1 {
				t.Fatalf("kaas_offsets_journal_corrupt_frames_total = %v, want 1", got)
			}

			// The next start holds the same groups while the marker is there.
			again, err := Replay(ReplayConfig{OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()})
			must(t, err)
			if len(again.Held) != len(held) {
				t.Fatalf("held at the next start %v, want %v", again.Held, held)
			}
			must(t, os.Remove(marker))
			again, err = Replay(ReplayConfig{OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()})
			must(t, err)
			if len(again.Held) != 0 {
				t.Fatalf("held after the marker went: %v", again.Held)
			}
		})
	}

	// The last frame bad and only zeros after it: a torn write, as before. Nothing is
	// held and nothing quarantined.
	t.Run("torn tail", func(t *testing.T) {
		dir, jdir := replayDirs(t)
		seg := slices.Concat(seqFrame(1, r("a", 10)), seqFrame(2, r("a", 20)), flip(seqFrame(3, r("a", 30)), 20), make([]byte, 4096))
		writeSegment(t, jdir, 1, seg)
		logs := &syncBuffer{}
		out, err := Replay(ReplayConfig{OffsetsDir: dir, JournalDir: jdir, Log: zerolog.New(logs)})
		must(t, err)
		if s, _ := groupFile(t, dir, "a"); s.offsets[TopicPartition{"t", 0}].Offset != 20 {
			t.Fatalf("replayed %+v, want 20", s.offsets)
		}
		if len(out.Held) != 0 || out.Next != 3 {
			t.Fatalf("torn tail: held %v, next %d", out.Held, out.Next)
		}
		if !strings.Contains(logs.String(), "offsets_journal_tail_ignored") || strings.Contains(logs.String(), `"level":"error"`) {
			t.Fatalf("torn tail logged as:\n%s", logs)
		}
		if _, err := os.Stat(journal.QuarantineDir(jdir)); !os.IsNotExist(err) {
			t.Fatalf("quarantine made for a torn tail (err %v)", err)
		}
	})
}

// TestJournalWritesSeqFrames: what the journal writes reads back through journal.ScanSegment
// with each record's sequence number.
func TestJournalWritesSeqFrames(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	for o := int64(1); o <= 3; o++ {
		if got := j.commit(entry("t", 0, o)); !codesOK(got) {
			t.Fatalf("commit codes %v", got)
		}
	}
	var seqs []uint64
	for _, name := range j.segmentFiles() {
		first, _ := journal.ParseSegmentName(name)
		b, err := os.ReadFile(filepath.Join(j.jdir, name))
		must(t, err)
		sc := journal.ScanSegment(b, first)
		if sc.Tail >= 0 || len(sc.Damaged) > 0 {
			t.Fatalf("segment %s: tail %d damaged %+v", name, sc.Tail, sc.Damaged)
		}
		for _, r := range sc.Records {
			seqs = append(seqs, r.Seq)
		}
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("sequence numbers %v", seqs)
	}
}

// TestJournalReservesNothingAtStart: a journal with no appends yet has made no file: a
// broker started on a full volume does not fill it with a spare segment.
func TestJournalReservesNothingAtStart(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	_ = j.jstat() // the journal has started
	if names, err := os.ReadDir(j.jdir); err == nil && len(names) > 0 {
		t.Fatalf("journal directory before any append: %v", names)
	}
}

// TestJournalFailedWritesLeaveNoFiles: appends that fail on a disk that refuses every
// write leave no empty segment behind each, also behind a segment that a group pins, and
// are logged once per interval.
func TestJournalFailedWritesLeaveNoFiles(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatalf("commit codes %v", got)
	}
	j.fs.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpWrite && strings.HasPrefix(path, j.jdir) {
			return syscall.ENOSPC
		}
		return nil
	})
	for o := int64(1); o <= 20; o++ {
		if got := j.commit(entry("t", 0, o)); !slices.Equal(got, []int16{codeWriteFailed}) {
			t.Fatalf("commit %d on a full disk: %v", o, got)
		}
	}
	names, _ := os.ReadDir(j.jdir)
	if len(names) > 2 {
		t.Fatalf("20 failed appends left %d files: %v", len(names), names)
	}
	if n := strings.Count(j.logs.String(), `"offsets_journal_write_failed"`); n != 1 {
		t.Fatalf("20 failed appends logged %d times", n)
	}
	j.fs.SetBefore(nil)
	// Each try is a commit answered: the retries need no pause of their own.
	testwait.For(t, 10*time.Second, 0, func() error {
		if got := j.commit(entry("t", 0, 99)); !codesOK(got) {
			return fmt.Errorf("commit once the disk takes writes: %v", got)
		}
		return nil
	})
}
