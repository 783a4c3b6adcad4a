package actor

import (
	"bytes"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor/actortest"
)

func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// TestDispatcher: a turn that blocks does not hold up another; sequential turns run on a
// goroutine an earlier turn left idle; close lets the idle goroutines go. In a synctest
// bubble: synctest.Wait returns once every worker is back in its select, so whether a turn
// finds an idle goroutine does not depend on how busy the machine is.
func TestDispatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDispatcher()
		block := make(chan struct{})
		first := make(chan string, 1)
		d.Schedule(func() { first <- goroutineID(); <-block })
		ran := make(chan string, 1)
		d.Schedule(func() { ran <- goroutineID() })
		var workers map[string]bool
		select {
		case id := <-ran:
			workers = map[string]bool{<-first: true, id: true}
		case <-time.After(5 * time.Second):
			t.Fatal("a turn waited for a blocked one")
		}
		close(block)

		for i := range 100 {
			synctest.Wait() // every worker idle in its select
			got := make(chan string)
			d.Schedule(func() { got <- goroutineID() })
			if id := <-got; !workers[id] {
				t.Fatalf("turn %d ran on a new goroutine %s, not on one of the idle %v", i, id, workers)
			}
		}
		d.close()
		// synctest.Test returns only once the workers have ended.
	})
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
	actortest.Bubble(t, func(t *testing.T) {
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
			synctest.Wait() // the spawns' turns done, their goroutines idle
			idle := sys.disp.idle.Load()
			ids := map[string]bool{}
			for range 50 {
				synctest.Wait()
				got := make(chan string, 1)
				sys.Send(pid, got)
				ids[<-got] = true
			}
			// Every turn ran on a goroutine an earlier one left idle: none started.
			synctest.Wait()
			if after := sys.disp.idle.Load(); idle == 0 || after != idle || len(ids) > int(idle) {
				t.Fatalf("%s: 50 turns ran on %d goroutines; idle before %d, after %d", pid.Id, len(ids), idle, after)
			}
		}
	})
}

type receiveFunc func(Context)

func (f receiveFunc) Receive(ctx Context) { f(ctx) }
