package group

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// gatherTimeout bounds how long a fan-out waits for a group's answer. Every promise is
// resolved on every path by contract; the bound is for one lost with a stopped
// mailbox, so a batched request is answered however its groups fare.
const gatherTimeout = 30 * time.Second

// gather asks n questions at once and answers reply with the n answers, in order
// (*BatchResult). ask(i, p) sends question i with p as its promise; an answer that does
// not come within gatherTimeout is missing(i).
func gather(ctx actor.Context, n int, reply actor.Promise, missing func(i int) any, ask func(i int, p actor.Promise)) {
	ps := actor.Gather(ctx, n, gatherTimeout, nil, missing, func(v []any) {
		reply.Resolve(&BatchResult{Values: v})
	})
	for i, p := range ps {
		ask(i, p)
	}
}

// failure is what r answers when it fails with code: its caller's expected shape.
func failure(r Request, code int16) any {
	var v any
	r.withReply(actor.PromiseFunc(func(x any) { v = x })).fail(code)
	return v
}

// errListTimedOut is the listing of the offsets directory not done within gatherTimeout.
var errListTimedOut = errors.New("listing the offsets directory timed out")

// lost is the answer of a request whose group did not answer in time.
var lost = kerr.CoordinatorNotAvailable.Code
