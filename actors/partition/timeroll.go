package partition

import (
	"math"
	"math/rand/v2"
	"time"

	"kaas/actors/actor"
)

// A partition's time-based settings: segment.ms and segment.jitter.ms roll the active
// segment by age, flush.ms bounds how long an appended batch waits for its fsync.
//
// segment.ms is Apache's LogSegment.shouldRoll: on an append, a non-empty active segment
// is rolled first when the batch's max timestamp is more than segment.ms (less the
// segment's jitter) past the segment's first batch's max timestamp, or, when that first
// batch has no timestamp, when the segment has been active that long by the broker's
// clock. As in Apache, nothing rolls without an append. The jitter is drawn once per
// segment, uniformly below min(segment.jitter.ms, segment.ms) (randomSegmentJitter).
//
// flush.ms (with flush.messages above 1; at 1 every acknowledged batch is fsynced
// before its answer, which flush.ms cannot make stricter): a batch appended with no
// fsync due yet starts a timer of flush.ms, and when it fires the appended batches
// are fsynced (Apache's log flusher, without its scheduler's granularity).

// Timing is a partition's segment.ms, segment.jitter.ms and flush.ms; 0 is "not set"
// for SegmentMS and FlushMS (never; the manager gives flush.ms=0 as 1 ms).
type Timing struct {
	SegmentMS       int64
	SegmentJitterMS int64
	FlushMS         int64
}

// timingOf is the Timing of a topic's configs.
func timingOf(c defaults, overrides map[string]string) Timing {
	t := Timing{SegmentMS: effective(c, overrides, "segment.ms"), SegmentJitterMS: effective(c, overrides, "segment.jitter.ms"),
		FlushMS: effective(c, overrides, "flush.ms")}
	if t.FlushMS == 0 {
		t.FlushMS = 1
	}
	return t
}

// rollClock is what a time roll is judged by for the active segment: since when it is
// known to be active (for a first batch without a timestamp) and its jitter.
type rollClock struct {
	seg    *segment
	since  int64
	jitter int64
}

// timeRollDue says whether the active segment is to be rolled by age before h's batch.
func (p *partitionActor) timeRollDue(h *header) bool {
	t := p.cfg.Timing
	s := p.disk.active()
	limit := t.SegmentMS
	if c := p.cfg.Cleaner; c != nil && c.MaxLagMS > 0 {
		// A compacted topic's active segment also rolls by max.compaction.lag.ms
		// (Apache's LogConfig.maxSegmentMs), so that its records become cleanable.
		limit = min(limit, c.MaxLagMS)
	}
	if limit <= 0 || limit == math.MaxInt64 || s.size == 0 {
		return false
	}
	now := p.cfg.Now().UnixMilli()
	if p.clock.seg != s {
		p.clock = rollClock{seg: s, since: now}
		if j := min(t.SegmentJitterMS, t.SegmentMS); j > 0 {
			p.clock.jitter = rand.Int64N(j)
		}
	}
	waited := now - p.clock.since
	if s.firstTS >= 0 {
		waited = h.MaxTimestamp - s.firstTS
	}
	return waited > limit-p.clock.jitter
}

// flushTick tells the actor flush.ms has passed since a batch was appended unsynced.
type flushTick struct{ actor.Tick }

// armFlush starts the flush.ms timer for batches appended without an fsync due.
func (p *partitionActor) armFlush(ctx actor.Context) {
	ms := p.cfg.Timing.FlushMS
	if ms <= 0 || ms == math.MaxInt64 || p.flushCancel != nil || p.unsynced == 0 || p.cfg.FlushMessages == 1 {
		return
	}
	p.flushCancel = actor.After(ctx, time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond)))*time.Millisecond, &flushTick{})
}

// onFlushTick fsyncs what was appended since the last fsync; an fsync already running
// covers only what came before it, so the timer runs again for the rest.
func (p *partitionActor) onFlushTick(ctx actor.Context) {
	p.flushCancel = nil
	if p.disk == nil || p.unsynced == 0 {
		return
	}
	if p.syncing {
		p.armFlush(ctx)
		return
	}
	p.startSync(ctx)
}

// stopFlush cancels the flush.ms timer (the actor stops or restarts).
func (p *partitionActor) stopFlush() {
	if p.flushCancel != nil {
		p.flushCancel()
		p.flushCancel = nil
	}
}
