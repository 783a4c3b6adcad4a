// Package metrics holds the broker-wide Prometheus metrics and the registry they live in.
// Packages with metrics of their own register them on Metrics.Registry.
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the wire-level metrics of one broker.
type Metrics struct {
	Registry *prometheus.Registry

	OpenConnections prometheus.Gauge
	Connections     *prometheus.CounterVec // by listener
	ClosedBadInput  *prometheus.CounterVec // by reason
	Requests        *prometheus.CounterVec // by api, version, error
	RequestSeconds  *prometheus.HistogramVec

	// AcceptErrors counts failed accepts by listener and reason (emfile, enfile, enobufs,
	// enomem, econnaborted, shutdown, timeout, other); the listener retries them with a backoff.
	// ConnectionsRefused counts connections closed as soon as they were accepted, by
	// listener and reason (max_connections_per_ip). AcceptPaused counts the times a
	// listener stopped accepting because max.connections were open, by listener.
	AcceptErrors       *prometheus.CounterVec
	ConnectionsRefused *prometheus.CounterVec
	AcceptPaused       *prometheus.CounterVec

	// Memory clients can pin (actors/conn): bytes held by partly read requests, readers
	// waiting for them, bytes of responses built but not yet written, and requests held
	// until their connection's responses drain.
	RequestBytesQueued     prometheus.Gauge
	RequestReadsWaiting    prometheus.Gauge
	ResponseBytesUnwritten prometheus.Gauge
	RequestsHeld           prometheus.Gauge

	// Security: SASL exchanges by mechanism and result (success, failure), and requests
	// (or parts of them) the authorizer denied, by API and resource type.
	SASLAuthentications *prometheus.CounterVec
	AuthorizationDenied *prometheus.CounterVec
	// Offsets turns log end and committed offsets into consumer lag at each scrape.
	Offsets *Offsets

	// The cluster's (registry/, fence/): defined here, set by the registry and the lease
	// holder. RegistryBrokersAlive is how many brokers of the set the registry sees alive;
	// LeaseHeld is 1 while this broker holds its lease (it may write), else 0;
	// OwnershipMoves counts groups and partitions this broker adopted or released, by
	// kind (group, partition) and direction (adopted, released); the ownership controller
	// (cluster/) counts them.
	RegistryBrokersAlive prometheus.Gauge
	LeaseHeld            prometheus.Gauge
	OwnershipMoves       *prometheus.CounterVec

	// ActorRestarts counts actors restarted after a panic, by kind (group, offsets,
	// partition; transaction: a transactional id's actor, resumed with its state).
	ActorRestarts *prometheus.CounterVec
}

// New makes a fresh registry (one per broker, so tests can run several brokers).
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		OpenConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kaas_connections_open", Help: "Client connections open now.",
		}),
		Connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_connections_accepted_total", Help: "Client connections accepted, by listener.",
		}, []string{"listener"}),
		ClosedBadInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_connections_closed_bad_input_total", Help: "Connections closed because the client broke the protocol, by reason.",
		}, []string{"reason"}),
		AcceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_accept_errors_total", Help: "Failed accepts of a Kafka listener, retried with a backoff, by listener and reason (emfile, enfile, enobufs, enomem, econnaborted, shutdown, timeout, other).",
		}, []string{"listener", "reason"}),
		ConnectionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_connections_refused_total", Help: "Connections closed as soon as they were accepted, by listener and reason (max_connections_per_ip).",
		}, []string{"listener", "reason"}),
		AcceptPaused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_accept_paused_total", Help: "Times a Kafka listener stopped accepting until a connection closed because max.connections were open, by listener.",
		}, []string{"listener"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_requests_total", Help: "Requests answered, by API, version and top-level error code.",
		}, []string{"api", "version", "error"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kaas_request_duration_seconds",
			Help:    "Time from a request's arrival to its response being queued, by API.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"api"}),
		RequestBytesQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kaas_request_bytes_queued", Help: "Bytes reserved by request frames being read (queued.max.request.bytes bounds it).",
		}),
		RequestReadsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kaas_request_reads_waiting", Help: "Connections whose reading waits for queued.max.request.bytes.",
		}),
		ResponseBytesUnwritten: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kaas_response_bytes_unwritten", Help: "Bytes of responses built and not yet written to their sockets.",
		}),
		RequestsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kaas_requests_held", Help: "Requests read and held until their connection's unwritten responses drain.",
		}),
		SASLAuthentications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_sasl_authentications_total", Help: "SASL authentications, by mechanism and result (success, failure).",
		}, []string{"mechanism", "result"}),
		AuthorizationDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_authorization_denied_total", Help: "Resources of requests the authorizer denied, by API and resource type.",
		}, []string{"api", "resource_type"}),
	}
	r.MustRegister(m.SASLAuthentications, m.AuthorizationDenied)
	m.Offsets = NewOffsets(r)
	m.RegistryBrokersAlive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kaas_registry_brokers_alive", Help: "Brokers of the cluster's set the registry sees alive (serving).",
	})
	m.LeaseHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kaas_lease_held", Help: "1 while this broker holds its lease and may write its groups and partitions, else 0.",
	})
	m.ActorRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaas_actor_restarts_total", Help: "Actors restarted after a panic in their Receive, by kind (group, offsets, partition; transaction: resumed with its state).",
	}, []string{"actor"})
	m.OwnershipMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaas_ownership_moves_total", Help: "Groups and partitions this broker adopted or released as the broker set changed, by kind (group, partition) and direction (adopted, released).",
	}, []string{"kind", "direction"})
	for _, kind := range []string{"group", "partition"} {
		for _, dir := range []string{"adopted", "released"} {
			m.OwnershipMoves.WithLabelValues(kind, dir) // every series from the start, at 0
		}
	}
	r.MustRegister(m.ActorRestarts, m.OpenConnections, m.Connections, m.ClosedBadInput, m.AcceptErrors, m.ConnectionsRefused, m.AcceptPaused, m.Requests, m.RequestSeconds,
		m.RequestBytesQueued, m.RequestReadsWaiting, m.ResponseBytesUnwritten, m.RequestsHeld,
		m.RegistryBrokersAlive, m.LeaseHeld, m.OwnershipMoves,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Version formats an API version as a label.
func Version(v int16) string { return strconv.Itoa(int(v)) }
