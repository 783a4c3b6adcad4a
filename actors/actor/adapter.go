package actor

import (
	"fmt"
	"sync"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
)

// adapter runs a kaas Actor as a protoactor one. It keeps the receive timeout itself:
// protoactor's fires on a timer goroutine that writes the actor context's fields while
// the actor may be handling a message (a data race), so here the timer only sends a
// message, and everything else happens in the actor's own turn.
//
// One protoactor props serves every actor of a kind (kindProps), so its producer makes
// an empty adapter: produce, handed over at the spawn (OnInit) or, after a restart, by
// the incarnation before (reborn), builds the kaas actor at the first message.
type adapter struct {
	a       Actor
	produce func() Actor
	c       actorContext
}

// reborn holds the producer of each actor between its Restarting and the Started of its
// next incarnation (or its Stopped, when it is stopped before it restarts), by PID: the
// PID and the actor's protoactor context outlive an incarnation, its adapter does not.
var reborn sync.Map // *PID → func() Actor

// actorContext is the Context handed to a kaas actor: protoactor's, with the receive
// timeout kept by the adapter.
type actorContext struct {
	pa.Context
	msg any // when set, the message being delivered instead of the mailbox's own
	// boom: the next Message panics (Faults).
	boom bool
	// holds is the request a panic in this turn answers (crash.go): the message when it
	// is a Request, until the actor says otherwise (Handling, HandedOn).
	holds Request

	idle   time.Duration // 0: no receive timeout
	last   time.Duration // the last message that counts as activity, since monoBase
	gen    uint64        // the timer armed last; older ones are stale
	cancel Cancel
}

// monoBase is what an adapter's last activity counts from: a Duration on the monotonic
// clock is 8 bytes where a time.Time is 24, and puts the adapter (one per actor, two per
// live group) in the 112-byte size class instead of the 128-byte one.
var monoBase = time.Now()

// idleCheck is the receive-timeout timer firing; gen tells a stale one.
type idleCheck struct {
	Tick
	gen uint64
}

func (c *actorContext) Message() any {
	if c.boom {
		c.boom = false
		panic(injectedPanic(c.Context.Message()))
	}
	if c.msg != nil {
		return c.msg
	}
	return c.Context.Message()
}

func (c *actorContext) SetReceiveTimeout(d time.Duration) {
	if d < time.Millisecond {
		d = 0
	}
	c.stopTimer()
	c.idle = d
	if d > 0 {
		c.last = time.Since(monoBase)
		c.arm(d)
	}
}

func (c *actorContext) arm(d time.Duration) {
	c.gen++
	c.cancel = After(c, d, &idleCheck{gen: c.gen})
}

func (c *actorContext) stopTimer() {
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.gen++
}

func (x *adapter) Receive(pc pa.Context) {
	if x.a == nil {
		x.incarnate(pc)
	}
	c := &x.c
	c.Context, c.msg = pc, nil
	msg := pc.Message()
	c.holds, _ = msg.(Request)
	switch m := msg.(type) {
	case *idleCheck:
		if m.gen != c.gen || c.idle == 0 {
			return
		}
		c.cancel = nil
		if left := c.idle - (time.Since(monoBase) - c.last); left > 0 {
			c.arm(left)
			return
		}
		// One timeout per SetReceiveTimeout, as protoactor's.
		c.idle = 0
		c.msg = &ReceiveTimeout{}
		x.run(c)
		c.msg = nil
		return
	case *Restarting:
		c.stopTimer()
		c.idle = 0
		reborn.Store(pc.Self(), x.produce)
	case *Stopped:
		c.stopTimer()
		c.idle = 0
		reborn.Delete(pc.Self())
	case *Started, *Stopping:
	case idleNeutral:
		if f := faults.Load(); f != nil {
			c.boom = f.f.Receive(x.a, m)
		}
	default:
		if c.idle > 0 {
			c.last = time.Since(monoBase)
		}
		if f := faults.Load(); f != nil {
			c.boom = f.f.Receive(x.a, m)
		}
	}
	x.run(c)
	c.boom = false // an actor that did not read its message
}

// incarnate builds the kaas actor of this incarnation, at its first message (Started).
func (x *adapter) incarnate(pc pa.Context) {
	if x.produce == nil {
		if p, ok := reborn.LoadAndDelete(pc.Self()); ok {
			x.produce = p.(func() Actor)
		}
	}
	if x.produce == nil {
		panic(fmt.Sprintf("actor %s: no producer (spawned outside package actor)", pc.Self()))
	}
	x.a = x.produce()
}

// run hands the actor its message. A panic answers the request the turn holds with the
// crash (crash.go) and goes on to protoactor, whose supervision restarts or stops the
// actor as it would have.
func (x *adapter) run(c *actorContext) {
	defer func() {
		if r := recover(); r != nil {
			crashed(x.a, c, r)
			panic(r)
		}
	}()
	x.a.Receive(c)
	c.holds = nil
}
