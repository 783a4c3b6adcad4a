package actor

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Actors with the same options share one protoactor props however many Props they were
// spawned from; each is still built by its own producer, and a restarted child is built
// again by its own, not by another actor's of the kind.
func TestKindSharesPropsAndKeepsProducers(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	const children = 50
	type born struct{ id, incarnation int }
	births := make(chan born, 4*children)
	failures := make(chan any, children)
	strategy := RestartChildrenOf(10, 10*time.Second, func(child *PID, reason any) { failures <- reason })
	pids := make(chan []*PID, 1)
	parent := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			if _, ok := ctx.Message().(*Started); !ok {
				return
			}
			var ps []*PID
			for i := range children {
				incarnations := 0
				ps = append(ps, Spawn(ctx, PropsOf(func() Actor {
					incarnations++
					n := incarnations
					return receiveFunc(func(ctx Context) {
						switch ctx.Message() {
						case "who":
							births <- born{i, n}
						case "boom":
							panic("boom")
						}
					})
				})))
			}
			pids <- ps
		})
	}, WithSupervisor(strategy)))
	defer func() { _ = sys.Stop(parent, 5*time.Second) }()
	ps := <-pids

	next := func() born {
		select {
		case b := <-births:
			return b
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
			return born{}
		}
	}
	for i, pid := range ps {
		sys.Send(pid, "who")
		if b := next(); b != (born{i, 1}) {
			t.Fatalf("child %d answered %+v, want its own first incarnation", i, b)
		}
	}
	spawnMu.Lock()
	kinds := len(sys.disp.kinds)
	spawnMu.Unlock()
	if kinds != 2 { // the parent's kind and its children's
		t.Fatalf("%d protoactor props for 51 actors of 2 kinds", kinds)
	}

	// Restart every other child: each comes back built by its own producer.
	for i := 0; i < children; i += 2 {
		sys.Send(ps[i], "boom")
		<-failures
	}
	for i, pid := range ps {
		sys.Send(pid, "who")
		want := born{i, 1}
		if i%2 == 0 {
			want.incarnation = 2
		}
		if b := next(); b != want {
			t.Fatalf("child %d answered %+v, want %+v", i, b, want)
		}
	}
	n := 0
	reborn.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d producers left behind after the restarts", n)
	}
}
