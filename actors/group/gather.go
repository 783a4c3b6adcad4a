package group

import (
	"kaas/actors/actor"
)

// gather asks n questions at once and answers reply with the n answers, in order
// (*BatchResult). ask(i, p) sends question i with p as its promise. The answers are
// collected by a small child actor of ctx that stops once it has them all; every promise
// is resolved exactly once by contract, so it always finishes.
func gather(ctx actor.Context, n int, reply actor.Promise, ask func(i int, p actor.Promise)) {
	if n == 0 {
		reply.Resolve(&BatchResult{})
		return
	}
	c := &collector{values: make([]any, n), index: make(map[uint64]int, n), left: n, reply: reply}
	pid := actor.Spawn(ctx, actor.PropsOf(func() actor.Actor { return c }))
	ps := make([]actor.Promise, n)
	for i := range ps {
		ps[i] = actor.NewPromise(ctx, pid)
		c.index[ps[i].ID()] = i
	}
	// The index is complete before the first question leaves, and the collector reads it
	// only after a mailbox hand-off.
	for i, p := range ps {
		ask(i, p)
	}
}

type collector struct {
	values []any
	index  map[uint64]int
	left   int
	reply  actor.Promise
}

func (c *collector) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*actor.Settled)
	if !ok {
		return
	}
	i, ok := c.index[m.ID]
	if !ok {
		return
	}
	delete(c.index, m.ID)
	c.values[i] = m.Value
	c.left--
	if c.left == 0 {
		c.reply.Resolve(&BatchResult{Values: c.values})
		ctx.Stop(ctx.Self())
	}
}
