package fence

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func newTestFile(t *testing.T, dir string, self int32) *File {
	t.Helper()
	return NewFile(FileConfig{Dir: dir, Self: self, Peers: []int32{0, 1}, Duration: 600 * time.Millisecond,
		Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
}

// waitFor waits on f's change signal until cond holds (bounded).
func waitFor(t *testing.T, f Fence, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-f.Changes():
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestFileFenceSecondHolderOfOneIDRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a := newTestFile(t, dir, 0)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if !Valid(a) {
		t.Fatal("a started fence is not valid")
	}
	again := newTestFile(t, dir, 0)
	if err := again.Start(context.Background()); err == nil {
		again.Stop()
		t.Fatal("a second fence with the same id started")
	}
}

func TestFileFencePeerStoppedIsLapsedAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a, b := newTestFile(t, dir, 0), newTestFile(t, dir, 1)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "a alive", func() bool { return !b.Lapsed(0) })
	a.Stop() // its lock is released, as a kill -9 does
	waitFor(t, b, "a lapsed", func() bool { return b.Lapsed(0) })
}

// A paused holder keeps its lock but stops renewing: its peer sees it lapse after the
// lease duration, and by then the holder's own permission has ended.
func TestFileFencePausedHolderLapses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a, b := newTestFile(t, dir, 0), newTestFile(t, dir, 1)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "a alive", func() bool { return !b.Lapsed(0) })
	// Pause: the renew loop stops, the lock stays held.
	a.cancel()
	a.wg.Wait()
	waitFor(t, b, "paused a lapsed", func() bool { return b.Lapsed(0) })
	if Valid(a) {
		t.Fatal("the paused holder still thinks it may write after its peer saw it lapse")
	}
	if a.lockFree(0) {
		t.Fatal("the paused holder's lock should still be held")
	}
}

func TestFileFenceTermGrowsAfterALapse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a := newTestFile(t, dir, 0)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	term := a.Term()
	a.mu.Lock()
	a.validTil = time.Now().Add(-time.Millisecond) // as after a pause past the lease
	a.mu.Unlock()
	waitFor(t, a, "renewed", func() bool { return Valid(a) })
	if a.Term() != term+1 {
		t.Fatalf("term %d after a lapse and a renewal, want %d", a.Term(), term+1)
	}
}

// A broker beyond the configured peers (scaled away by a helm upgrade that shrinks the
// cluster, still stopping) is watched too: alive while it holds its lock and renews,
// lapsed once it stops. Before, any id outside the peers was lapsed at once.
func TestFileFenceWatchesBrokerBeyondPeers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	b := newTestFile(t, dir, 1) // peers 0 and 1
	beyond := NewFile(FileConfig{Dir: dir, Self: 3, Peers: []int32{0, 1, 2, 3}, Duration: 600 * time.Millisecond,
		Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
	if err := beyond.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "broker 3 alive", func() bool { return !b.Lapsed(3) })
	beyond.Stop()
	waitFor(t, b, "broker 3 lapsed", func() bool { return b.Lapsed(3) })
}
