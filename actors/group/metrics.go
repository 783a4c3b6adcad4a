package group

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the group actors' collectors, shared by every group of the broker. Label
// sets are bounded: states and rebalance causes are fixed lists, and the per-group
// member gauge has a series only while this broker coordinates the group (its actor
// runs). A nil *Metrics records nothing.
type Metrics struct {
	groups           *prometheus.GaugeVec // by state
	members          *prometheus.GaugeVec // by group
	rebalances       *prometheus.CounterVec
	rebalanceSeconds *prometheus.HistogramVec
	expiries         prometheus.Counter
	// consumer-protocol groups (KIP-848)
	consumerMembersByState *prometheus.GaugeVec   // by state
	consumerFences         *prometheus.CounterVec // by reason
	consumerReconcile      prometheus.Histogram
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
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kaas_group_members", Help: "Members of each group this broker coordinates (loaded).",
		}, []string{"group"}),
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
	for _, s := range consumerStates {
		m.groups.WithLabelValues(s)
	}
	for _, s := range stateNames {
		m.groups.WithLabelValues(s)
	}
	for _, c := range causes {
		m.rebalances.WithLabelValues(c)
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
	state   string
	members prometheus.Gauge // nil: no kaas_group_members series
	n       int
}

// publish brings the gauges to the group's current state and membership; a group that
// does not exist (a lookup of an unknown id) counts nowhere.
func (m *Metrics) publish(p *published, group string, exists bool, s string, members int) {
	if m == nil {
		return
	}
	if p.counted && (!exists || p.state != s) {
		m.groups.WithLabelValues(p.state).Dec()
		p.counted = false
	}
	if exists && !p.counted {
		m.groups.WithLabelValues(s).Inc()
		p.counted, p.state = true, s
	}
	switch {
	case exists && p.members == nil:
		p.members, p.n = m.members.WithLabelValues(group), members
		p.members.Set(float64(members))
	case exists && p.n != members:
		p.n = members
		p.members.Set(float64(members))
	case !exists && p.members != nil:
		m.members.DeleteLabelValues(group)
		p.members = nil
	}
}

// unpublish takes back everything the group added (its actor stops).
func (m *Metrics) unpublish(p *published, group string) {
	if m == nil {
		return
	}
	if p.counted {
		m.groups.WithLabelValues(p.state).Dec()
		p.counted = false
	}
	if p.members != nil {
		m.members.DeleteLabelValues(group)
		p.members = nil
	}
}

func (m *Metrics) rebalanceStarted(cause string) {
	if m != nil {
		m.rebalances.WithLabelValues(cause).Inc()
	}
}

func (m *Metrics) rebalanceDone(cause string, d time.Duration) {
	if m != nil {
		m.rebalanceSeconds.WithLabelValues(cause).Observe(d.Seconds())
	}
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
func (m *Metrics) consumerMembers(was *[4]int, now [4]int) {
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
