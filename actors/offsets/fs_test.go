package offsets

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/internal/testwait"
)

// A group deleted before its file was ever written, on a data dir whose offsets directory
// does not exist yet: the checkpoint (and the stop) has nothing to remove, and must not
// fail on the missing directory, or the group's records stay pinned in the journal.
func TestDeleteBeforeFirstCheckpointOnFreshDir(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval time.Duration
		flush    bool
	}{{"checkpoint tick", ckptSoon, false}, {"flush", ckptNever, true}} {
		t.Run(c.name, func(t *testing.T) {
			// The case needs the commit and the delete both made before the first
			// checkpoint: on a busy machine the tick may come first, and the run is then
			// tried again with a longer interval.
			var j *journalHarness
			for interval := c.interval; ; interval *= 4 {
				j = newJournalHarness(t, "g", interval)
				if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
					t.Fatal(got)
				}
				if code := j.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); code != 0 {
					t.Fatalf("delete answered %d", code)
				}
				_, err := os.Stat(j.dir)
				if os.IsNotExist(err) {
					break
				}
				if c.flush || interval > 10*time.Second {
					t.Fatalf("offsets directory exists before any checkpoint: %v", err)
				}
			}
			if c.flush {
				j.flushTo(j.pid)
			}
			testwait.For(t, 10*time.Second, 5*time.Millisecond, func() error {
				if pinned(j.jstat()) {
					return fmt.Errorf("the deleted group's records are still pinned; log:\n%s", j.logs.String())
				}
				return nil
			})
			if logs := j.logs.String(); strings.Contains(logs, "offsets_checkpoint_failed") {
				t.Fatalf("checkpoint failed:\n%s", logs)
			}
		})
	}
}

func pinned(st *journal.Status) bool {
	for _, groups := range st.Pinned {
		if len(groups) > 0 {
			return true
		}
	}
	return false
}
