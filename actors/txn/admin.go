package txn

import (
	"time"

	"kaas/actors/actor"
	"kaas/logs"
)

// An operator's abort (AdminAbort) and a partition's orphan check (CheckTxn): the
// manager finds the id that holds the producer (byProducer) and hands the question to
// its actor, in line with the id's other requests; an id it does not know of gets the
// operator's markers as they are (writeDirect), or is no coordinator's (an orphan).

// abortFor is an AdminAbort routed to the actor of the id that holds its producer.
type abortFor struct {
	id string
	m  *AdminAbort
}

func (r *abortFor) txnID() string { return r.id }
func (r *abortFor) fail(code int16) {
	r.m.Reply.Resolve(&AdminAborted{Codes: allCodes(r.m.Partitions, code)})
}
func (r *abortFor) AnswerCrash(c *actor.Crashed) { r.fail(crashCode(c)) }

// checkFor is a CheckTxn routed to the actor of the id that holds its producer.
type checkFor struct {
	id string
	m  *CheckTxn
}

func (r *checkFor) txnID() string { return r.id }

// fail answers nothing known (the actor is going): the partition asks again later.
func (r *checkFor) fail(int16)                   { r.m.Reply.Resolve(nil) }
func (r *checkFor) AnswerCrash(c *actor.Crashed) { r.fail(crashCode(c)) }

func (mg *manager) handleAdminAbort(ctx actor.Context, m *AdminAbort) {
	if e := mg.byProducer[m.ProducerID]; e != nil {
		mg.route(ctx, &abortFor{id: e.id, m: m})
		return
	}
	writeDirect(ctx, mg.cfg.Sides, m, m.Partitions, nil, "")
}

func (mg *manager) handleCheck(ctx actor.Context, m *CheckTxn) {
	if e := mg.byProducer[m.ProducerID]; e != nil {
		mg.route(ctx, &checkFor{id: e.id, m: m})
		return
	}
	m.Reply.Resolve(&TxnChecked{})
}

// indexProducer keeps byProducer: e's producer id is pid now.
func (mg *manager) indexProducer(e *entry, pid int64) {
	if old := e.sum.pid; old != pid && mg.byProducer[old] == e {
		delete(mg.byProducer, old)
	}
	if pid >= 0 {
		mg.byProducer[pid] = e
	}
}

func (mg *manager) unindexProducer(e *entry) {
	if mg.byProducer[e.sum.pid] == e {
		delete(mg.byProducer, e.sum.pid)
	}
}

// handleAdminAbort decides an operator's abort for this id (AdminAbort's doc).
func (a *txnActor) handleAdminAbort(ctx actor.Context, r *abortFor) {
	req, m := r.m, a.meta
	held, rest := splitHeld(m, req)
	if len(held) == 0 {
		writeDirect(ctx, a.cfg.Sides, req, req.Partitions, nil, "")
		return
	}
	switch {
	case m.State == Ongoing && m.Epoch == req.ProducerEpoch:
		a.log.Info().Int64("producer_id", m.ProducerID).Int16("epoch", m.Epoch).Msg("transaction_aborted_by_admin")
		a.fence(ctx, fenced(m, a.now()), func(ok bool) {
			if !ok {
				r.fail(codeNotAvailable)
				return
			}
			a.cfg.Metrics.aborted(abortAdmin)
			a.whenComplete(func(done bool) {
				writeDirect(ctx, a.cfg.Sides, req, rest, allCodes(held, pick(done, codeNone, codeNotCoord)), a.cfg.ID)
			})
		})
	case m.State == PrepareCommit:
		// The commit is decided: an abort on some of its partitions would split it.
		writeDirect(ctx, a.cfg.Sides, req, rest, allCodes(held, codeConcurrent), "")
	default:
		// PrepareAbort: the abort is decided, the operator's marker agrees with it (and
		// is not made to wait for the coordinator's: a coordinator's own marker sent
		// over the wire must never wait for its own completion). Ongoing at another
		// epoch: the marker names an older transaction of the producer, which the
		// partitions refuse or end as Apache's do.
		writeDirect(ctx, a.cfg.Sides, req, req.Partitions, nil, "")
	}
}

// splitHeld splits an abort's partitions into those of the id's running transaction
// of that producer (none when it runs none) and the rest.
func splitHeld(m *Meta, req *AdminAbort) (held, rest map[string][]int32) {
	held, rest = map[string][]int32{}, map[string][]int32{}
	in := m != nil && m.ProducerID == req.ProducerID && m.State.open()
	for t, ps := range req.Partitions {
		for _, p := range ps {
			if in && m.has(t, p) {
				held[t] = append(held[t], p)
			} else {
				rest[t] = append(rest[t], p)
			}
		}
	}
	return held, rest
}

// handleCheck answers a partition's orphan check (CheckTxn's doc).
func (a *txnActor) handleCheck(r *checkFor) {
	q, m := r.m, a.meta
	held := m.holds(q.Topic, q.Partition, q.ProducerID, q.ProducerEpoch)
	if !held {
		a.log.Info().Str("topic", logs.ID(q.Topic)).Int32("partition", q.Partition).Int64("producer_id", q.ProducerID).
			Int16("epoch", q.ProducerEpoch).Str("state", stateOf(m)).Msg("transaction_orphan_found")
	}
	q.Reply.Resolve(&TxnChecked{Held: held})
}

func stateOf(m *Meta) string {
	if m == nil {
		return "none"
	}
	return m.State.String()
}

// whenComplete runs then once the running transaction's Complete* is durable (true), or
// the actor stops first (false).
func (a *txnActor) whenComplete(then func(done bool)) {
	a.completion = append(a.completion, then)
}

func (a *txnActor) notifyComplete(done bool) {
	waiting := a.completion
	a.completion = nil
	for _, then := range waiting {
		then(done)
	}
}

// adminMarkerWait bounds the wait for the markers an operator's abort writes itself.
const adminMarkerWait = 30 * time.Second

// writeDirect writes an operator's abort markers on tps as Apache writes them (its
// producer id, epoch and coordinator epoch, through Sides), then answers req with their
// codes merged into codes (the partitions already decided). by names the id that
// aborted the transaction ("" none).
func writeDirect(ctx actor.Context, sides Sides, req *AdminAbort, tps map[string][]int32, codes map[string]map[int32]int16, by string) {
	type tp struct {
		t string
		p int32
	}
	var all []tp
	for t, ps := range tps {
		for _, p := range ps {
			all = append(all, tp{t, p})
		}
	}
	if codes == nil {
		codes = map[string]map[int32]int16{}
	}
	ps := actor.Gather(ctx, len(all), adminMarkerWait, nil, func(int) any { return nil }, func(res []any) {
		for i, x := range all {
			var v any
			if i < len(res) {
				v = res[i]
			}
			if codes[x.t] == nil {
				codes[x.t] = map[int32]int16{}
			}
			codes[x.t][x.p] = sides.code(v)
		}
		req.Reply.Resolve(&AdminAborted{Codes: codes, TransactionalID: by})
	})
	for i, x := range all {
		if sides.WriteMarker == nil {
			ps[i].Resolve(int16(0))
			continue
		}
		sides.WriteMarker(ctx, Marker{Topic: x.t, Partition: x.p, ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch,
			CoordinatorEpoch: req.CoordinatorEpoch}, ps[i])
	}
}
