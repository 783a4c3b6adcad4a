package txn

import (
	"time"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
)

// sideEffect is one marker of a Prepare*: a partition's or a group's.
type sideEffect struct {
	marker *Marker
	group  *GroupMarker
}

func (s sideEffect) name() string {
	if s.group != nil {
		return "group " + logs.ID(s.group.Group)
	}
	return logs.ID(s.marker.Topic)
}

// markerWait bounds one round's wait for its answers; what has not come is retried.
const markerWait = 30 * time.Second

// maxMarkerBackoff caps the retry backoff.
const maxMarkerBackoff = 5 * time.Second

// startMarkers begins ending the Prepare*'s transaction on every partition and group
// (the side effects of the commit point), all at once.
func (a *txnActor) startMarkers(ctx actor.Context) {
	m := a.meta
	commit := m.State == PrepareCommit
	var all []sideEffect
	for _, t := range m.topics() {
		for _, p := range m.Partitions[t] {
			all = append(all, sideEffect{marker: &Marker{Topic: t, Partition: p, ProducerID: m.ProducerID,
				ProducerEpoch: m.Epoch, Commit: commit, CoordinatorEpoch: m.CoordinatorEpoch}})
		}
	}
	for _, g := range m.Groups {
		all = append(all, sideEffect{group: &GroupMarker{Group: g, ProducerID: m.ProducerID, ProducerEpoch: m.Epoch, Commit: commit}})
	}
	a.backoff = 0
	a.sendMarkers(ctx, all)
}

// sendMarkers sends one round of side effects and gathers their answers.
func (a *txnActor) sendMarkers(ctx actor.Context, effects []sideEffect) {
	a.round++
	round := a.round
	a.remaining = nil
	if len(effects) == 0 {
		a.complete(ctx)
		return
	}
	done := a.waits.Await(ctx, func(v any) {
		results, _ := v.([]any)
		if results == nil && v == nil {
			return // the actor is stopping
		}
		a.onMarkers(ctx, round, effects, results)
	})
	ps := actor.Gather(ctx, len(effects), markerWait, nil, func(int) any { return nil }, func(res []any) { done.Resolve(res) })
	sides := a.cfg.Sides
	for i, e := range effects {
		switch {
		case e.group != nil && sides.EndOffsets != nil:
			sides.EndOffsets(ctx, *e.group, ps[i])
		case e.marker != nil && sides.WriteMarker != nil:
			sides.WriteMarker(ctx, *e.marker, ps[i])
		default:
			// No side wired: no data path takes transactional batches or offsets yet
			// (nothing to end); with one wired, every marker goes through it.
			ps[i].Resolve(int16(0))
		}
	}
}

func (a *txnActor) onMarkers(ctx actor.Context, round uint64, effects []sideEffect, results []any) {
	if round != a.round || a.meta == nil || (a.meta.State != PrepareCommit && a.meta.State != PrepareAbort) {
		return
	}
	var retry []sideEffect
	for i, e := range effects {
		var v any
		if i < len(results) {
			v = results[i]
		}
		code := a.cfg.Sides.code(v)
		out := outcomeOf(code)
		if e.marker != nil {
			a.cfg.Metrics.marker(out)
		}
		switch out {
		case markerRetry:
			retry = append(retry, e)
		case markerDropped:
			a.log.Warn().Str("target", e.name()).Int16("error_code", code).Msg("transaction_marker_dropped")
		}
	}
	if len(retry) == 0 {
		a.complete(ctx)
		return
	}
	a.backoff = min(max(2*a.backoff, a.cfg.Settings.MarkerBackoff), maxMarkerBackoff)
	a.log.Debug().Int("left", len(retry)).Dur("backoff", a.backoff).Msg("transaction_markers_retrying")
	a.remaining = retry
	a.retry = actor.After(ctx, a.backoff, &retryMarkers{round: a.round})
}

// complete makes the Complete* durable once every marker is written: with the first
// add parked meanwhile, when there is one to write (completeWithNext), or alone.
func (a *txnActor) complete(ctx actor.Context) {
	if a.busy {
		// Cannot happen (markers start after a write); kept safe: look again shortly.
		a.retry = actor.After(ctx, a.cfg.Settings.MarkerBackoff, &retryMarkers{round: a.round})
		return
	}
	done := completed(a.meta, a.now())
	if a.completeWithNext(ctx, done) {
		return
	}
	a.write(ctx, done, func(ok bool) {
		if !ok && !a.stopping {
			a.retryComplete(ctx)
		}
	})
}

// retryComplete writes the Complete* again after the markers' backoff (the markers are
// written; one failed fdatasync must not hold the id's next transaction, whose implicit
// adds wait for the completion, for the longest backoff).
func (a *txnActor) retryComplete(ctx actor.Context) {
	a.remaining = nil
	a.backoff = min(max(2*a.backoff, a.cfg.Settings.MarkerBackoff), maxMarkerBackoff)
	a.retry = actor.After(ctx, a.backoff, &retryMarkers{round: a.round})
}

// completeWithNext writes done, the Complete*, and the Ongoing of the producer's next
// transaction that the first parked add starts (an implicit add, or a TV1 producer's
// AddPartitionsToTxn or AddOffsetsToTxn: nextAdd), in one journal frame: one fdatasync
// for both, both durable or neither. The state goes through the Complete* to
// the Ongoing as two transitions, as if written one after the other; the add is answered
// once both are durable, and the other parked requests go on after it. False when there
// is nothing to write so (nothing parked; the add refused or adding nothing; no place
// under transaction.max.open): done is then written alone, and the parked requests go on
// after it as before.
func (a *txnActor) completeWithNext(ctx actor.Context, done *Meta) bool {
	if len(a.parked) == 0 || !a.mayWrite() {
		return false
	}
	req := a.parked[0]
	add, answer, ok := nextAdd(req)
	if !ok {
		return false
	}
	add.MaxTPs = a.cfg.Settings.MaxPartitions
	next, code := planAdd(done, add, a.now())
	if next == nil || code != codeNone || !a.cfg.Settings.Open.take() {
		return false
	}
	a.parked = a.parked[1:]
	a.busy = true
	stamp(done, a.meta)
	stamp(next, done)
	p := a.waits.Await(ctx, func(v any) {
		a.busy = false
		defer a.finishRelease(ctx)
		r, _ := v.(*journal.Appended)
		if r == nil || r.Err != nil || !a.mayWrite() {
			a.cfg.Settings.Open.release()
			if r == nil || a.stopping || r.Err == nil { // gone, released, or the lease lapsed
				answer(codeNotCoord)
				return
			}
			// Neither is durable: the add waits again for the Complete*, written again
			// after the backoff, within parkWait.
			a.log.Error().Err(r.Err).Str("state", done.State.String()).Msg("transaction_state_write_failed")
			a.parked = append([]request{req}, a.parked...)
			a.armPark(ctx)
			a.retryComplete(ctx)
			a.drain(ctx)
			return
		}
		prev := a.meta
		a.meta, a.seq = done, r.Seq
		a.changed(ctx, prev) // gives back the completed transaction's place
		a.counted = true     // the next one's, taken above
		a.meta, a.seq = next, r.ThenSeq
		a.changed(ctx, done)
		answer(codeNone)
		a.drain(ctx)
	})
	ctx.Send(a.cfg.Journal, &journal.Append{Key: a.cfg.ID, Data: encode(done), Then: encode(next), Reply: p})
	return true
}
