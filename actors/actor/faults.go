package actor

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Faults is a fault injector's view of the actor layer (the chaos suite; never set in
// production). Receive runs in the actor's own turn just before a message is handled: it
// may sleep (a delayed message), and when it returns true the actor's Receive panics at
// its first read of the message (ctx.Message), inside the actor's own code, as a bug's
// panic would: the request is answered with the crash (crash.go) and the actor's
// supervisor sees the actor's own failure. Timer is asked when After arms a
// timer: it returns the delay to fire after (a late timer) and whether to fire twice.
type Faults interface {
	Receive(a Actor, msg any) (panic bool)
	Timer(msg any, d time.Duration) (delay time.Duration, twice bool)
}

// faults is the installed injector; nil when off, which is all production ever pays
// for: one atomic load and a nil check per message and per timer.
var faults atomic.Pointer[faultsBox]

type faultsBox struct{ f Faults }

// SetFaults installs f for every actor system of the process until the returned func is
// called. Tests only.
func SetFaults(f Faults) (restore func()) {
	old := faults.Swap(&faultsBox{f: f})
	return func() { faults.Store(old) }
}

// injectedPanic is the value an actor panics with when Faults.Receive asks for it: a
// string, so that logs of the panic read as text.
func injectedPanic(msg any) string { return fmt.Sprintf("injected panic handling %T", msg) }
