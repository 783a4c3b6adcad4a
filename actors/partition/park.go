package partition

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Parking: a new leader waiting for its predecessor's lock (a graceful hand-over letting
// it go, or a paused or killed leader whose lease is lapsing) holds the produces sent to
// it, and appends them once it leads, instead of answering NOT_LEADER_OR_FOLLOWER at
// once. A client told NOT_LEADER_OR_FOLLOWER on a produce asks for metadata again only
// after its metadata age (franz-go: 5 s) and is told this leader again; a parked produce
// is answered within moments of the lock. Parking is bounded in time (parkFor, well
// inside every client's produce timeout) and in bytes (parkMaxBytes); past either, the
// produce is answered NOT_LEADER_OR_FOLLOWER as before.

const (
	// parkFor is how long a produce waits for the lock: a lapsing lease (lease.duration.ms,
	// 3 s by default) and the open that follows.
	parkFor = 4 * time.Second
	// parkMaxBytes bounds the records parked in one partition.
	parkMaxBytes = 16 << 20
)

// parkedAppend is a produce held while the lock is awaited.
type parkedAppend struct {
	m     *appendBatch
	until time.Time
}

// park holds m while the partition waits for its lock, and reports whether it did.
func (p *partitionActor) park(ctx actor.Context, m *appendBatch) bool {
	if p.broken != nil || p.lockWaitSince.IsZero() || p.parkedBytes+len(m.batch.records) > parkMaxBytes {
		return false
	}
	p.parked = append(p.parked, parkedAppend{m: m, until: p.cfg.Now().Add(parkFor)})
	p.parkedBytes += len(m.batch.records)
	actor.HandedOn(ctx) // answered by unpark, or by Stopping or Restarting
	return true
}

// unpark runs after each try of the lock: once the log is open the parked produces are
// appended in the order they came; until then those past their wait are answered.
func (p *partitionActor) unpark(ctx actor.Context) {
	if len(p.parked) == 0 {
		return
	}
	if p.disk != nil || p.broken != nil {
		// One at a time off the list: a panic in one leaves the rest to Restarting.
		for len(p.parked) > 0 {
			w := p.parked[0]
			p.parked[0] = parkedAppend{}
			p.parked = p.parked[1:]
			p.parkedBytes -= len(w.m.batch.records)
			p.handleAppend(ctx, w.m)
		}
		p.parked = nil
		return
	}
	now := p.cfg.Now()
	kept := p.parked[:0]
	for _, w := range p.parked {
		if now.Before(w.until) {
			kept = append(kept, w)
			continue
		}
		p.parkedBytes -= len(w.m.batch.records)
		w.m.fail(kerr.NotLeaderForPartition.Code)
	}
	clear(p.parked[len(kept):])
	p.parked = kept
}

// answerParked answers every parked produce NOT_LEADER_OR_FOLLOWER (the actor stops).
func (p *partitionActor) answerParked() {
	for _, w := range p.parked {
		w.m.fail(kerr.NotLeaderForPartition.Code)
	}
	p.parked, p.parkedBytes = nil, 0
}
