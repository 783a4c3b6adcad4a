package partition

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kaas/metrics"
)

// Metrics are the partition actors' collectors, shared by every partition (no per-topic
// labels: a broker may hold thousands of partitions). A nil *Metrics records nothing.
type Metrics struct {
	appendedBytes   prometheus.Counter
	appendedBatches prometheus.Counter
	rejected        *prometheus.CounterVec // by error
	syncSeconds     prometheus.Histogram
	syncBatches     prometheus.Histogram
	fetchedBytes    prometheus.Counter
	truncations     prometheus.Counter
	corrupt         prometheus.Counter
	writeErrors     *prometheus.CounterVec // by op
	locksBroken     prometheus.Counter
	staleIgnored    prometheus.Counter
	cleaner         *metrics.Cleaner   // compaction passes, per compacted partition
	producers       *metrics.Producers // producer-state entries, LSO lag (producerstate.go)

	// Offsets, when set, receives each partition's high watermark (kaas_log_end_offset
	// and consumer lag); set it before the first partition starts.
	Offsets *metrics.Offsets
}

// NewMetrics makes the collectors and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		appendedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_appended_bytes_total", Help: "Record batch bytes appended to partition logs.",
		}),
		appendedBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_appended_batches_total", Help: "Record batches appended to partition logs.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_log_rejected_batches_total", Help: "Produced batches refused, by Kafka error.",
		}, []string{"error"}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kaas_log_fsync_duration_seconds",
			Help:    "Time of one fsync of a partition's active segment.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1},
		}),
		syncBatches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kaas_log_fsync_batches",
			Help:    "Batches made durable by one fsync: the group-commit factor.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		fetchedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_fetched_bytes_total", Help: "Record batch bytes read for fetches.",
		}),
		truncations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_recovery_truncations_total", Help: "Segments cut back at start because their tail was torn (past the recovery point).",
		}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_corrupt_batches_total", Help: "Corrupt stretches of partition logs found (at start or on read) and quarantined: acknowledged records an operator must restore.",
		}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_log_write_errors_total", Help: "Partition log I/O that failed, by operation (open, append, fsync, log_start_offset); the requests get KAFKA_STORAGE_ERROR.",
		}, []string{"op"}),
		locksBroken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_leader_locks_broken_total", Help: "Partition locks a new leader broke because the broker holding them had lost its lease (paused or cut off).",
		}),
		staleIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_log_stale_writes_ignored_total", Help: "Stretches of partition logs written by a replaced leader after its successor began, found at recovery and never served (never acknowledged).",
		}),
	}
	m.cleaner = metrics.NewCleaner(reg)
	m.producers = metrics.NewProducers(reg)
	for _, op := range []string{"open", "append", "fsync"} {
		m.writeErrors.WithLabelValues(op) // every series from the start, at 0
	}
	if reg != nil {
		reg.MustRegister(m.appendedBytes, m.appendedBatches, m.rejected, m.syncSeconds, m.syncBatches, m.fetchedBytes, m.truncations, m.corrupt, m.writeErrors, m.locksBroken, m.staleIgnored)
	}
	return m
}

func (m *Metrics) appended(bytes int) {
	if m != nil {
		m.appendedBytes.Add(float64(bytes))
		m.appendedBatches.Inc()
	}
}

func (m *Metrics) rejectedBatch(name string) {
	if m != nil {
		m.rejected.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) synced(d time.Duration, batches int64) {
	if m != nil {
		m.syncSeconds.Observe(d.Seconds())
		m.syncBatches.Observe(float64(batches))
	}
}

func (m *Metrics) fetched(bytes int) {
	if m != nil {
		m.fetchedBytes.Add(float64(bytes))
	}
}

func (m *Metrics) truncated() {
	if m != nil {
		m.truncations.Inc()
	}
}

func (m *Metrics) corrupted() {
	if m != nil {
		m.corrupt.Inc()
	}
}

func (m *Metrics) lockBroken() {
	if m != nil {
		m.locksBroken.Inc()
	}
}

func (m *Metrics) staleWrite() {
	if m != nil {
		m.staleIgnored.Inc()
	}
}

func (m *Metrics) writeFailed(op string) {
	if m != nil {
		m.writeErrors.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) offsets() *metrics.Offsets {
	if m == nil {
		return nil
	}
	return m.Offsets
}

func (m *Metrics) cleanerMetrics() *metrics.Cleaner {
	if m == nil {
		return nil
	}
	return m.cleaner
}

func (m *Metrics) producerMetrics() *metrics.Producers {
	if m == nil {
		return nil
	}
	return m.producers
}
