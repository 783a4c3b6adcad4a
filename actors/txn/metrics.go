package txn

import "github.com/prometheus/client_golang/prometheus"

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
	}
	for _, r := range AbortReasons {
		m.Aborts.WithLabelValues(r)
	}
	for _, r := range MarkerResults {
		m.Markers.WithLabelValues(r)
	}
	reg.MustRegister(m.Open, m.OldestAge, m.IDs, m.Aborts, m.Markers)
	return m
}

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
