package conn

import (
	"encoding/binary"

	"kaas/actors/actor"
)

// Back-pressure on what a connection reads ahead: frames held while its responses (or
// the broker's) are not being written, and the response bytes promised to a Fetch.

func (a *connActor) onFrame(ctx actor.Context, f *frame) {
	if a.stopped.Load() && !a.draining {
		return
	}
	if len(a.held) > 0 || a.mustHold(f) {
		if len(a.held) == 0 {
			a.log.Debug().Int64("unwritten_bytes", a.unwritten.Load()).Int64("granted_bytes", a.granted).
				Msg("requests_held_until_responses_written")
		}
		a.held = append(a.held, f)
		if a.met != nil {
			a.met.RequestsHeld.Inc()
		}
		return
	}
	a.handleFrame(ctx, f)
}

// fetchKey is the API key of Fetch, whose responses are the large ones.
const fetchKey = 1

// mustHold says whether f waits: this connection's unwritten responses (and, for a
// Fetch, the bytes promised to Fetches in flight) are at its budget, or f is a Fetch and
// the broker's unwritten responses are at the broker's. Apache mutes a connection while
// a response is outstanding; this lets a connection read ahead, within bytes.
func (a *connActor) mustHold(f *frame) bool {
	fetch := len(f.b) >= 2 && int16(binary.BigEndian.Uint16(f.b)) == fetchKey
	if limit := a.cfg.MaxQueuedResponseBytes; limit > 0 {
		over := func() bool {
			used := a.unwritten.Load()
			if fetch {
				used += a.granted
			}
			return used >= limit
		}
		if over() {
			// Ask the writer for a wake-up, then look again: it may have written
			// everything between the two.
			a.wantWake.Store(true)
			if over() {
				return true
			}
		}
	}
	if fetch && a.env.ResponseBytes.Free() <= 0 {
		if !a.brokerWait {
			a.brokerWait = true
			sys, self := a.env.System, a.self
			a.env.ResponseBytes.OnFree(func() { sys.Send(self, &resume{}) })
		}
		return true
	}
	return false
}

// resumeHeld hands held frames to their handlers, in order, while they may go.
func (a *connActor) resumeHeld(ctx actor.Context) {
	if a.resuming {
		return
	}
	a.resuming = true
	defer func() { a.resuming = false }()
	for len(a.held) > 0 && !(a.stopped.Load() && !a.draining) {
		f := a.held[0]
		if a.mustHold(f) {
			return
		}
		a.held[0] = nil
		a.held = a.held[1:]
		if a.met != nil {
			a.met.RequestsHeld.Dec()
		}
		a.handleFrame(ctx, f)
	}
	if len(a.held) == 0 {
		a.held = nil
	}
	a.maybeFinishDrain(ctx)
}

// responseBudget promises c's handler up to want bytes of response: no more than what
// is left of the connection's budget and of the broker's, and at least 1 (a Fetch
// always answers with its first batch, KIP-74).
func (a *connActor) responseBudget(c *Call, want int32) int32 {
	if c.slot == nil || c.done || want <= 0 {
		return want
	}
	left := int64(want)
	if limit := a.cfg.MaxQueuedResponseBytes; limit > 0 {
		left = min(left, limit-a.unwritten.Load()-a.granted)
	}
	left = max(1, min(left, a.env.ResponseBytes.Free()))
	c.slot.grant += left
	a.granted += left
	return int32(left)
}
