package txn

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the coordinator's gauges, refreshed by the manager every few seconds.
type Metrics struct {
	Open      prometheus.Gauge
	OldestAge prometheus.Gauge
	IDs       prometheus.Gauge
}

// NewMetrics registers the coordinator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactions_open",
			Help: "Transactions running (Ongoing or being completed) on this broker's coordinator."}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactions_oldest_open_seconds",
			Help: "Age of the oldest running transaction, 0 when none runs."}),
		IDs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_transactional_ids",
			Help: "Transactional ids the coordinator keeps (expired after transactional.id.expiration.ms idle)."}),
	}
	reg.MustRegister(m.Open, m.OldestAge, m.IDs)
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
