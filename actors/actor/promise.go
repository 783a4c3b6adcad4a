package actor

import (
	"sync"
	"sync/atomic"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
)

// Promise is the way a parked request is answered later: the actor that owns the waiting
// caller (a connection) hands a Promise to the actor that decides (a group), which keeps
// it — for a JoinGroup until the round completes — and calls Resolve exactly once on every
// path: success, an error code, eviction, fencing, stop or restart.
//
// Resolve posts a *Settled carrying the promise's ID back to the owner's mailbox, so the
// owner matches the answer to its request without a future process per call. Only the
// first Resolve of a promise (through any copy of it) answers: a later one does nothing,
// so a request that two exit paths answer (a panic's, then a restart's) is answered once.
type Promise struct {
	sys *pa.ActorSystem
	to  *pa.PID
	id  uint64
	fn  func(any)     // a PromiseFunc's
	st  *promiseState // shared by the copies
}

// promiseState is what the copies of a promise share: whether it was resolved, and for a
// waitable one (NewWaitable) its value.
type promiseState struct {
	done  atomic.Bool
	value chan any // buffered, one slot; nil unless waitable
}

// Settled is what Resolve delivers to the promise's owner.
type Settled struct {
	ID    uint64
	Value any
}

var promiseIDs atomic.Uint64

// NewPromise makes a promise that delivers to owner; ctx is the owner's context.
func NewPromise(ctx Context, owner *PID) Promise {
	return promiseTo(raw(ctx).ActorSystem(), owner, promiseIDs.Add(1))
}

// PromiseTo makes a promise delivering to owner from outside an actor (tests, main).
func (s *System) PromiseTo(owner *PID) Promise {
	return promiseTo(s.sys, owner, promiseIDs.Add(1))
}

func promiseTo(sys *pa.ActorSystem, owner *PID, id uint64) Promise {
	return Promise{sys: sys, to: owner, id: id, st: &promiseState{}}
}

// NewWaitable makes a promise to the actor of ctx, like NewPromise, whose value the
// actor can also take in place with Wait: for an answer it may need while it stops or
// restarts, when protoactor no longer delivers its mailbox (the offsets actor waiting
// for the journal's fsync of its last batches).
func NewWaitable(ctx Context) Promise {
	p := NewPromise(ctx, ctx.Self())
	p.st.value = make(chan any, 1)
	return p
}

// Wait returns the value of a promise made by NewWaitable, waiting up to timeout for it;
// false when it did not come (or the promise is not waitable). It takes the value once;
// the value also arrives as *Settled, like any promise's.
func (p Promise) Wait(timeout time.Duration) (any, bool) {
	if p.st == nil || p.st.value == nil {
		return nil, false
	}
	select {
	case v := <-p.st.value:
		return v, true
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-p.st.value:
		return v, true
	case <-t.C:
		return nil, false
	}
}

// PromiseFunc is a promise whose Resolve calls f at once, on the resolver's goroutine:
// for taking the value a request's own failure path produces (Gather's missing), never
// for handing to another actor.
func PromiseFunc(f func(v any)) Promise {
	return Promise{fn: f, id: promiseIDs.Add(1), st: &promiseState{}}
}

// ID identifies the promise to its owner.
func (p Promise) ID() uint64 { return p.id }

// Valid reports whether the promise was made (the zero Promise resolves nowhere).
func (p Promise) Valid() bool { return p.to != nil || p.fn != nil }

// Resolve answers the waiter, unless the promise was resolved before. Calling it on the
// zero Promise does nothing.
func (p Promise) Resolve(v any) {
	if p.st == nil || !p.st.done.CompareAndSwap(false, true) {
		return
	}
	if p.st.value != nil {
		p.st.value <- v
	}
	if p.fn != nil {
		p.fn(v)
		return
	}
	if p.to == nil {
		return
	}
	p.sys.Root.Send(p.to, &Settled{ID: p.id, Value: v})
}

// Waiter is a channel-backed promise for callers outside the actor system (tests,
// the HTTP side): Resolve on its Promise arrives on C.
type Waiter struct {
	Promise Promise
	C       <-chan any
	pid     *pa.PID
	sys     *System
}

// NewWaiter spawns a tiny actor that forwards the settled value to a channel.
func (s *System) NewWaiter() *Waiter {
	ch := make(chan any, 1)
	pid := s.root.Spawn(pa.PropsFromFunc(func(c pa.Context) {
		if m, ok := c.Message().(*Settled); ok {
			select {
			case ch <- m.Value:
			default:
			}
			c.Stop(c.Self())
		}
	}))
	return &Waiter{Promise: s.PromiseTo(pid), C: ch, pid: pid, sys: s}
}

// Wait returns the settled value or false after timeout.
func (w *Waiter) Wait(timeout time.Duration) (any, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-w.C:
		return v, true
	case <-t.C:
		w.sys.root.Stop(w.pid)
		return nil, false
	}
}

// Cancel stops a timer. A message already queued is not recalled: every timer message
// carries a guard (member, generation, sequence) that its handler checks.
type Cancel func()

// After sends msg to the actor itself after d. Timers are plain time.AfterFunc underneath:
// they outlive the actor, so cancel them on Stopping and Restarting.
//
// The timer goroutine sends through the system's root, never through ctx: a context is
// the actor's to use in its own turn only.
func After(ctx Context, d time.Duration, msg any) Cancel {
	root, self := raw(ctx).ActorSystem().Root, ctx.Self()
	if f := faults.Load(); f != nil {
		return afterFaulty(f.f, root, self, d, msg)
	}
	t := time.AfterFunc(d, func() { root.Send(self, msg) })
	return func() { t.Stop() }
}

// Every sends msg to the actor itself every d, until cancelled.
func Every(ctx Context, d time.Duration, msg any) Cancel {
	root, self := raw(ctx).ActorSystem().Root, ctx.Self()
	r := &repeat{}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t = time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.stopped {
			return
		}
		root.Send(self, msg)
		r.t.Reset(d)
	})
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stopped = true
		r.t.Stop()
	}
}

// repeat is one Every timer: the mutex orders its firing against its cancelling.
type repeat struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// afterFaulty is After with an injector: the timer may fire late, or twice (both sends at
// once, as a timer message already queued when its cancel came: the second is not
// recalled by a cancel the first one caused).
func afterFaulty(f Faults, root *pa.RootContext, self *PID, d time.Duration, msg any) Cancel {
	late, twice := f.Timer(msg, d)
	t := time.AfterFunc(late, func() {
		root.Send(self, msg)
		if twice {
			root.Send(self, msg)
		}
	})
	return func() { t.Stop() }
}
