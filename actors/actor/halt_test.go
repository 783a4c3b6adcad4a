package actor

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// Halt waits for the turn running, and no turn starts after it: a message sent then, or
// a timer that fires then, is never handled, and neither is a stop (the actor's
// Stopping never runs). On synctest's clock, so "never" is every goroutine at rest.
func TestHaltLeavesActorsWhereTheyStand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := NewSystem(zerolog.Nop())
		started, release := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		handled := make(chan any, 16)
		pid := sys.Spawn(PropsOf(func() Actor {
			return receiveFunc(func(ctx Context) {
				switch m := ctx.Message().(type) {
				case *Started:
				case string:
					if m == "block" {
						close(started)
						<-release
						finished.Store(true)
						return
					}
					handled <- m
				case *Stopping:
					handled <- "stopping"
				case *ReceiveTimeout:
					handled <- "timeout"
				}
			})
		}))
		sys.Send(pid, "before")
		if got := <-handled; got != "before" {
			t.Fatalf("handled %v, want before", got)
		}
		sys.Send(pid, "block")
		<-started
		halted := make(chan bool, 1)
		go func() { halted <- sys.Halt(time.Minute) }()
		synctest.Wait() // Halt waits for the turn that blocks
		select {
		case <-halted:
			t.Fatal("Halt returned while a turn ran")
		default:
		}
		close(release)
		if !<-halted {
			t.Fatal("Halt did not see the running turn end")
		}
		if !finished.Load() {
			t.Fatal("Halt returned before the running turn ended")
		}
		other := sys.Spawn(PropsOf(func() Actor {
			return receiveFunc(func(ctx Context) {
				if _, ok := ctx.Message().(*Started); ok {
					handled <- "spawned"
				}
			})
		}))
		sys.Send(pid, "after")
		sys.StopNow(pid)
		sys.StopNow(other)
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(handled) != 0 {
			t.Fatalf("handled %v after Halt", <-handled)
		}
		if !sys.Shutdown() {
			t.Fatal("system goroutines not joined")
		}
	})
}
