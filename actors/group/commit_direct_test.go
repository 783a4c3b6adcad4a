package group

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
)

// A commit goes to the offsets actor with its client's own promise (commitDirect), so it
// is not among the group's ops: when the group stops while the commit is held for an
// offsets actor that is passivating, shutdown answers it, with the stop's code for each
// of its partitions, or the client would wait for an answer that never comes.
func TestShutdownAnswersHeldDirectCommit(t *testing.T) {
	var got any
	g := &groupActor{cfg: &Config{}}
	g.offsetsHeld = []any{&offsets.Commit{
		Entries: make([]offsets.Entry, 2),
		Reply:   actor.PromiseFunc(func(v any) { got = v }),
	}}
	g.shutdown(kerr.NotCoordinator.Code)
	res, ok := got.(*offsets.CommitResult)
	if !ok {
		t.Fatalf("held commit answered %T (%v), want a CommitResult", got, got)
	}
	if len(res.Codes) != 2 || res.Codes[0] != kerr.NotCoordinator.Code || res.Codes[1] != kerr.NotCoordinator.Code {
		t.Fatalf("held commit answered %v, want NOT_COORDINATOR twice", res.Codes)
	}
}

// commitPanics makes every offsets actor's Receive panic as it takes a Commit while on.
type commitPanics struct{ on atomic.Bool }

func (p *commitPanics) Receive(a actor.Actor, msg any) bool {
	_, commit := msg.(*offsets.Commit)
	return commit && p.on.Load() && fmt.Sprintf("%T", a) == "*offsets.offsetsActor"
}

func (p *commitPanics) Timer(_ any, d time.Duration) (time.Duration, bool) { return d, false }

// An offsets actor its supervisor gives up on (more than 10 failures in 10 s) leaves
// the group without a dead PID: the group's next commit starts a new offsets actor,
// which loads the group's state, and is answered and kept.
func TestCommitAfterOffsetsActorGivenUp(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, dir, nil)
		defer h.stop()
		commitTo(t, h, "g", 5, 1)
		faults := &commitPanics{}
		defer actor.SetFaults(faults)()
		faults.on.Store(true)
		for i := 0; h.offsetsLive("g"); i++ {
			if i == 20 {
				t.Fatal("the supervisor did not give up on the offsets actor")
			}
			w := h.send(&CommitOffsets{Group: "g", Generation: -1, Entries: txnEntry("t", 0, int64(10+i))})
			if c := get[*offsets.CommitResult](t, w); c.Codes[0] == 0 {
				t.Fatalf("commit %d through a panicking offsets actor answered %v", i, c.Codes)
			}
		}
		faults.on.Store(false)
		commitTo(t, h, "g", 7, 1)
		checkFetch(t, h, "g", 7, 1)
	})
}
