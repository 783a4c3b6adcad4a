package partition

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// The orphan check (issue 27's invariant: every transactional batch belongs to a
// producer and epoch that has a marker on the partition or an Ongoing/Prepare* record
// at its coordinator; an orphan is resolved by asking the coordinator, never left
// hanging). After a log opens with a transaction still open (recovery rebuilt it from
// the batches), the partition asks the coordinator (Config.Txns; in a cluster, the
// coordinators' durable state on the shared volume, txn.CheckVolume) whether it holds that
// producer's transaction with this partition; when it does not (its state was lost,
// the id expired, the batch outlived its transaction), the partition writes an abort
// marker itself, at the producer's epoch, so the LSO moves on. Until the answer, a
// transactional batch that would join the suspect transaction gets
// CONCURRENT_TRANSACTIONS (retriable): it could belong to a new transaction of the same
// producer and epoch that the abort would take with it. A question without an answer
// (no coordinator yet, it is starting) is asked again, backing off to 30 s.

// TxnChecker is how a partition asks the transaction coordinator about a recovered
// open transaction. Ask sends the question with reply and reports false when there is
// no coordinator to ask; Held reads the answer (known false: no answer, ask again).
type TxnChecker struct {
	Ask  func(ctx actor.Context, q OpenTxn, reply actor.Promise) bool
	Held func(v any) (held, known bool)
}

// OpenTxn is a transaction the partition found open at recovery.
type OpenTxn struct {
	Topic         string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int16
}

// orphanRetryTick asks again about the suspect transactions not answered yet.
type orphanRetryTick struct {
	actor.Tick
	gen uint64
}

const (
	orphanRetryFirst = time.Second
	orphanRetryMax   = 30 * time.Second
)

// orphanAsk is one question in flight: the producer, and whether it is the abort
// marker's answer rather than the coordinator's.
type orphanAsk struct {
	producer int64
	marker   bool
}

// checkOrphans marks every open transaction of a freshly opened log suspect and asks
// the coordinator about each.
func (p *partitionActor) checkOrphans(ctx actor.Context) {
	if p.cfg.Txns == nil || p.openTxns == 0 {
		return
	}
	for _, e := range p.producers {
		if e.txnFirst >= 0 {
			e.suspect = true
		}
	}
	p.orphanBackoff = 0
	p.askOrphans(ctx)
}

// askOrphans asks about every suspect transaction, and arms the next round.
func (p *partitionActor) askOrphans(ctx actor.Context) {
	clear(p.orphanAsks)
	n := 0
	for id, e := range p.producers {
		if !e.suspect {
			continue
		}
		if e.txnFirst < 0 { // a marker came meanwhile
			e.suspect = false
			continue
		}
		n++
		pr := actor.NewPromise(ctx, ctx.Self())
		if p.orphanAsks == nil {
			p.orphanAsks = map[uint64]orphanAsk{}
		}
		p.orphanAsks[pr.ID()] = orphanAsk{producer: id}
		q := OpenTxn{Topic: p.cfg.Topic, Partition: p.cfg.Partition, ProducerID: id, ProducerEpoch: e.epoch}
		if !p.cfg.Txns.Ask(ctx, q, pr) {
			delete(p.orphanAsks, pr.ID())
		}
	}
	if n == 0 {
		return
	}
	p.orphanBackoff = min(max(2*p.orphanBackoff, orphanRetryFirst), orphanRetryMax)
	p.orphanGen++
	p.orphanTimer = actor.After(ctx, p.orphanBackoff, &orphanRetryTick{gen: p.orphanGen})
}

func (p *partitionActor) onOrphanRetry(ctx actor.Context, m *orphanRetryTick) {
	if m.gen != p.orphanGen || p.disk == nil {
		return
	}
	p.orphanTimer = nil
	p.askOrphans(ctx)
}

// onSettled takes an answer about a suspect transaction.
func (p *partitionActor) onSettled(ctx actor.Context, m *actor.Settled) {
	ask, ok := p.orphanAsks[m.ID]
	if !ok {
		return
	}
	delete(p.orphanAsks, m.ID)
	e := p.producers[ask.producer]
	if e == nil || !e.suspect || p.disk == nil {
		return
	}
	if e.txnFirst < 0 {
		e.suspect = false
		return
	}
	if ask.marker {
		if r, _ := m.Value.(*TxnMarkerWritten); r != nil && r.ErrorCode == 0 {
			e.suspect = false
		}
		return // else asked again at the next round
	}
	held, known := p.cfg.Txns.Held(m.Value)
	switch {
	case !known:
		return
	case held:
		e.suspect = false
		return
	}
	p.log.Warn().Int64("producer_id", ask.producer).Int16("producer_epoch", e.epoch).Int64("txn_start_offset", e.txnFirst).
		Msg("partition_orphan_transaction_aborted")
	pr := actor.NewPromise(ctx, ctx.Self())
	p.orphanAsks[pr.ID()] = orphanAsk{producer: ask.producer, marker: true}
	coord := max(e.coordEpoch, 0)
	p.handleAppend(ctx, markerMessage(&WriteTxnMarker{Topic: p.cfg.Topic, Partition: p.cfg.Partition, ProducerID: ask.producer,
		ProducerEpoch: e.epoch, CoordinatorEpoch: coord, Reply: pr}, p.cfg.Now().UnixMilli()))
}

// suspectCode refuses a transactional batch that would join a suspect transaction.
func suspectCode(e *producerEntry, h *header) int16 {
	if e != nil && e.suspect && e.txnFirst >= 0 && h.Attributes&attrTransactional != 0 {
		return kerr.ConcurrentTransactions.Code
	}
	return 0
}

func (p *partitionActor) stopOrphans() {
	if p.orphanTimer != nil {
		p.orphanTimer()
		p.orphanTimer = nil
	}
	p.orphanGen++
	clear(p.orphanAsks)
}
