package txn

import (
	"time"

	"kaas/actors/actor"
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

// complete makes the Complete* durable once every marker is written.
func (a *txnActor) complete(ctx actor.Context) {
	if a.busy {
		// Cannot happen (markers start after a write); kept safe: look again shortly.
		a.retry = actor.After(ctx, a.cfg.Settings.MarkerBackoff, &retryMarkers{round: a.round})
		return
	}
	a.write(ctx, completed(a.meta, a.now()), func(ok bool) {
		if !ok && !a.stopping {
			// The markers are written: write the Complete* again after the markers'
			// backoff (one failed fdatasync must not hold the id's next transaction for
			// the longest one).
			a.remaining = nil
			a.backoff = min(max(2*a.backoff, a.cfg.Settings.MarkerBackoff), maxMarkerBackoff)
			a.retry = actor.After(ctx, a.backoff, &retryMarkers{round: a.round})
		}
	})
}
