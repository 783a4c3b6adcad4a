package actor

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
	"kaas/logs"
)

// ask is the request of these tests. Its caller takes the *Crashed itself when the
// actor handling it panics.
type ask struct {
	what  string
	reply Promise
}

func (m *ask) AnswerCrash(c *Crashed) { m.reply.Resolve(c) }

const waitLong = 10 * time.Second

// newTestSystem is a fresh actor system, shut down and checked for leaked goroutines
// when the test ends.
func newTestSystem(t *testing.T) *System {
	t.Helper()
	opts := actortest.LeakOptions(goleak.IgnoreCurrent())
	sys := NewSystem(zerolog.Nop())
	t.Cleanup(func() {
		if !sys.Shutdown() {
			t.Error("the system's goroutines did not end")
		}
		goleak.VerifyNone(t, opts...)
	})
	return sys
}

func wait(t *testing.T, w *Waiter) any {
	t.Helper()
	v, ok := w.Wait(waitLong)
	if !ok {
		t.Fatal("request not answered")
	}
	return v
}

// A panicking Receive answers the request it was handling with the crash, bounded in
// size, and supervision restarts the actor as before: the next request is served by a
// fresh incarnation.
func TestPanicAnswersTheRequest(t *testing.T) {
	sys := newTestSystem(t)
	var starts atomic.Int32
	huge := strings.Repeat("x", 1<<20)
	pid, err := sys.SpawnNamed(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case *Started:
				starts.Add(1)
			case *ask:
				switch m.what {
				case "panic":
					panic("boom")
				case "huge":
					panic(huge)
				}
				m.reply.Resolve("pong " + m.what)
			}
		})
	}), strings.Repeat("g", 64<<10)) // a group id of 64 KiB names its actor
	if err != nil {
		t.Fatal(err)
	}
	w := sys.NewWaiter()
	sys.Send(pid, &ask{what: "panic", reply: w.Promise})
	c, ok := wait(t, w).(*Crashed)
	if !ok {
		t.Fatal("the panicking request was not answered with *Crashed")
	}
	if c.Actor != logs.ID(pid.Id) || c.Message != "*actor.ask" || c.Panic != "boom" {
		t.Fatalf("crash %+v", c)
	}
	w = sys.NewWaiter()
	sys.Send(pid, &ask{what: "huge", reply: w.Promise})
	c = wait(t, w).(*Crashed)
	if n := len(c.Panic) + len(c.Actor) + len(c.Message); n > 2*logs.MaxIDBytes+200 {
		t.Fatalf("a crash of %d bytes", n)
	}
	w = sys.NewWaiter()
	sys.Send(pid, &ask{what: "next", reply: w.Promise})
	if v := wait(t, w); v != "pong next" {
		t.Fatalf("after the restarts: %v", v)
	}
	if n := starts.Load(); n != 3 {
		t.Fatalf("%d incarnations, want 3 (two restarts)", n)
	}
	if err := sys.Stop(pid, waitLong); err != nil {
		t.Fatal(err)
	}
}

// A request the actor handed on is its new holder's to answer: a panic after the
// hand-on leaves it alone. One that panics before handing on is answered.
func TestHandedOnRequestIsLeftToItsHolder(t *testing.T) {
	sys := newTestSystem(t)
	holder := sys.Spawn(PropsOf(func() Actor {
		var held []*ask
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case *ask:
				held = append(held, m)
			case string:
				for _, a := range held {
					a.reply.Resolve("held " + a.what)
				}
				held = nil
			}
		})
	}))
	restarted := make(chan struct{}, 4)
	front := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case *Restarting:
				restarted <- struct{}{}
			case *ask:
				if m.what == "early" {
					panic("before the hand-on")
				}
				ctx.Send(holder, m)
				HandedOn(ctx)
				panic("after the hand-on")
			}
		})
	}))
	early := sys.NewWaiter()
	sys.Send(front, &ask{what: "early", reply: early.Promise})
	if _, ok := wait(t, early).(*Crashed); !ok {
		t.Fatal("a request not yet handed on was not answered with the crash")
	}
	<-restarted
	late := sys.NewWaiter()
	sys.Send(front, &ask{what: "late", reply: late.Promise})
	select {
	case <-restarted:
	case <-time.After(waitLong):
		t.Fatal("no panic after the hand-on")
	}
	// The crash answer, had there been one, was sent before the restart began: the
	// holder's answer now comes first only if there was none.
	sys.Send(holder, "release")
	if v := wait(t, late); v != "held late" {
		t.Fatalf("a request handed on was answered %v", v)
	}
	for _, pid := range []*PID{front, holder} {
		if err := sys.Stop(pid, waitLong); err != nil {
			t.Fatal(err)
		}
	}
}

// A request the actor takes up again in a later turn (it had parked it) is the one a
// panic in that turn answers.
func TestHandlingAnswersTheRequestTakenUp(t *testing.T) {
	sys := newTestSystem(t)
	pid := sys.Spawn(PropsOf(func() Actor {
		var parked *ask
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case *ask:
				parked = m
				HandedOn(ctx)
			case string:
				Handling(ctx, parked)
				panic("while serving the parked request")
			}
		})
	}))
	w := sys.NewWaiter()
	sys.Send(pid, &ask{what: "parked", reply: w.Promise})
	sys.Send(pid, "serve it")
	c, ok := wait(t, w).(*Crashed)
	if !ok || c.Message != "*actor.ask" || c.Panic != "while serving the parked request" {
		t.Fatalf("the parked request was answered %#v", c)
	}
	if err := sys.Stop(pid, waitLong); err != nil {
		t.Fatal(err)
	}
}

// A promise delivers its first answer only: a second Resolve, through any copy of it,
// does nothing. So an actor that answered its request and then panicked is not heard
// twice, and neither is a request that both a panic and a restart answer.
func TestFirstAnswerWins(t *testing.T) {
	sys := newTestSystem(t)
	got := make(chan any, 8)
	owner := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			if m, ok := ctx.Message().(*Settled); ok {
				got <- m.Value
			}
		})
	}))
	next := func(want any) {
		t.Helper()
		select {
		case v := <-got:
			if v != want {
				t.Fatalf("got %v, want %v", v, want)
			}
		case <-time.After(waitLong):
			t.Fatalf("no answer, want %v", want)
		}
	}

	p := sys.PromiseTo(owner)
	copied := p
	p.Resolve(1)
	p.Resolve(2)
	copied.Resolve(3)
	sys.PromiseTo(owner).Resolve("marker")
	next(1)
	next("marker")

	calls := 0
	f := PromiseFunc(func(any) { calls++ })
	f.Resolve(1)
	f.Resolve(2)
	if calls != 1 {
		t.Fatalf("a PromiseFunc ran %d times", calls)
	}

	pid := sys.Spawn(PropsOf(func() Actor {
		var kept []*ask
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case *Restarting:
				for _, k := range kept {
					k.reply.Resolve("restarting")
				}
			case *ask:
				switch m.what {
				case "answer then panic":
					m.reply.Resolve("answered")
					panic("after answering")
				case "keep then panic":
					kept = append(kept, m) // not handed on: the crash answers first
					panic("after keeping")
				}
				m.reply.Resolve("pong")
			}
		})
	}))
	sys.Send(pid, &ask{what: "answer then panic", reply: sys.PromiseTo(owner)})
	sys.Send(pid, &ask{what: "keep then panic", reply: sys.PromiseTo(owner)})
	sys.Send(pid, &ask{what: "ping", reply: sys.PromiseTo(owner)})
	next("answered")
	select {
	case v := <-got:
		if _, ok := v.(*Crashed); !ok {
			t.Fatalf("got %v, want the crash", v)
		}
	case <-time.After(waitLong):
		t.Fatal("the kept request was not answered")
	}
	next("pong")
	select {
	case v := <-got:
		t.Fatalf("a second answer: %v", v)
	case <-time.After(50 * time.Millisecond):
	}
	for _, pid := range []*PID{pid, owner} {
		if err := sys.Stop(pid, waitLong); err != nil {
			t.Fatal(err)
		}
	}
}

// panicLogger logs its panics itself.
type panicLogger struct {
	logged chan any
}

func (a *panicLogger) Receive(ctx Context) {
	if m, ok := ctx.Message().(*ask); ok {
		panic("logged " + m.what)
	}
}

func (a *panicLogger) Panicked(_ Context, reason any) { a.logged <- reason }

// An actor that logs its own panics (with its identity fields) is handed each one in
// the panicking turn, before its request is answered.
func TestPanicHandlerSeesThePanic(t *testing.T) {
	sys := newTestSystem(t)
	logged := make(chan any, 1)
	pid := sys.Spawn(PropsOf(func() Actor { return &panicLogger{logged: logged} }))
	w := sys.NewWaiter()
	sys.Send(pid, &ask{what: "x", reply: w.Promise})
	wait(t, w)
	select {
	case r := <-logged:
		if r != "logged x" {
			t.Fatalf("logged %v", r)
		}
	default:
		t.Fatal("the panic was answered before it was logged, or not logged")
	}
	if err := sys.Stop(pid, waitLong); err != nil {
		t.Fatal(err)
	}
}

// resumer counts what it handled; it panics on "panic" and mends in Panicked by
// sending itself a note (its state and its mailbox go on).
type resumer struct {
	handled int
	starts  *atomic.Int32
	mended  chan int
}

func (a *resumer) Receive(ctx Context) {
	switch m := ctx.Message().(type) {
	case *Started:
		a.starts.Add(1)
	case *ask:
		a.handled++
		if m.what == "panic" {
			panic("resumed")
		}
		m.reply.Resolve(a.handled)
	case string:
		a.mended <- a.handled
	}
}

func (a *resumer) Panicked(ctx Context, _ any) { ctx.Send(ctx.Self(), "mended") }

// A Resume actor that panics keeps its state and its mailbox: the request it panicked
// on is answered with the crash, Panicked mends in the panicking turn, and the next
// request sees the state as the panic left it. No Restarting, no second Started.
func TestResumeKeepsTheActor(t *testing.T) {
	sys := newTestSystem(t)
	var starts atomic.Int32
	mended := make(chan int, 1)
	pid := sys.Spawn(PropsOf(func() Actor { return &resumer{starts: &starts, mended: mended} }, Resume()))
	w := sys.NewWaiter()
	sys.Send(pid, &ask{what: "first", reply: w.Promise})
	if v := wait(t, w); v != 1 {
		t.Fatalf("first %v", v)
	}
	w = sys.NewWaiter()
	sys.Send(pid, &ask{what: "panic", reply: w.Promise})
	if _, ok := wait(t, w).(*Crashed); !ok {
		t.Fatal("the request a Resume actor panicked on was not answered with the crash")
	}
	select {
	case n := <-mended:
		if n != 2 {
			t.Fatalf("mended with %d handled, want 2", n)
		}
	case <-time.After(waitLong):
		t.Fatal("Panicked did not run")
	}
	w = sys.NewWaiter()
	sys.Send(pid, &ask{what: "after", reply: w.Promise})
	if v := wait(t, w); v != 3 {
		t.Fatalf("after the panic %v, want 3: the state is kept", v)
	}
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d incarnations, want 1", n)
	}
	if err := sys.Stop(pid, waitLong); err != nil {
		t.Fatal(err)
	}
}
