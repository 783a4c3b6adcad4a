package actor

import "sync"

// Limiter runs Background work at most n at a time, in order of arrival, for the actors
// that share it. Work waiting for its turn is an entry in a queue, where a goroutine of
// its own that waits would keep its stack (and what its closure holds) for as long: a
// burst of checkpoints of thousands of groups behind a disk held thousands of them.
type Limiter struct {
	mu      sync.Mutex
	n       int
	running int      // goroutines draining the queue
	queue   []func() // work waiting, oldest first
}

// NewLimiter makes a Limiter of n (at least 1) at a time.
func NewLimiter(n int) *Limiter { return &Limiter{n: max(n, 1)} }

// Background is actor.Background with at most n works of l running at once: work runs
// on a goroutine the actor system owns now, or once an earlier one is done, and what it
// returns goes to the actor of ctx. It reports whether the work had to wait. Once the
// system is shutting down, work that would start now runs at once in the caller, and
// with it any queued behind it.
func (l *Limiter) Background(ctx Context, work func() any) (waits bool) {
	sys, self := raw(ctx).ActorSystem(), ctx.Self()
	run := func() { sys.Root.Send(self, work()) }
	l.mu.Lock()
	if l.running >= l.n {
		l.queue = append(l.queue, run)
		l.mu.Unlock()
		return true
	}
	l.running++
	l.mu.Unlock()
	if g := goroutinesOf(ctx); g == nil || !g.Go(func() { l.drain(run) }) {
		// The system is stopping: this drain runs here, with whatever queued behind it
		// meanwhile (every queued work has a running drain ahead of it).
		l.drain(run)
	}
	return false
}

// drain runs run, then the queued works one after another until none is left.
func (l *Limiter) drain(run func()) {
	for run != nil {
		run()
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running--
			run = nil
		} else {
			run = l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
		}
		l.mu.Unlock()
	}
}
