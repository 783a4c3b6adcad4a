package offsets

import (
	"math"
	"time"

	"kaas/actors/actor"
)

// Passivation: an offsets actor whose file holds everything it serves, and which saw no
// request for Config.IdleAfter, asks its group actor to stop it, and the group actor
// spawns it again on its next request, which loads the file. A live group then keeps no
// offsets actor (its context, mailbox, registry entry and offsets map) while idle.
//
//	quiet ──IdleAfter with no request──▶ Idle to the parent ──Passivate──▶ stops (still quiet)
//	                                                           └─────────▶ Stay (no longer quiet)
//
// The parent sends Passivate only when none of its requests is unanswered, and sends
// nothing more until it hears back (Terminated or Stay), so nothing is left in the
// mailbox of a stopping actor and nothing is served from a state that is gone. A group
// in a cluster (a Gate) never passivates: each load takes the group over again.

// Idle tells the parent, the group actor, that the offsets actor may be stopped: its
// file holds everything, nothing waits, and no request came for Config.IdleAfter.
// Forget withdraws the group's committed-offsets series the actor publishes (they stay
// while it is passivated, the group being live): the parent calls it when the group
// goes while its offsets actor is passivated, instead of spawning it again to stop it.
// It is safe from any goroutine, and does nothing once a newer actor published.
//
// It also says when the earliest of the group's offsets could expire (NoExpiryBefore):
// until then a retention check of the group with its offsets actor passivated has
// nothing to ask it, and spawning it to read the file would find nothing.
type Idle struct {
	Forget func()
	// expiry: what NoExpiryBefore counts from (idleExpiry).
	none       bool  // the group has no offset: a check may remove it at once
	ageFrom    int64 // unix ms: the earliest moment an offset's age counts from; MaxInt64 when none does
	explicitAt int64 // unix ms: the earliest explicit expire time (ExpireTime); MaxInt64 when none
}

// NoExpiryBefore is the earliest moment any offset of the group could expire by any of
// the rules (expiredOffsets), with offsets.retention retention; the zero time when the
// group has no offset (a check may remove the group itself).
func (m *Idle) NoExpiryBefore(retention time.Duration) time.Time {
	if m.none {
		return time.Time{}
	}
	at := m.explicitAt
	if retention > 0 && m.ageFrom != math.MaxInt64 {
		at = min(at, m.ageFrom+retention.Milliseconds())
	}
	if at == math.MaxInt64 {
		return time.UnixMilli(math.MaxInt64)
	}
	return time.UnixMilli(at)
}

// idleExpiry fills what Idle says of the offsets' expiry from the state served: by every
// rule an offset with an explicit expire time expires then, and one without it expires
// retention after its commit time or after the group became Empty (whichever the rule
// takes; the earlier of the two is the bound).
func (a *offsetsActor) idleExpiry(m *Idle) {
	m.none = len(a.st.offsets) == 0
	m.ageFrom, m.explicitAt = math.MaxInt64, math.MaxInt64
	for _, c := range a.st.offsets {
		if c.ExpireTime > 0 {
			m.explicitAt = min(m.explicitAt, c.ExpireTime)
			continue
		}
		m.ageFrom = min(m.ageFrom, c.CommitTime)
	}
	if e := a.st.meta.EmptySince; e > 0 && m.ageFrom != math.MaxInt64 {
		m.ageFrom = min(m.ageFrom, e)
	}
}

// Passivate asks an offsets actor that said Idle to stop. It stops if it is still quiet;
// otherwise it answers Stay and goes on.
type Passivate struct{}

// Stay answers a Passivate that came once the actor had more to do.
type Stay struct{}

// idleTick is the actor's timer (actor.After) → itself: IdleAfter has passed.
type idleTick struct{}

// quiet says whether stopping the actor loses nothing and leaves no one waiting: the
// file is loaded, usable and holds every journaled change, nothing is queued, in
// flight, stashed or being written, and no transactional offset is pending (the
// pending offsets are in memory until their EndTxn, and a reload would not have them
// written yet).
func (a *offsetsActor) quiet() bool {
	return a.cfg.IdleAfter > 0 && a.gate == nil && a.loaded && a.serving() && !a.waiting() &&
		len(a.queue) == 0 && len(a.inflight) == 0 && len(a.stash) == 0 && len(a.flushes) == 0 &&
		a.ckpt == nil && !a.flushQueued && !a.ckptScheduled && a.lastSeq <= a.fileSeq &&
		!a.tombUnreadable && a.st.pendingCount() == 0
}

// monoBase is what lastRequest counts from: a Duration on the monotonic clock is 8 bytes
// where a time.Time is 24, in every live group's actor.
var monoBase = time.Now()

// armIdle arms the idle timer of a quiet actor that has not asked to stop yet, to fire
// IdleAfter after its last request.
func (a *offsetsActor) armIdle(ctx actor.Context) {
	if a.idleCancel != nil || a.idleAsked || !a.quiet() {
		return
	}
	wait := a.cfg.IdleAfter - (time.Since(monoBase) - a.lastRequest)
	a.idleCancel = actor.After(ctx, min(max(wait, 0), a.cfg.IdleAfter), &idleTick{})
}

// onIdleTick: the idle timer fired. An actor still quiet that served no request for
// IdleAfter asks its parent to stop it; one that served some arms the timer again
// (armIdle, after this turn).
func (a *offsetsActor) onIdleTick(ctx actor.Context) {
	if a.idleCancel == nil {
		return // an earlier incarnation's timer
	}
	a.idleCancel = nil
	if time.Since(monoBase)-a.lastRequest < a.cfg.IdleAfter || !a.quiet() || ctx.Parent() == nil {
		return
	}
	a.idleAsked = true
	idle := &Idle{Forget: a.pub.Remove}
	a.idleExpiry(idle)
	ctx.Send(ctx.Parent(), idle)
}

// onPassivate stops the actor if it is still quiet, keeping its committed offsets'
// series (the next incarnation replaces them, or removes them as it stops); otherwise
// it tells the parent to go on sending.
func (a *offsetsActor) onPassivate(ctx actor.Context) {
	a.idleAsked = false
	if !a.quiet() {
		ctx.Send(ctx.Parent(), &Stay{})
		return
	}
	a.passivated = true
	ctx.Stop(ctx.Self())
}
