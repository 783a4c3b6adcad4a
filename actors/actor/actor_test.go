package actor

import (
	"errors"
	"testing"
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
