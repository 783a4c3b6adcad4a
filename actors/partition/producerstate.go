package partition

import (
	"time"

	"kaas/actors/actor"
)

// Bounded producer state (issue 27): a partition keeps one entry per producer that wrote
// it (producers.go), so without a bound a client that keeps asking for new producer ids
// grows it for ever. Two bounds:
//
//   - producer.id.expiration.ms (Apache's name and default, 1 day): an entry whose
//     producer has no open transaction here and wrote nothing for that long is dropped
//     (Apache's ProducerStateManager.removeExpiredProducers), looked for every
//     producer.id.expiration.check.interval.ms (10 min), a scan of the map in the
//     actor's turn, off every request's path. Idle is measured on the broker's clock
//     from the producer's last append (at recovery: its batches' timestamps, no later
//     than now), so a client's timestamps cannot keep an entry alive.
//   - producer.state.max.entries (kaas's; Apache has no such bound, only KIP-936's rate
//     of new producer ids per principal): a new producer on a partition holding that
//     many entries first evicts the longest idle one without an open transaction (its
//     retries are then no longer recognized as duplicates). Entries with an open
//     transaction are never evicted: the coordinator bounds those (transaction.max.open,
//     transaction.max.timeout.ms), so the map holds at most the bound plus the open
//     transactions.

// producerExpiryTick looks for expired producers.
type producerExpiryTick struct{ actor.Tick }

// defaultProducerExpiryCheck is producer.id.expiration.check.interval.ms's default.
const defaultProducerExpiryCheck = 10 * time.Minute

// startProducerExpiry arms the expiry check of an opened log.
func (p *partitionActor) startProducerExpiry(ctx actor.Context) {
	if p.cfg.ProducerExpiration <= 0 || p.stopExpiry != nil {
		return
	}
	every := p.cfg.ProducerExpiryCheck
	if every <= 0 {
		every = defaultProducerExpiryCheck
	}
	p.stopExpiry = actor.Every(ctx, every, &producerExpiryTick{})
}

func (p *partitionActor) stopProducerExpiry() {
	if p.stopExpiry != nil {
		p.stopExpiry()
		p.stopExpiry = nil
	}
}

// expireProducers drops the entries idle past producer.id.expiration.ms with no open
// transaction.
func (p *partitionActor) expireProducers() {
	if p.disk == nil || p.cfg.ProducerExpiration <= 0 {
		return
	}
	n := p.producers.expire(p.cfg.Now().UnixMilli(), p.cfg.ProducerExpiration.Milliseconds())
	if n > 0 {
		p.cfg.Metrics.producerMetrics().Expired(n)
		p.log.Debug().Int("expired", n).Int("producers", len(p.producers)).Msg("partition_producers_expired")
		p.publishProducers()
	}
}

// expire drops the entries without an open transaction last seen at or before
// now - expiration, and returns how many.
func (ps producers) expire(nowMS, expirationMS int64) int {
	n := 0
	for id, e := range ps {
		if e.txnFirst < 0 && nowMS-e.seenMS >= expirationMS {
			delete(ps, id)
			n++
		}
	}
	return n
}

// makeRoom evicts the longest idle producer without an open transaction when a new
// producer pid would take the partition past producer.state.max.entries.
func (p *partitionActor) makeRoom(pid int64) {
	max := p.cfg.MaxProducers
	if max <= 0 || pid < 0 || len(p.producers) < max || p.producers[pid] != nil {
		return
	}
	victim, oldest := int64(-1), int64(0)
	for id, e := range p.producers {
		if e.txnFirst < 0 && (victim < 0 || e.seenMS < oldest) {
			victim, oldest = id, e.seenMS
		}
	}
	if victim < 0 {
		return // every entry has an open transaction: the coordinator bounds those
	}
	delete(p.producers, victim)
	p.cfg.Metrics.producerMetrics().Evicted()
	p.log.Debug().Int64("producer_id", victim).Int("max_entries", max).Msg("partition_producer_evicted")
}

// publishProducers publishes the producer-state entries and, while a transaction is
// open or undecided, the LSO lag (its cost, a pass over the producers, is paid only
// then).
func (p *partitionActor) publishProducers() {
	if p.producerMt == nil || p.disk == nil {
		return
	}
	lag := int64(-1)
	if p.openTxns > 0 || len(p.completing) > 0 {
		lag = p.highWatermark() - p.lastStable() // drops the completed transactions first
		if p.openTxns == 0 && len(p.completing) == 0 {
			lag = -1 // the last one's marker just became durable: no series
		}
	}
	p.producerMt.Set(len(p.producers), lag)
}
