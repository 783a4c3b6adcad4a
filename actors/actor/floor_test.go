package actor

import (
	"runtime"
	"testing"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// BenchmarkActorFloor reports what an idle actor leaves in the heap once started: a
// bare protoactor one (protoactor's default mailbox, its context, PID, process and
// registry entry), the same with the lock-free mailbox kaas uses, a kaas actor (that
// plus its adapter), and a kaas actor with one child (the pair, with the parent's set
// of children that holds the child).
//
//	go test -run NONE -bench ActorFloor -benchtime 1x ./actors/actor/
func BenchmarkActorFloor(b *testing.B) {
	const n = 20_000
	for i := 0; i < b.N; i++ {
		b.ReportMetric(perActor(n, func(s *System, started chan<- struct{}) {
			pp := pa.PropsFromProducer(bare(started))
			for range n {
				s.root.Spawn(pp)
			}
		}), "protoactor_bytes/actor")
		b.ReportMetric(perActor(n, func(s *System, started chan<- struct{}) {
			pp := pa.PropsFromProducer(bare(started), pa.WithMailbox(pa.UnboundedLockfree()))
			for range n {
				s.root.Spawn(pp)
			}
		}), "protoactor_lockfree_bytes/actor")
		b.ReportMetric(perActor(n, func(s *System, started chan<- struct{}) {
			for range n {
				s.Spawn(PropsOf(func() Actor { return signals(started) }))
			}
		}), "kaas_bytes/actor")
		b.ReportMetric(perActor(n, func(s *System, started chan<- struct{}) {
			child := PropsOf(func() Actor { return receiveFunc(func(Context) {}) })
			for range n {
				s.Spawn(PropsOf(func() Actor {
					return receiveFunc(func(ctx Context) {
						if _, ok := ctx.Message().(*Started); ok {
							Spawn(ctx, child)
							started <- struct{}{}
						}
					})
				}))
			}
		}), "kaas_parent_and_child_bytes/pair")
	}
}

// bare is a protoactor actor that says when it started.
func bare(started chan<- struct{}) func() pa.Actor {
	return func() pa.Actor {
		return pa.ReceiveFunc(func(c pa.Context) {
			if _, ok := c.Message().(*pa.Started); ok {
				started <- struct{}{}
			}
		})
	}
}

// signals is a kaas actor that says when it started.
func signals(started chan<- struct{}) Actor {
	return receiveFunc(func(ctx Context) {
		if _, ok := ctx.Message().(*Started); ok {
			started <- struct{}{}
		}
	})
}

// perActor is the live heap and stacks that spawning n actors, each telling started
// once it handled its Started, leaves in a fresh system, per actor.
func perActor(n int, spawn func(*System, chan<- struct{})) float64 {
	s := NewSystem(zerolog.Nop())
	defer s.Shutdown()
	started := make(chan struct{}, n)
	before := heldBytes()
	spawn(s, started)
	for range n {
		<-started
	}
	return float64(heldBytes()-before) / float64(n)
}

func heldBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}
