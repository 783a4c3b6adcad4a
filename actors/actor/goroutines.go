package actor

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/extensions"
)

// Goroutines owns goroutines that run outside any actor's turn (a file write behind an
// actor, a reader on a socket, a batch of file removals), after nats-server's
// startGoRoutine: Go refuses once Stop has begun, and Stop waits for every goroutine it
// started. Each System has one (System.Go, and Background uses it); a component with
// goroutines of its own keeps its own.
type Goroutines struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Go runs f on a new goroutine, unless Stop has begun: then it returns false and f does
// not run (the caller answers whatever f would have answered).
func (g *Goroutines) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Stop refuses new goroutines and waits up to timeout for the running ones; false when
// some were still running then (they are left to finish on their own).
func (g *Goroutines) Stop(timeout time.Duration) bool {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

var goroutinesExtension = extensions.NextExtensionID()

func (g *Goroutines) ExtensionID() extensions.ExtensionID { return goroutinesExtension }

// goroutinesOf is the Goroutines of the system of ctx.
func goroutinesOf(ctx Context) *Goroutines {
	if g, ok := raw(ctx).ActorSystem().Extensions.Get(goroutinesExtension).(*Goroutines); ok {
		return g
	}
	return nil
}

// Go runs f on a goroutine of the actor system of ctx (see Goroutines). Once the system
// is shutting down, f runs at once in the caller instead, so what it answers is never
// dropped and no goroutine outlives the system.
func Go(ctx Context, f func()) {
	if g := goroutinesOf(ctx); g == nil || !g.Go(f) {
		f()
	}
}
