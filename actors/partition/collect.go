package partition

import (
	"time"

	"kaas/actors/actor"
)

// ask is one partition's part of a request: the message to send it (made around the
// promise its answer comes back through). A nil to means the answer is already known
// (an unknown topic) and preset.
type ask struct {
	to  *actor.PID
	msg func(actor.Promise) any
}

// collectTimeout bounds how long a collect waits for its partitions.
type collectTimeout struct{}

// collect is a short-lived child of the manager serving one multi-partition request:
// it asks every partition at once, gathers the answers in request order, calls finish
// once with all of them and stops. A partition that does not answer in time (a restart
// lost the message) gets missing(i). No other actor waits on it.
type collect struct {
	asks    []ask
	results []any
	timeout time.Duration
	missing func(i int) any
	finish  func(results []any)

	ids    map[uint64]int
	left   int
	cancel actor.Cancel
}

func collectProps(c *collect) *actor.Props {
	return actor.PropsOf(func() actor.Actor { return c })
}

func (c *collect) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.onStarted(ctx)
	case *actor.Stopping:
		c.done(ctx)
	case *actor.Settled:
		c.onSettled(ctx, m)
	case *collectTimeout:
		c.done(ctx)
	}
}

func (c *collect) onStarted(ctx actor.Context) {
	c.ids = make(map[uint64]int, len(c.asks))
	for i, a := range c.asks {
		if a.to == nil {
			continue
		}
		p := actor.NewPromise(ctx, ctx.Self())
		c.ids[p.ID()] = i
		c.left++
		ctx.Send(a.to, a.msg(p))
	}
	if c.left == 0 {
		c.done(ctx)
		return
	}
	c.cancel = actor.After(ctx, c.timeout, &collectTimeout{})
}

func (c *collect) onSettled(ctx actor.Context, m *actor.Settled) {
	i, ok := c.ids[m.ID]
	if !ok {
		return
	}
	delete(c.ids, m.ID)
	c.results[i] = m.Value
	if c.left--; c.left == 0 {
		c.done(ctx)
	}
}

// done finishes once, filling what never came.
func (c *collect) done(ctx actor.Context) {
	if c.finish == nil {
		return
	}
	if c.cancel != nil {
		c.cancel()
	}
	for _, i := range c.ids {
		c.results[i] = c.missing(i)
	}
	c.ids = nil
	finish := c.finish
	c.finish = nil
	finish(c.results)
	ctx.Stop(ctx.Self())
}
