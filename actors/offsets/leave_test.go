package offsets

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
)

// TestLeaveToJournalStopWritesNoFile: once the broker stops with LeaveToJournal, a
// commit acknowledged before it is answered by Flush and the actor stops without a
// group file write; the journal's segment still holds it after the journal stopped, and
// the replay at the next start brings it back. Before that, with LeaveToJournal
// reporting false, a Flush writes the file as it always did.
func TestLeaveToJournalStopWritesNoFile(t *testing.T) {
	var leaving atomic.Bool
	j := startHarness(t, "g", ckptNever, nil, []func(*Config){func(c *Config) { c.LeaveToJournal = leaving.Load }})
	if got := j.commit(entry("t", 0, 5)); !codesOK(got) {
		t.Fatal(got)
	}
	if code := j.result(func(p actor.Promise) any { return &Flush{Reply: p} }); code != 0 {
		t.Fatalf("flush: %d", code)
	}
	if s, ok := j.onDisk(); !ok || s.offsets[TopicPartition{"t", 0}].Offset != 5 {
		t.Fatalf("a Flush while the broker runs left the file %+v (exists %v)", s.offsets, ok)
	}

	leaving.Store(true)
	if got := j.commit(entry("t", 0, 6), entry("t", 1, 7)); !codesOK(got) {
		t.Fatal(got)
	}
	if code := j.result(func(p actor.Promise) any { return &Flush{Reply: p} }); code != 0 {
		t.Fatalf("flush: %d", code)
	}
	must(t, j.sys.Poison(j.pid, waitFor))
	must(t, j.sys.Poison(j.jpid, waitFor))
	if s, _ := j.onDisk(); s.offsets[TopicPartition{"t", 0}].Offset != 5 || len(s.offsets) != 1 {
		t.Fatalf("the stop wrote the group file: %+v", s.offsets)
	}
	if segs, _ := filepath.Glob(filepath.Join(j.jdir, "*.log")); len(segs) == 0 {
		t.Fatal("no journal segment left: the acknowledged commits are nowhere")
	}
	if _, err := ReplayJournal(nil, j.dir, j.jdir, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	s, ok := j.onDisk()
	if !ok || s.offsets[TopicPartition{"t", 0}].Offset != 6 || s.offsets[TopicPartition{"t", 1}].Offset != 7 {
		t.Fatalf("after the replay the file holds %+v (exists %v), want t-0 at 6 and t-1 at 7", s.offsets, ok)
	}
}
