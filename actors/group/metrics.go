package group

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the group actors' collectors, shared by every group of the broker. Label
// sets are bounded: states and rebalance causes are fixed lists, and the per-group
// member gauge has a series only while this broker coordinates the group (its actor
// runs). A nil *Metrics records nothing.
type Metrics struct {
	groups           *prometheus.GaugeVec // by state
	members          *memberCounts        // kaas_group_members, by group
	rebalances       *prometheus.CounterVec
	rebalanceSeconds *prometheus.HistogramVec
	expiries         prometheus.Counter
	// consumer-protocol groups (KIP-848)
	consumerMembersByState *prometheus.GaugeVec   // by state
	consumerFences         *prometheus.CounterVec // by reason
	consumerReconcile      prometheus.Histogram

	// The children of the fixed label sets, looked up once: a group changes state four
	// times a generation, and WithLabelValues hashes and checks its labels on every call.
	// The maps are read-only once made (NewMetrics), so every group actor reads them at
	// once; a histogram child is looked up at its cause's first rebalance, so that its
	// series appear then, as the vector's own do.
	byState        map[string]prometheus.Gauge
	byCause        map[string]prometheus.Counter
	secondsByCause map[string]*atomic.Pointer[prometheus.Observer]
}

// Reasons a consumer-protocol member is fenced (kaas_consumer_group_fences_total).
var fenceReasons = []string{"session_timeout", "rebalance_timeout", "epoch", "removed", "classic_join_timeout", "classic_sync_timeout"}

// Rebalance causes, the reason label of the rebalance metrics.
const (
	causeMemberJoined     = "member_joined"
	causeMemberRejoined   = "member_rejoined"
	causeProtocolsChanged = "member_protocols_changed"
	causeStaticRejoined   = "static_member_rejoined"
	causeMemberLeft       = "member_left"
	causeSessionExpired   = "session_expired"
	causeSyncTimeout      = "sync_timeout"
	causeNotSaved         = "generation_not_saved"
	causeMaxSize          = "group_max_size"
	causeDowngraded       = "downgraded_from_consumer"
)

var causes = []string{causeMemberJoined, causeMemberRejoined, causeProtocolsChanged, causeStaticRejoined,
	causeMemberLeft, causeSessionExpired, causeSyncTimeout, causeNotSaved, causeMaxSize, causeDowngraded}

// NewMetrics makes the collectors and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		groups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kaas_groups", Help: "Consumer groups this broker coordinates (loaded), by state (a consumer-protocol group's: Empty, Assigning, Reconciling, Stable).",
		}, []string{"state"}),
		members: &memberCounts{desc: prometheus.NewDesc("kaas_group_members",
			"Members of each group this broker coordinates (loaded).", []string{"group"}, nil),
			n: map[string]int{}},
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_group_rebalances_total", Help: "Rebalances started (a group entering PreparingRebalance), by reason.",
		}, []string{"reason"}),
		rebalanceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kaas_group_rebalance_duration_seconds",
			Help:    "Time from a rebalance's start to the group being Stable (or Empty) again, by the reason it started.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"reason"}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kaas_group_session_expiries_total", Help: "Members removed because their session expired.",
		}),
	}
	m.consumerMembersByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kaas_consumer_group_members",
		Help: "Members of the consumer-protocol groups (KIP-848) this broker coordinates, by reconciliation state (stable, unrevoked_partitions, unreleased_partitions, left: a static member away with epoch -2).",
	}, []string{"state"})
	m.consumerFences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kaas_consumer_group_fences_total",
		Help: "Consumer-protocol members fenced, by reason: session_timeout and rebalance_timeout remove the member, removed is an admin LeaveGroup, epoch is a heartbeat answered FENCED_MEMBER_EPOCH.",
	}, []string{"reason"})
	m.consumerReconcile = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kaas_consumer_group_reconciliation_seconds",
		Help:    "Time from a consumer-protocol group's new target assignment to every member stable at it (or the group empty).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	})
	for _, s := range memberStates {
		m.consumerMembersByState.WithLabelValues(s)
	}
	for _, r := range fenceReasons {
		m.consumerFences.WithLabelValues(r)
	}
	m.byState = map[string]prometheus.Gauge{}
	for _, s := range consumerStates {
		m.byState[s] = m.groups.WithLabelValues(s)
	}
	for _, s := range stateNames {
		m.byState[s] = m.groups.WithLabelValues(s)
	}
	m.byCause, m.secondsByCause = map[string]prometheus.Counter{}, map[string]*atomic.Pointer[prometheus.Observer]{}
	for _, c := range causes {
		m.byCause[c] = m.rebalances.WithLabelValues(c)
		m.secondsByCause[c] = &atomic.Pointer[prometheus.Observer]{}
	}
	if reg != nil {
		reg.MustRegister(m.groups, m.members, m.rebalances, m.rebalanceSeconds, m.expiries,
			m.consumerMembersByState, m.consumerFences, m.consumerReconcile)
	}
	return m
}

// published is what one group actor has added to the gauges, so it can take it back.
type published struct {
	counted bool // the group adds 1 to kaas_groups{state}
	members bool // the group has a kaas_group_members series, of n (the flags share a word)
	state   string
	n       int
}

// memberCounts is kaas_group_members: a count per loaded group, read at a scrape. A
// GaugeVec child per group cost about 300 bytes (the gauge, its label pairs, the vec's
// entry); a map entry keyed by the group's own id string is a tenth of that.
type memberCounts struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	n    map[string]int
}

func (c *memberCounts) set(group string, n int) {
	c.mu.Lock()
	c.n[group] = n
	c.mu.Unlock()
}

func (c *memberCounts) remove(group string) {
	c.mu.Lock()
	delete(c.n, group)
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *memberCounts) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. The counts are copied first, so a group
// publishing never waits for the scrape.
func (c *memberCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	n := make(map[string]int, len(c.n))
	for g, v := range c.n {
		n[g] = v
	}
	c.mu.Unlock()
	for g, v := range n {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), g)
	}
}

// publish brings the gauges to the group's current state and membership; a group that
// does not exist (a lookup of an unknown id) counts nowhere.
func (m *Metrics) publish(p *published, group string, exists bool, s string, members int) {
	if m == nil {
		return
	}
	if p.counted && (!exists || p.state != s) {
		m.stateGauge(p.state).Dec()
		p.counted = false
	}
	if exists && !p.counted {
		m.stateGauge(s).Inc()
		p.counted, p.state = true, s
	}
	switch {
	case exists && (!p.members || p.n != members):
		p.members, p.n = true, members
		m.members.set(group, members)
	case !exists && p.members:
		m.members.remove(group)
		p.members = false
	}
}

// unpublish takes back everything the group added (its actor stops).
func (m *Metrics) unpublish(p *published, group string) {
	if m == nil {
		return
	}
	if p.counted {
		m.stateGauge(p.state).Dec()
		p.counted = false
	}
	if p.members {
		m.members.remove(group)
		p.members = false
	}
}

// stateGauge is kaas_groups{state=s}.
func (m *Metrics) stateGauge(s string) prometheus.Gauge {
	if g := m.byState[s]; g != nil {
		return g
	}
	return m.groups.WithLabelValues(s)
}

func (m *Metrics) rebalanceStarted(cause string) {
	if m == nil {
		return
	}
	if c := m.byCause[cause]; c != nil {
		c.Inc()
		return
	}
	m.rebalances.WithLabelValues(cause).Inc()
}

func (m *Metrics) rebalanceDone(cause string, d time.Duration) {
	if m == nil {
		return
	}
	slot := m.secondsByCause[cause]
	if slot == nil {
		m.rebalanceSeconds.WithLabelValues(cause).Observe(d.Seconds())
		return
	}
	o := slot.Load()
	if o == nil {
		h := m.rebalanceSeconds.WithLabelValues(cause)
		o = &h
		slot.Store(o)
	}
	(*o).Observe(d.Seconds())
}

func (m *Metrics) sessionExpired() {
	if m != nil {
		m.expiries.Inc()
	}
}

func (m *Metrics) consumerFenced(reason string) {
	if m != nil {
		m.consumerFences.WithLabelValues(reason).Inc()
	}
}

// consumerMembers moves kaas_consumer_group_members from what a group published (was)
// to now, by state (memberStates order).
func (m *Metrics) consumerMembers(was *[4]int32, now [4]int32) {
	if m == nil {
		*was = now
		return
	}
	for i, n := range now {
		if d := n - was[i]; d != 0 {
			m.consumerMembersByState.WithLabelValues(memberStates[i]).Add(float64(d))
		}
	}
	*was = now
}

func (m *Metrics) consumerReconciled(d time.Duration) {
	if m != nil {
		m.consumerReconcile.Observe(d.Seconds())
	}
}
