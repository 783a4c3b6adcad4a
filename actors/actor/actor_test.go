package actor

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// Stop and Poison return once their timeout passes, whatever the actor does: a stop
// that waits on an actor stuck in Receive must not hang the broker's graceful stop.
func TestStopHonoursItsTimeout(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	stuck := func() *PID {
		return sys.Spawn(PropsOf(func() Actor {
			return receiveFunc(func(ctx Context) {
				if _, ok := ctx.Message().(string); ok {
					entered <- struct{}{}
					<-release
				}
			})
		}))
	}
	a, b := stuck(), stuck()
	sys.Send(a, "block")
	sys.Send(b, "block")
	<-entered
	<-entered
	for name, stop := range map[string]func() error{
		"Stop":   func() error { return sys.Stop(a, 50*time.Millisecond) },
		"Poison": func() error { return sys.Poison(b, 50*time.Millisecond) },
	} {
		done := make(chan error, 1)
		go func() { done <- stop() }()
		select {
		case err := <-done:
			if !errors.Is(err, errTimeout) {
				t.Fatalf("%s of a stuck actor: %v, want the timeout", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s ignored its timeout", name)
		}
	}
	close(release)
	if err := sys.Stop(a, 10*time.Second); err != nil {
		t.Fatalf("stop after release: %v", err)
	}
}

// A Tick-marked message does not count as activity: the idle timeout still fires while
// the tick keeps coming.
func TestTickDoesNotResetTheReceiveTimeout(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	type tick struct{ Tick }
	timedOut := make(chan struct{})
	pid := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch ctx.Message().(type) {
			case *Started:
				ctx.SetReceiveTimeout(100 * time.Millisecond)
				Every(ctx, 10*time.Millisecond, &tick{})
			case *ReceiveTimeout:
				close(timedOut)
				ctx.SetReceiveTimeout(0)
			}
		})
	}))
	defer func() { _ = sys.Stop(pid, 5*time.Second) }()
	select {
	case <-timedOut:
	case <-time.After(10 * time.Second):
		t.Fatal("ticks every 10 ms kept a 100 ms receive timeout from firing")
	}
}

// Ordinary messages hold the receive timeout off; it fires exactly the timeout after the
// last one, once per SetReceiveTimeout. On synctest's fake clock, so durations are exact.
// (protoactor's own timeout wrote the actor's fields from its timer goroutine while the
// actor ran: under -race TestTickDoesNotResetTheReceiveTimeout failed with it.)
func TestReceiveTimeoutFollowsActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := NewSystem(zerolog.Nop())
		defer sys.Shutdown()
		timeouts := make(chan time.Time, 4)
		pid := sys.Spawn(PropsOf(func() Actor {
			return receiveFunc(func(ctx Context) {
				switch ctx.Message().(type) {
				case *Started:
					ctx.SetReceiveTimeout(200 * time.Millisecond)
				case *ReceiveTimeout:
					timeouts <- time.Now()
				}
			})
		}))
		for range 30 {
			sys.Send(pid, "busy")
			time.Sleep(20 * time.Millisecond)
		}
		synctest.Wait()
		if len(timeouts) != 0 {
			t.Fatal("timed out while a message came every 20 ms")
		}
		sys.Send(pid, "last")
		synctest.Wait()
		last := time.Now()
		at := <-timeouts
		if got := at.Sub(last); got != 200*time.Millisecond {
			t.Fatalf("timed out %v after the last message, want 200ms", got)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(timeouts) != 0 {
			t.Fatal("a second timeout without SetReceiveTimeout again")
		}
		if err := sys.Stop(pid, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// ResumeChildren keeps a panicking child's state: the message it panicked on is dropped,
// the next one sees what the child had before.
func TestResumeChildrenKeepsState(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	counts := make(chan int, 4)
	failures := make(chan any, 1)
	var child *PID
	spawned := make(chan struct{})
	parent := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			if _, ok := ctx.Message().(*Started); ok {
				child = Spawn(ctx, PropsOf(func() Actor {
					n := 0 // a fresh incarnation would start again from 0
					return receiveFunc(func(ctx Context) {
						switch ctx.Message() {
						case "inc":
							n++
							counts <- n
						case "boom":
							panic("boom")
						}
					})
				}))
				close(spawned)
			}
		})
	}, WithSupervisor(ResumeChildren(func(r any) { failures <- r }))))
	defer func() { _ = sys.Stop(parent, 5*time.Second) }()
	<-spawned
	sys.Send(child, "inc")
	sys.Send(child, "boom")
	sys.Send(child, "inc")
	next := func() int {
		select {
		case n := <-counts:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("no count")
			return 0
		}
	}
	if got := next(); got != 1 {
		t.Fatalf("first count %d", got)
	}
	if got := next(); got != 2 {
		t.Fatalf("after the panic: count %d, want 2 (state kept)", got)
	}
	if r := <-failures; r != "boom" {
		t.Fatalf("failure %v", r)
	}
}
