package actor

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
)

func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// waitIdle waits until a goroutine of d is idle, and a little longer for it to reach its
// select.
func waitIdle(t *testing.T, d *dispatcher) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for d.idle.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no goroutine went idle")
		}
		time.Sleep(10 * time.Microsecond)
	}
	time.Sleep(50 * time.Microsecond)
}

// TestDispatcher: a turn that blocks does not hold up another; sequential turns run on a
// goroutine an earlier turn left idle; close lets the idle goroutines go.
func TestDispatcher(t *testing.T) {
	// Other tests of this package leave protoactor's dead-letter throttle running.
	defer goleak.VerifyNone(t, actortest.LeakOptions(goleak.IgnoreCurrent())...)
	d := newDispatcher()
	block := make(chan struct{})
	d.Schedule(func() { <-block })
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a turn waited for a blocked one")
	}
	close(block)

	ids := map[string]bool{}
	for range 100 {
		got := make(chan string)
		d.Schedule(func() { got <- goroutineID() })
		ids[<-got] = true
		waitIdle(t, d)
	}
	// A busy machine may start a goroutine now and then (the idle one not yet back in
	// its select); protoactor's own dispatcher would have run 100.
	if len(ids) > 10 {
		t.Fatalf("100 sequential turns ran on %d goroutines", len(ids))
	}
	d.close()
}

// idActor answers each chan with the goroutine its turn runs on.
type idActor struct{}

func (idActor) Receive(ctx Context) {
	if c, ok := ctx.Message().(chan string); ok {
		c <- goroutineID()
	}
}

// TestSpawnRunsOnSystemDispatcher: actors spawned through System and through Spawn from
// an actor run their turns on their system's dispatcher (protoactor's own starts a
// goroutine for every turn).
func TestSpawnRunsOnSystemDispatcher(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	top := sys.Spawn(PropsOf(func() Actor { return idActor{} }))
	children := make(chan *PID, 1)
	parent := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			if _, ok := ctx.Message().(*Started); ok {
				children <- Spawn(ctx, PropsOf(func() Actor { return idActor{} }))
			}
		})
	}))
	defer sys.Stop(parent, time.Second)
	child := <-children
	for _, pid := range []*PID{top, child} {
		ids := map[string]bool{}
		for range 50 {
			got := make(chan string, 1)
			sys.Send(pid, got)
			ids[<-got] = true
			waitIdle(t, sys.disp)
		}
		if len(ids) > 10 {
			t.Fatalf("%s: 50 turns ran on %d goroutines", pid.Id, len(ids))
		}
	}
}

type receiveFunc func(Context)

func (f receiveFunc) Receive(ctx Context) { f(ctx) }
