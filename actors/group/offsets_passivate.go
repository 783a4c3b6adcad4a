package group

import (
	"fmt"
	"math"
	"time"

	"kaas/actors/actor"
	"kaas/actors/offsets"
)

// The offsets actor's passivation (actors/offsets/passivate.go), on the group's side:
//
//	live ──offsets.Idle, nothing asked──▶ stopping (Passivate sent; sends held)
//	stopping ──offsets.Stay──▶ live (held sends go out, in order)
//	stopping ──Terminated──▶ passivated (g.offsets nil), or live again at once if a send
//	                         was held (spawned, the held sends go out, in order)
//	passivated ──a send──▶ live (spawned; the new actor loads the file)
//
// The group asks Passivate only when none of its questions to the offsets actor is
// unanswered, and sends it nothing more until it answers: so the actor stops with an
// empty mailbox (protoactor drops what a stopped actor's mailbox holds), and every
// question after it is answered by the next actor, from the file, in the order asked. A
// commit handed on with its client's promise (commitDirect) is no question of the
// group's: one sent before Passivate is ahead of it in the mailbox, and the actor, no
// longer quiet, answers Stay.

// spawnOffsets starts the group's offsets actor.
func (g *groupActor) spawnOffsets(ctx actor.Context) {
	pid, err := actor.SpawnNamed(ctx, g.offsetsProps, "offsets")
	if err != nil {
		// The name is free after a restart (children stop first) and after the actor's
		// Terminated (protoactor frees it before): this is a broken invariant.
		panic(fmt.Errorf("group %q: spawn offsets actor: %w", g.id, err))
	}
	g.offsets = pid
	g.offsetsForget = nil // the new actor publishes the series (and withdraws them)
	g.offsetsQuietUntil = 0
}

// forgetPassivated withdraws the committed-offsets series of a passivated offsets
// actor, as the group goes (released or stopped) without it.
func (g *groupActor) forgetPassivated() {
	if g.offsets == nil && g.offsetsForget != nil {
		g.offsetsForget()
	}
	g.offsetsForget = nil
}

// toOffsets sends m to the offsets actor: held while it stops, to a new one when it was
// passivated.
func (g *groupActor) toOffsets(ctx actor.Context, m any) {
	switch {
	case g.offsetsStopping:
		g.offsetsHeld = append(g.offsetsHeld, m)
	case g.offsets == nil:
		g.spawnOffsets(ctx)
		ctx.Send(g.offsets, m)
	default:
		ctx.Send(g.offsets, m)
	}
}

// offsetsIdle: the offsets actor may be stopped. It is, unless a question to it is
// unanswered (its answer would be lost, or it made the actor busy again).
func (g *groupActor) offsetsIdle(ctx actor.Context, m *offsets.Idle) {
	if g.offsetsStopping || g.offsets == nil || g.ops.Len() > 0 {
		return
	}
	g.offsetsStopping, g.offsetsForget = true, m.Forget
	g.offsetsQuietUntil = quietUntil(m.NoExpiryBefore(g.cfg.Settings.OffsetsRetention))
	ctx.Send(g.offsets, &offsets.Passivate{})
}

// quietUntil is t in unix seconds, rounded down, for offsetsQuietUntil: 0 for a time
// before 1970 or the zero time (the tick asks), the largest for one past 2106.
func quietUntil(t time.Time) uint32 {
	sec := t.Unix()
	switch {
	case t.IsZero() || sec <= 0:
		return 0
	case sec >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(sec)
}

// offsetsQuiet says whether a retention check at now has nothing to ask the offsets
// actor: it is passivated, and none of its offsets can expire before
// offsetsQuietUntil. A passivated actor's offsets change only through a new actor, which
// says its own bound as it passivates.
func (g *groupActor) offsetsQuiet(now time.Time) bool {
	return g.offsets == nil && !g.offsetsStopping && g.offsetsQuietUntil > 0 && now.Unix() < int64(g.offsetsQuietUntil)
}

// offsetsStay: the offsets actor had more to do when Passivate came, and goes on.
func (g *groupActor) offsetsStay(ctx actor.Context) {
	if !g.offsetsStopping {
		return
	}
	g.offsetsStopping, g.offsetsForget = false, nil
	g.sendHeld(ctx)
}

// offsetsStopped takes the Terminated of an offsets actor that passivated; false for
// any other.
func (g *groupActor) offsetsStopped(ctx actor.Context, m *actor.Terminated) bool {
	if !g.offsetsStopping || g.offsets == nil || !m.Who.Equal(g.offsets) {
		return false
	}
	// The actor library keeps the stopped child's PID in the spare capacity of the
	// group's children set, and the PID caches the child's process: its mailbox, context
	// and state, all of what passivation frees. A message to the stopped PID drops that
	// cache (it finds the process dead), and an Unwatch is one nothing answers.
	ctx.Unwatch(g.offsets)
	g.offsetsStopping, g.offsets = false, nil
	if len(g.offsetsHeld) > 0 {
		g.spawnOffsets(ctx)
		g.sendHeld(ctx)
	}
	return true
}

// offsetsGivenUp: the offsets actor stopped without being asked to (its supervisor gave
// up on it after repeated failures). The group drops its PID, so that its next request
// starts a new one, which loads the group's state again, instead of going to a dead
// actor for the group's life.
func (g *groupActor) offsetsGivenUp(ctx actor.Context, m *actor.Terminated) {
	if g.offsets == nil || !m.Who.Equal(g.offsets) {
		return
	}
	g.log().Error().Msg("offsets_actor_stopped_after_repeated_failures")
	ctx.Unwatch(g.offsets)
	g.offsets = nil
}

// sendHeld sends what waited while the offsets actor stopped, in order.
func (g *groupActor) sendHeld(ctx actor.Context) {
	held := g.offsetsHeld
	g.offsetsHeld = nil
	for _, m := range held {
		ctx.Send(g.offsets, m)
	}
}
