package actor

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Pending matches each answer to what was registered with its promise, once; a late or
// unknown answer finds nothing; Drain hands every waiter over oldest first.
func TestPending(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	got := make(chan string, 10)
	var pend Pending[string]
	var p1, p2, p3 Promise
	ready := make(chan struct{})
	pid := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case string:
				switch m {
				case "ask":
					p1, p2, p3 = pend.Await(ctx, "first"), pend.Await(ctx, "second"), pend.Await(ctx, "third")
					close(ready)
				case "drain":
					pend.Drain(func(v string) { got <- "drained " + v })
					got <- "done"
				}
			case *Settled:
				v, ok := pend.Take(m)
				if !ok {
					got <- "unknown"
					return
				}
				got <- v + "=" + m.Value.(string)
			}
		})
	}))
	sys.Send(pid, "ask")
	<-ready
	p2.Resolve("b")
	p2.Resolve("again") // a promise delivers its first answer only
	if v := <-got; v != "second=b" {
		t.Fatalf("got %q, want %q", v, "second=b")
	}
	sys.Send(pid, "drain")
	for _, want := range []string{"drained first", "drained third", "done"} {
		if v := <-got; v != want {
			t.Fatalf("got %q, want %q", v, want)
		}
	}
	p1.Resolve("late")
	p3.Resolve("late")
	for range 2 {
		if v := <-got; v != "unknown" {
			t.Fatalf("a drained entry answered again: %q", v)
		}
	}
	if err := sys.Stop(pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Gather hands back the answers in question order whatever order they come in; a
// question never answered gets missing(i) at the timeout; one whose actor stops gets it
// at once.
func TestGather(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	results := make(chan []any, 3)
	promises := make(chan []Promise, 3)
	missing := func(i int) any { return -i }
	type gatherMsg struct {
		timeout time.Duration
		watch   []*PID
	}
	owner := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			if m, ok := ctx.Message().(*gatherMsg); ok {
				promises <- Gather(ctx, 3, m.timeout, m.watch, missing, func(v []any) { results <- v })
			}
		})
	}))
	defer func() { _ = sys.Stop(owner, 5*time.Second) }()

	// Out of order, all answered.
	sys.Send(owner, &gatherMsg{timeout: time.Minute})
	ps := <-promises
	ps[2].Resolve(2)
	ps[0].Resolve(0)
	ps[1].Resolve(1)
	if v := <-results; v[0] != 0 || v[1] != 1 || v[2] != 2 {
		t.Fatalf("answers %v, want in question order", v)
	}

	// One never answered: missing at the timeout.
	sys.Send(owner, &gatherMsg{timeout: 50 * time.Millisecond})
	ps = <-promises
	ps[0].Resolve(10)
	ps[2].Resolve(12)
	if v := <-results; v[0] != 10 || v[1] != -1 || v[2] != 12 {
		t.Fatalf("answers %v, want the lost one filled by missing", v)
	}

	// A watched actor that stops: its answer is missing without waiting for the timeout.
	victim := sys.Spawn(PropsOf(func() Actor { return receiveFunc(func(Context) {}) }))
	sys.Send(owner, &gatherMsg{timeout: time.Hour, watch: []*PID{nil, victim, nil}})
	ps = <-promises
	ps[0].Resolve(20)
	ps[2].Resolve(22)
	if err := sys.Stop(victim, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-results:
		if v[0] != 20 || v[1] != -1 || v[2] != 22 {
			t.Fatalf("answers %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stopped actor's answer was waited for")
	}
}

// Goroutines joins what it started and refuses to start more once stopping; Background
// still runs its work (inline) after the system began shutting down.
func TestGoroutines(t *testing.T) {
	var g Goroutines
	release := make(chan struct{})
	var ran atomic.Int32
	for range 3 {
		if !g.Go(func() { <-release; ran.Add(1) }) {
			t.Fatal("refused before Stop")
		}
	}
	if g.Stop(20 * time.Millisecond) {
		t.Fatal("Stop reported every goroutine done while three were blocked")
	}
	if g.Go(func() { ran.Add(100) }) {
		t.Fatal("Go accepted work after Stop began")
	}
	close(release)
	if !g.Stop(10 * time.Second) {
		t.Fatal("Stop did not join the released goroutines")
	}
	if n := ran.Load(); n != 3 {
		t.Fatalf("%d ran, want the three started before Stop", n)
	}
}

// A waitable promise's value can be taken in place by its owner, also while it stops
// (protoactor then delivers no message of its mailbox); the value still arrives as
// *Settled. Wait gives up after its timeout.
func TestWaitablePromise(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	made := make(chan Promise, 1)
	got := make(chan any, 4)
	pid := sys.Spawn(PropsOf(func() Actor {
		var p Promise
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case string:
				if m == "make" {
					p = NewWaitable(ctx)
					if _, ok := p.Wait(10 * time.Millisecond); ok {
						got <- "a value before any Resolve"
					}
					made <- p
				}
			case *Settled:
				got <- m.Value
			case *Stopping:
				v, ok := p.Wait(10 * time.Second)
				if !ok {
					v = "timed out"
				}
				got <- v
			}
		})
	}))
	sys.Send(pid, "make")
	p := <-made
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.Resolve("late")
	}()
	if err := sys.Stop(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "late" {
		t.Fatalf("Wait while stopping got %v", v)
	}
	if _, ok := PromiseFunc(func(any) {}).Wait(time.Millisecond); ok {
		t.Fatal("Wait on a promise that is not waitable")
	}

	owner := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case string:
				made <- NewWaitable(ctx)
			case *Settled:
				got <- m.Value
			}
		})
	}))
	defer func() { _ = sys.Stop(owner, 10*time.Second) }()
	sys.Send(owner, "make")
	p = <-made
	p.Resolve("settled")
	if v := <-got; v != "settled" {
		t.Fatalf("the owner's mailbox got %v", v)
	}
	if v, ok := p.Wait(time.Second); !ok || v != "settled" {
		t.Fatalf("Wait after the Settled: %v %v", v, ok)
	}
}
