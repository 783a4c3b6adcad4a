package actor

import (
	"fmt"

	"kaas/logs"
)

// A panic drops the message it came from (protoactor), and a request's caller would wait
// for an answer that never comes. So the adapter that runs each actor recovers the panic,
// answers the request the turn holds with a Crashed, and panics again for protoactor's
// supervision to restart or stop the actor as it would have.
//
// The request a turn holds is the message being handled when it is a Request. The actor
// changes that with HandedOn once the request is someone else's to answer, and with
// Handling when it takes up a request it held (parked, queued, or waiting on another
// actor's answer). A promise answers once (the first Resolve wins), so a request that
// both the crash and the actor's own Restarting answer is answered once.

// Crashed describes a panic to the request it interrupted: which actor, handling what,
// and the panic value. Each field is bounded (logs.ID): an actor's name and a panic
// value may carry client data of any size.
type Crashed struct {
	Actor   string // the actor's PID id
	Message string // the request's Go type
	Panic   string // the panic value as text
}

// Request is a message answered through a promise. AnswerCrash answers it for an actor
// that panicked while holding it, in the shape its caller takes (a result type with the
// error code that actor answers a crash with) or with c itself. It runs in the panicking
// turn and must only resolve the request's promise.
type Request interface {
	AnswerCrash(c *Crashed)
}

// PanicHandler is an actor that acts on its own panics: it logs them with its identity
// fields (a group id, a file), and one that resumes after a panic (Resume) mends what
// the turn left half done. The adapter calls Panicked in the panicking turn, where
// debug.Stack is still the panic's, before it answers the request.
type PanicHandler interface {
	Panicked(ctx Context, reason any)
}

// Handling makes r the request a panic in the rest of this turn answers: for an actor
// that takes up a request it held, such as one queued while it loaded, or one whose
// answer it builds from another actor's reply.
func Handling(ctx Context, r Request) {
	if c, ok := ctx.(*actorContext); ok {
		c.holds = r
	}
}

// HandedOn says that the request this turn holds is now answered elsewhere: sent to
// another actor that answers it, or kept to be answered after a write even when the
// actor stops (a queued append, a commit in the next batch). A panic in the rest of the
// turn leaves it to its holder.
func HandedOn(ctx Context) {
	if c, ok := ctx.(*actorContext); ok {
		c.holds = nil
	}
}

// crashed answers the request c holds, for an actor whose Receive panicked with reason.
func crashed(a Actor, c *actorContext, reason any) {
	if h, ok := a.(PanicHandler); ok {
		h.Panicked(c, reason)
	}
	r := c.holds
	c.holds = nil
	if r == nil {
		return
	}
	r.AnswerCrash(&Crashed{
		Actor:   logs.ID(c.Self().Id),
		Message: fmt.Sprintf("%T", r),
		Panic:   logs.ID(fmt.Sprint(reason)),
	})
}
