package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Producers is what the partitions this broker leads publish of their producer state
// and transactions: per partition with an open transaction its LSO lag (the high
// watermark minus the last stable offset: what read_committed consumers cannot read yet
// because a transaction is undecided), and the producer-state entries of every
// partition, summed; with the entries expired (producer.id.expiration.ms) and evicted
// (producer.state.max.entries). A partition's series live as long as its actor, as the
// cleaner's do. A nil *Producers, and the nil handles it gives, record nothing.
type Producers struct {
	ExpiredEntries prometheus.Counter // kaas_producer_state_expired_total
	EvictedEntries prometheus.Counter // kaas_producer_state_evicted_total

	mu    sync.RWMutex
	parts map[TopicPartition]*PartitionProducers

	lagDesc, entriesDesc *prometheus.Desc
}

// NewProducers makes the collectors and registers them on reg (nil: not registered).
func NewProducers(reg prometheus.Registerer) *Producers {
	c := &Producers{
		ExpiredEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_producer_state_expired_total",
			Help: "Producer-state entries dropped because their producer was idle past producer.id.expiration.ms with no open transaction.",
		}),
		EvictedEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_producer_state_evicted_total",
			Help: "Producer-state entries dropped to make room for a new producer on a partition at producer.state.max.entries (the longest idle first; its duplicate detection is lost).",
		}),
		parts: map[TopicPartition]*PartitionProducers{},
		lagDesc: prometheus.NewDesc("kaas_partition_lso_lag",
			"High watermark minus last stable offset of a partition this broker leads that has an open or undecided transaction (no series otherwise).",
			[]string{"topic", "partition"}, nil),
		entriesDesc: prometheus.NewDesc("kaas_producer_state_entries",
			"Producer-state entries (idempotent and transactional producers) kept by the partitions this broker leads.", nil, nil),
	}
	if reg != nil {
		reg.MustRegister(c.ExpiredEntries, c.EvictedEntries, c)
	}
	return c
}

// Expired counts n entries dropped at producer.id.expiration.ms.
func (c *Producers) Expired(n int) {
	if c != nil && n > 0 {
		c.ExpiredEntries.Add(float64(n))
	}
}

// Evicted counts an entry dropped at producer.state.max.entries.
func (c *Producers) Evicted() {
	if c != nil {
		c.EvictedEntries.Inc()
	}
}

// PartitionProducers is one partition's published producer state.
type PartitionProducers struct {
	c       *Producers
	tp      TopicPartition
	entries atomic.Int64
	lag     atomic.Int64 // -1: no open transaction
}

// Partition registers a partition, replacing an earlier incarnation's.
func (c *Producers) Partition(topic string, partition int32) *PartitionProducers {
	if c == nil {
		return nil
	}
	p := &PartitionProducers{c: c, tp: TopicPartition{topic, partition}}
	p.lag.Store(-1)
	c.mu.Lock()
	c.parts[p.tp] = p
	c.mu.Unlock()
	return p
}

// Set publishes the partition's producer-state entries and LSO lag (-1: no transaction
// open or undecided): two atomic stores.
func (p *PartitionProducers) Set(entries int, lag int64) {
	if p != nil {
		p.entries.Store(int64(entries))
		p.lag.Store(lag)
	}
}

// Remove withdraws the partition, unless a newer incarnation has registered since.
func (p *PartitionProducers) Remove() {
	if p == nil {
		return
	}
	p.c.mu.Lock()
	if p.c.parts[p.tp] == p {
		delete(p.c.parts, p.tp)
	}
	p.c.mu.Unlock()
}

// Describe implements prometheus.Collector (the gauges; the counters are registered on
// their own).
func (c *Producers) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc
	ch <- c.entriesDesc
}

// Collect implements prometheus.Collector.
func (c *Producers) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	parts := make([]*PartitionProducers, 0, len(c.parts))
	for _, p := range c.parts {
		parts = append(parts, p)
	}
	c.mu.RUnlock()
	var total int64
	for _, p := range parts {
		total += p.entries.Load()
		if lag := p.lag.Load(); lag >= 0 {
			ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, float64(lag), p.tp.Topic, strconv.Itoa(int(p.tp.Partition)))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.entriesDesc, prometheus.GaugeValue, float64(total))
}
