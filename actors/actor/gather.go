package actor

import "time"

// Gather collects n answers at once for the actor of ctx. It returns the n promises, one
// per question, for the caller to send with its questions in whatever order it needs (a
// topics manager keeps the order of pipelined produces per partition), and calls finish
// once, in a short-lived child actor of ctx, with the answers in question order.
//
// Every answer comes, or its place gets missing(i): when timeout passes, or when the
// actor watch[i] (if watch is not nil and watch[i] is set) stops before answering, as a
// partition whose topic was deleted does. finish runs in the collector, not in the
// caller's actor: it may resolve promises and send messages, and must touch no state of
// the caller. A timeout of 0 or less waits as long as it takes (for answers that are
// promised on every path).
func Gather(ctx Context, n int, timeout time.Duration, watch []*PID, missing func(i int) any, finish func([]any)) []Promise {
	if n == 0 {
		finish(nil)
		return nil
	}
	g := &gatherer{
		results: make([]any, n),
		index:   make(map[uint64]int, n),
		left:    n,
		timeout: timeout,
		watch:   watch,
		missing: missing,
		finish:  finish,
	}
	// The promise ids are taken before the collector exists, so its index is complete
	// when it starts: it needs no message telling it which answer is which.
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = promiseIDs.Add(1)
		g.index[ids[i]] = i
	}
	pid := Spawn(ctx, PropsOf(func() Actor { return g }))
	sys := raw(ctx).ActorSystem()
	ps := make([]Promise, n)
	for i, id := range ids {
		ps[i] = promiseTo(sys, pid, id)
	}
	return ps
}

type gatherTimeout struct{}

type gatherer struct {
	results []any
	index   map[uint64]int
	left    int
	timeout time.Duration
	watch   []*PID
	missing func(i int) any
	finish  func([]any)
	cancel  Cancel
}

func (g *gatherer) Receive(ctx Context) {
	switch m := ctx.Message().(type) {
	case *Started:
		if g.timeout > 0 {
			g.cancel = After(ctx, g.timeout, &gatherTimeout{})
		}
		for _, pid := range g.watched() {
			ctx.Watch(pid)
		}
	case *Settled:
		i, ok := g.index[m.ID]
		if !ok {
			return
		}
		delete(g.index, m.ID)
		g.results[i] = m.Value
		if g.left--; g.left == 0 {
			g.done(ctx)
		}
	case *Terminated:
		for id, i := range g.index {
			if w := g.watchOf(i); w != nil && w.Id == m.Who.Id {
				delete(g.index, id)
				g.results[i] = g.missing(i)
				g.left--
			}
		}
		if g.left == 0 {
			g.done(ctx)
		}
	case *gatherTimeout, *Stopping:
		g.done(ctx)
	}
}

func (g *gatherer) watchOf(i int) *PID {
	if i < len(g.watch) {
		return g.watch[i]
	}
	return nil
}

// watched is watch without nils and repeats.
func (g *gatherer) watched() []*PID {
	seen := map[string]bool{}
	var out []*PID
	for _, pid := range g.watch {
		if pid != nil && !seen[pid.Id] {
			seen[pid.Id] = true
			out = append(out, pid)
		}
	}
	return out
}

// done finishes once, filling what never came.
func (g *gatherer) done(ctx Context) {
	if g.finish == nil {
		return
	}
	if g.cancel != nil {
		g.cancel()
	}
	for _, i := range g.index {
		g.results[i] = g.missing(i)
	}
	g.index = nil
	for _, pid := range g.watched() {
		ctx.Unwatch(pid)
	}
	finish := g.finish
	g.finish = nil
	finish(g.results)
	ctx.Stop(ctx.Self())
}
