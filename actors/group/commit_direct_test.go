package group

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
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
