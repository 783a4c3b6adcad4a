package txn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/storage"
)

// writeSegment writes a journal segment holding metas from seq first, one frame each,
// followed by tail (a torn write's bytes).
func writeSegment(t *testing.T, dir string, first uint64, tail []byte, metas ...*Meta) {
	t.Helper()
	var out []byte
	for i, m := range metas {
		f := journal.StartFrame(nil)
		f = journal.AppendRecord(f, encode(m))
		journal.FinishFrame(f, first+uint64(i))
		out = append(out, f...)
	}
	out = append(out, tail...)
	if err := os.WriteFile(filepath.Join(JournalDir(dir), journal.SegmentName(first)), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReplayJournalAheadOfFiles: records newer than an id's file win, a torn tail is
// ignored, the files are written and the segments go; a second replay finds the same.
func TestReplayJournalAheadOfFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Replay(storage.OSFS{}, dir, zerolog.Nop()); err != nil { // makes the directories
		t.Fatal(err)
	}
	a0 := &Meta{ID: "a", ProducerID: 1, Epoch: 0, State: Empty, StartMs: -1}
	if err := saveID(storage.OSFS{}, IDsDir(dir), a0, 1); err != nil {
		t.Fatal(err)
	}
	a1 := a0.clone()
	a1.State, a1.Partitions = Ongoing, map[string][]int32{"t": {0}}
	b := &Meta{ID: "B/x", ProducerID: 2, Epoch: 3, State: PrepareCommit, Partitions: map[string][]int32{"u": {1}}}
	gone := &Meta{ID: "gone", ProducerID: 3, State: Dead}
	writeSegment(t, dir, 1, []byte{0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, a0, a1, b, gone)

	for round := range 2 {
		rep, err := Replay(storage.OSFS{}, dir, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		// The second replay has no record of the expired id left: it goes on after the
		// last sequence number a file holds, past every record a file could name.
		if want := uint64(5 - round); rep.Next != want {
			t.Fatalf("round %d: next %d, want %d", round, rep.Next, want)
		}
		if m := rep.States["a"]; m == nil || m.State != Ongoing || !m.has("t", 0) {
			t.Fatalf("round %d: a = %+v", round, m)
		}
		if m := rep.States["B/x"]; m == nil || m.State != PrepareCommit || m.Epoch != 3 {
			t.Fatalf("round %d: B/x = %+v", round, m)
		}
		if _, ok := rep.States["gone"]; ok || len(rep.States) != 2 {
			t.Fatalf("round %d: %d states", round, len(rep.States))
		}
		if segs, _ := segments(storage.OSFS{}, JournalDir(dir)); len(segs) != 0 {
			t.Fatalf("round %d: segments left %v", round, segs)
		}
		if _, err := os.Stat(filepath.Join(IDsDir(dir), offsets.FileName("B/x"))); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
