package actor

import (
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
)

// Call sends pid the message msg makes with a promise and blocks the calling actor until
// the promise is resolved or timeout passes. Only for a parent that stops: protoactor
// then stops its children with a system message that drops what is still in their
// mailboxes, so work a child accepted (a queued file write) is lost without a word unless
// the parent first asks the child to finish it and waits. Anywhere else an actor must
// not block: use a Promise.
func Call(ctx Context, pid *PID, msg func(Promise) any, timeout time.Duration) (any, bool) {
	ch := make(chan any, 1)
	waiter := raw(ctx).ActorSystem().Root.Spawn(pa.PropsFromFunc(func(c pa.Context) {
		if m, ok := c.Message().(*Settled); ok {
			ch <- m.Value
			c.Stop(c.Self())
		}
	}))
	ctx.Send(pid, msg(NewPromise(ctx, waiter)))
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		ctx.Stop(waiter)
		return nil, false
	}
}
