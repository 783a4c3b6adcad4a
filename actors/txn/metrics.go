package txn

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kaas/actors/journal"
)

// Metrics are the coordinator's: gauges refreshed by the manager every few seconds,
// and counters the id actors add to as they go. A nil *Metrics records nothing.
type Metrics struct {
	Open      prometheus.Gauge
	OldestAge prometheus.Gauge
	IDs       prometheus.Gauge
	// Aborts counts transactions aborted, by reason (AbortReasons), once the
	// PrepareAbort is durable.
	Aborts *prometheus.CounterVec
	// Markers counts the answers to the partition markers the coordinator sent, by
	// result (MarkerResults).
	Markers *prometheus.CounterVec
	// JournalWrites, JournalSeconds and JournalBatch are the coordinator journal's
	// writes (one write and one fdatasync each, by result: ok, error), their time, and
	// the records each made durable: the group-commit factor of the transitions of
	// every id (Journal).
	JournalWrites  *prometheus.CounterVec
	JournalSeconds prometheus.Histogram
	JournalBatch   prometheus.Histogram
	// Quarantined counts the coordinator journal's damaged segments moved aside.
	Quarantined prometheus.Counter
}

// Abort reasons: the producer's EndTxn (client), its transaction timeout (timeout), a
// new InitProducerId of the id (fence), an operator's WriteTxnMarkers (admin).
const (
	abortClient  = "client"
	abortTimeout = "timeout"
	abortFence   = "fence"
	abortAdmin   = "admin"
)

// AbortReasons are the reason label's values of kaas_transaction_aborts_total.
var AbortReasons = []string{abortClient, abortTimeout, abortFence, abortAdmin}

// MarkerResults are the result label's values of kaas_transaction_markers_total:
// written (durable on its partition), retried (a retriable answer or none), dropped
// (the partition will never take it: its topic deleted, a newer epoch there).
var MarkerResults = []string{"written", "retried", "dropped"}

// NewMetrics registers the coordinator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactions_open",
			Help: "Transactions running (Ongoing or being completed) on this broker's coordinator."}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactions_oldest_open_seconds",
			Help: "Age of the oldest running transaction, 0 when none runs."}),
		IDs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactional_ids",
			Help: "Transactional ids the coordinator keeps (expired after transactional.id.expiration.ms idle)."}),
		Aborts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_transaction_aborts_total",
			Help: "Transactions aborted by the coordinator, by reason: client (EndTxn), timeout, fence (a new InitProducerId), admin (an operator's WriteTxnMarkers)."},
			[]string{"reason"}),
		Markers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_transaction_markers_total",
			Help: "Answers to the transaction markers the coordinator sent to partitions, by result: written, retried (retriable or no answer), dropped (never to be taken)."},
			[]string{"result"}),
		JournalWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_transactions_journal_writes_total",
			Help: "Writes of a batch of transitions to the coordinator's journal (one write and one fdatasync), by result (ok, error)."},
			[]string{"result"}),
		JournalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kaas_transactions_journal_write_duration_seconds",
			Help:    "Time of one write of the coordinator's journal, write and fdatasync.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1}}),
		JournalBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kaas_transactions_journal_batch_records",
			Help:    "Transitions (of every transactional id) made durable by one write of the coordinator's journal: the group-commit factor.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}}),
		Quarantined: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_transactions_journal_segments_quarantined_total",
			Help: "Damaged segments of the coordinator's journal moved to the quarantine directory."}),
	}
	for _, r := range []string{"ok", "error"} {
		m.JournalWrites.WithLabelValues(r)
	}
	for _, r := range AbortReasons {
		m.Aborts.WithLabelValues(r)
	}
	for _, r := range MarkerResults {
		m.Markers.WithLabelValues(r)
	}
	reg.MustRegister(m.Open, m.OldestAge, m.IDs, m.Aborts, m.Markers, m.JournalWrites, m.JournalSeconds, m.JournalBatch,
		m.Quarantined)
	return m
}

// Journal is m as the coordinator journal's metrics (journal.Config.Metrics); nil when
// m is nil.
func (m *Metrics) Journal() journal.Metrics {
	if m == nil {
		return nil
	}
	return journalMetrics{m}
}

type journalMetrics struct{ m *Metrics }

func (j journalMetrics) Wrote(err error, took time.Duration, records int) {
	if err != nil {
		j.m.JournalWrites.WithLabelValues("error").Inc()
		return
	}
	j.m.JournalWrites.WithLabelValues("ok").Inc()
	j.m.JournalSeconds.Observe(took.Seconds())
	j.m.JournalBatch.Observe(float64(records))
}

func (j journalMetrics) Quarantined() { j.m.Quarantined.Inc() }

func (m *Metrics) set(open int, oldestAge float64, ids int) {
	if m == nil {
		return
	}
	m.Open.Set(float64(open))
	m.OldestAge.Set(oldestAge)
	m.IDs.Set(float64(ids))
}

func (m *Metrics) aborted(reason string) {
	if m != nil {
		m.Aborts.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) marker(o markerOutcome) {
	if m != nil {
		m.Markers.WithLabelValues(MarkerResults[o]).Inc()
	}
}
