package offsets

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kaas/metrics"
)

// Metrics are the offsets actors' collectors, shared by every group's actor. A nil
// *Metrics records nothing.
type Metrics struct {
	writes       *prometheus.CounterVec // by result
	writeSeconds prometheus.Histogram
	loadFailures *prometheus.CounterVec // by reason
	// starts counts offsets actors started: a group's first use since the broker
	// started or adopted it, and each use after a passivation.
	starts        prometheus.Counter
	expired       prometheus.Counter
	journalWrites *prometheus.CounterVec // by result
	journalSecs   prometheus.Histogram
	journalBatch  prometheus.Histogram
	// corruptFrames counts damaged ranges found in the middle of journal segments at
	// replay: acknowledged records lost, their groups held (docs/offsets.md).
	corruptFrames prometheus.Counter
	quarantined   prometheus.Counter
	// pending is the transactional offsets waiting for their transaction's end in the
	// groups this broker serves; pendingRefused counts the TxnOffsetCommits refused for
	// the per-group cap (Config.MaxPendingOffsets).
	pending        prometheus.Gauge
	pendingRefused prometheus.Counter

	// Offsets, when set, receives each group's committed offsets (consumer lag); set it
	// before the first group starts.
	Offsets *metrics.Offsets
}

// NewMetrics makes the collectors and registers them on reg (nil: not registered, which
// tests use). Call it once per broker and share the result through Config.Metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_offsets_writes_total",
			Help: "Rewrites of group offsets files (tmp, fsync, rename, directory fsync), by result (ok, error).",
		}, []string{"result"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kaas_offsets_write_duration_seconds",
			Help:    "Time of one durable rewrite of a group offsets file, encoding included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1},
		}),
		loadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_offsets_load_failures_total",
			Help: "Group offsets files that could not be loaded, by reason (corrupt, unreadable, tombstone: a deleted group's tombstone that cannot be read); the group answers COORDINATOR_NOT_AVAILABLE until the file is repaired.",
		}, []string{"reason"}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_offsets_actor_starts_total",
			Help: "Offsets actors started: a group's first use since the broker started or adopted it, and its first use after each passivation (offsets.idle.passivation.ms). A rate close to the requests' means groups passivate too soon.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_offsets_expired_total",
			Help: "Committed offsets removed by retention (offsets.retention.minutes).",
		}),
		journalWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_offsets_journal_writes_total",
			Help: "Appends of a batch of offset changes to the broker's journal (write + fsync), by result (ok, error).",
		}, []string{"result"}),
		journalSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kaas_offsets_journal_write_duration_seconds",
			Help:    "Time of one journal append, write and fsync.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1},
		}),
		journalBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kaas_offsets_journal_batch_records",
			Help:    "Group records (each a batch of one group's requests) made durable by one journal fsync.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		corruptFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_offsets_journal_corrupt_frames_total",
			Help: "Damaged ranges found in the middle of offsets journal segments at start (valid frames after them): acknowledged commits lost, the segment's groups held until the operator removes the hold marker.",
		}),
		quarantined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_offsets_journal_segments_quarantined_total",
			Help: "Damaged offsets journal segments moved to the quarantine directory (kept for the operator, never replayed again).",
		}),
	}
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kaas_offsets_pending_txn_offsets",
		Help: "Transactional offsets (TxnOffsetCommit) waiting for their transaction's commit or abort, in the groups served (loaded) here.",
	})
	m.pendingRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kaas_offsets_pending_txn_refused_total",
		Help: "TxnOffsetCommits refused because their group held group.max.pending.txn.offsets pending transactional offsets.",
	})
	for _, r := range []string{"corrupt", "unreadable", "tombstone"} {
		m.loadFailures.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.writes.WithLabelValues(r)
		m.journalWrites.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.writeSeconds, m.loadFailures, m.starts, m.expired,
			m.journalWrites, m.journalSecs, m.journalBatch, m.corruptFrames, m.quarantined,
			m.pending, m.pendingRefused)
	}
	return m
}

// wrote counts a group file rewrite (a checkpoint).
func (m *Metrics) wrote(err error, d time.Duration) {
	if m == nil {
		return
	}
	if err != nil {
		m.writes.WithLabelValues("error").Inc()
		return
	}
	m.writes.WithLabelValues("ok").Inc()
	m.writeSeconds.Observe(d.Seconds())
}

func (m *Metrics) loadFailed(reason string) {
	if m == nil {
		return
	}
	m.loadFailures.WithLabelValues(reason).Inc()
}

func (m *Metrics) started() {
	if m != nil {
		m.starts.Inc()
	}
}

func (m *Metrics) expiredOffsets(n int) {
	if m == nil || n == 0 {
		return
	}
	m.expired.Add(float64(n))
}

func (m *Metrics) journalWrote(err error, d time.Duration, records int) {
	if m == nil {
		return
	}
	if err != nil {
		m.journalWrites.WithLabelValues("error").Inc()
		return
	}
	m.journalWrites.WithLabelValues("ok").Inc()
	m.journalSecs.Observe(d.Seconds())
	m.journalBatch.Observe(float64(records))
}

func (m *Metrics) journalCorrupt(ranges int) {
	if m == nil || ranges == 0 {
		return
	}
	m.corruptFrames.Add(float64(ranges))
}

func (m *Metrics) quarantinedSegment() {
	if m != nil {
		m.quarantined.Inc()
	}
}

func (m *Metrics) offsets() *metrics.Offsets {
	if m == nil {
		return nil
	}
	return m.Offsets
}

// pendingMoved adds d to the pending transactional offsets gauge.
func (m *Metrics) pendingMoved(d int) {
	if m != nil && d != 0 {
		m.pending.Add(float64(d))
	}
}

func (m *Metrics) pendingRefusedOnce() {
	if m != nil {
		m.pendingRefused.Inc()
	}
}
