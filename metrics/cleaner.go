package metrics

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Cleaner is what the log cleaner (compaction of cleanup.policy=compact topics) does on
// this broker: passes, bytes cleaned and reclaimed, errors by step, and per compacted
// partition this broker leads its dirty ratio and the time of its last pass (as Apache's
// LogCleaner reports max-dirty-percent and time-since-last-run-ms, per partition here).
// A partition's series live as long as its actor leads it, so the label sets stay
// bounded by the compacted partitions the broker serves.
//
// A nil *Cleaner, and the nil handles it gives, record nothing.
type Cleaner struct {
	passes    prometheus.Counter
	cleaned   prometheus.Counter
	reclaimed prometheus.Counter
	errors    *prometheus.CounterVec // by step: clean, swap

	mu    sync.RWMutex
	parts map[TopicPartition]*CleanerPartition

	dirtyDesc, lastDesc *prometheus.Desc
}

// CleanerErrorSteps are the steps kaas_log_cleaner_errors_total counts: clean (the key
// map or a cleaned file written aside) and swap (the cleaned files put in place).
var CleanerErrorSteps = []string{"clean", "swap"}

// NewCleaner makes the collectors and registers them on reg (nil: not registered).
func NewCleaner(reg prometheus.Registerer) *Cleaner {
	c := &Cleaner{
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_cleaner_passes_total", Help: "Compaction passes that swapped cleaned segments in.",
		}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_cleaner_cleaned_bytes_total", Help: "Bytes of segments compaction passes rewrote (read and replaced).",
		}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_cleaner_reclaimed_bytes_total", Help: "Bytes compaction removed from partition logs (segments' bytes before a pass minus after).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_log_cleaner_errors_total", Help: "Compaction passes that failed, by step (clean: key map or cleaned files; swap: putting them in place, after which the log is reopened).",
		}, []string{"step"}),
		parts: map[TopicPartition]*CleanerPartition{},
		dirtyDesc: prometheus.NewDesc("kaas_log_cleaner_dirty_ratio",
			"Share of a compacted partition's cleanable bytes not yet cleaned (compared with min.cleanable.dirty.ratio), for the partitions this broker leads.",
			[]string{"topic", "partition"}, nil),
		lastDesc: prometheus.NewDesc("kaas_log_cleaner_last_clean_timestamp_seconds",
			"Unix time of a compacted partition's last compaction pass on this broker (no series until its first).",
			[]string{"topic", "partition"}, nil),
	}
	for _, s := range CleanerErrorSteps {
		c.errors.WithLabelValues(s) // every series from the start, at 0
	}
	if reg != nil {
		reg.MustRegister(c.passes, c.cleaned, c.reclaimed, c.errors, c)
	}
	return c
}

// Cleaned counts a pass swapped in: the bytes of the segments it replaced and of their
// replacements.
func (c *Cleaner) Cleaned(before, after int64) {
	if c != nil {
		c.passes.Inc()
		c.cleaned.Add(float64(before))
		c.reclaimed.Add(float64(max(before-after, 0)))
	}
}

// Failed counts a pass that failed at step (CleanerErrorSteps).
func (c *Cleaner) Failed(step string) {
	if c != nil {
		c.errors.WithLabelValues(step).Inc()
	}
}

// CleanerPartition is one compacted partition's published state.
type CleanerPartition struct {
	c     *Cleaner
	tp    TopicPartition
	dirty atomic.Uint64 // float64 bits
	last  atomic.Int64  // unix ms, 0: not cleaned yet
}

// Partition registers a compacted partition, replacing an earlier incarnation's.
func (c *Cleaner) Partition(topic string, partition int32) *CleanerPartition {
	if c == nil {
		return nil
	}
	p := &CleanerPartition{c: c, tp: TopicPartition{topic, partition}}
	c.mu.Lock()
	c.parts[p.tp] = p
	c.mu.Unlock()
	return p
}

// SetDirtyRatio publishes the partition's dirty ratio (an atomic store).
func (p *CleanerPartition) SetDirtyRatio(r float64) {
	if p != nil {
		p.dirty.Store(math.Float64bits(r))
	}
}

// SetCleaned publishes the time of the partition's last pass, in unix milliseconds.
func (p *CleanerPartition) SetCleaned(unixMS int64) {
	if p != nil {
		p.last.Store(unixMS)
	}
}

// Remove withdraws the partition, unless a newer incarnation has registered since.
func (p *CleanerPartition) Remove() {
	if p == nil {
		return
	}
	p.c.mu.Lock()
	if p.c.parts[p.tp] == p {
		delete(p.c.parts, p.tp)
	}
	p.c.mu.Unlock()
}

// Describe implements prometheus.Collector (the per-partition gauges; the counters are
// registered on their own).
func (c *Cleaner) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dirtyDesc
	ch <- c.lastDesc
}

// Collect implements prometheus.Collector.
func (c *Cleaner) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	parts := make([]*CleanerPartition, 0, len(c.parts))
	for _, p := range c.parts {
		parts = append(parts, p)
	}
	c.mu.RUnlock()
	for _, p := range parts {
		part := strconv.Itoa(int(p.tp.Partition))
		ch <- prometheus.MustNewConstMetric(c.dirtyDesc, prometheus.GaugeValue, math.Float64frombits(p.dirty.Load()), p.tp.Topic, part)
		if last := p.last.Load(); last > 0 {
			ch <- prometheus.MustNewConstMetric(c.lastDesc, prometheus.GaugeValue, float64(last)/1000, p.tp.Topic, part)
		}
	}
}
