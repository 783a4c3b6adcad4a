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

// collectWaitFor tells a collect which promise is which of its answers. The manager sends
// it before it sends any partition its part, so it is always first in the mailbox.
type collectWaitFor struct {
	ids map[uint64]int
	to  []*actor.PID // by answer index; nil where the answer was preset
}

// collect is a short-lived child of the manager serving one multi-partition request: it
// gathers the partitions' answers in request order, calls finish once with all of them
// and stops. The manager, not the collect, sends the partitions their parts, so that the
// batches of pipelined produce requests reach a partition in the order they were sent:
// an idempotent producer's sequence numbers depend on it. A partition that does not answer in time (a restart
// lost the message) gets missing(i). No other actor waits on it.
type collect struct {
	results []any
	timeout time.Duration
	missing func(i int) any
	finish  func(results []any)

	ids    map[uint64]int
	to     []*actor.PID
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
	case *collectWaitFor:
		c.onWaitFor(ctx, m)
	case *actor.Settled:
		c.onSettled(ctx, m)
	case *collectTimeout:
		c.done(ctx)
	case *actor.Terminated:
		c.onTerminated(ctx, m.Who)
	}
}

func (c *collect) onStarted(ctx actor.Context) {
	c.cancel = actor.After(ctx, c.timeout, &collectTimeout{})
}

// onWaitFor also watches the partitions, so that one that stops (its topic deleted)
// before answering is not waited for until the timeout.
func (c *collect) onWaitFor(ctx actor.Context, m *collectWaitFor) {
	c.ids, c.left, c.to = m.ids, len(m.ids), m.to
	for _, pid := range c.unique() {
		ctx.Watch(pid)
	}
}

func (c *collect) unique() []*actor.PID {
	seen := map[string]bool{}
	var out []*actor.PID
	for _, pid := range c.to {
		if pid != nil && !seen[pid.Id] {
			seen[pid.Id] = true
			out = append(out, pid)
		}
	}
	return out
}

func (c *collect) onTerminated(ctx actor.Context, who *actor.PID) {
	for id, i := range c.ids {
		if c.to[i] != nil && c.to[i].Id == who.Id {
			delete(c.ids, id)
			c.results[i] = c.missing(i)
			c.left--
		}
	}
	if c.left == 0 {
		c.done(ctx)
	}
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
	for _, pid := range c.unique() {
		ctx.Unwatch(pid)
	}
	finish := c.finish
	c.finish = nil
	finish(c.results)
	ctx.Stop(ctx.Self())
}
