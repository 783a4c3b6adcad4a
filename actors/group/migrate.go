package group

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/logs"
)

// Online migration between the classic and the consumer group protocols, as Apache's
// GroupMetadataManager does it (apache-kip848.md §1.9), under
// group.consumer.migration.policy:
//
//	classic group with members, in any state ──ConsumerGroupHeartbeat join (upgrade
//	    allowed)──▶ consumer-protocol group: the JoinGroups and SyncGroups a rebalance
//	    had parked answered REBALANCE_IN_PROGRESS, each classic member a "classic"
//	    member at the generation as its epoch, keeping its assignment (empty for a
//	    member that joined in the rebalance and was never given one; the target until
//	    the join's bump recomputes it)
//	mixed group: classic members served through JoinGroup/SyncGroup/Heartbeat/
//	    LeaveGroup/OffsetCommit (classicJoinConsumer, classicSyncConsumer,
//	    classicHeartbeatConsumer): a JoinGroup reconciles the member like a heartbeat
//	    with the partitions its subscription says it owns and answers at once with no
//	    leader, SyncGroup hands out its assignment, Heartbeat answers
//	    REBALANCE_IN_PROGRESS while its assignment must change
//	consumer-protocol group ──its last consumer-protocol member leaves or is fenced,
//	    classic members remain (downgrade allowed)──▶ classic group at the group epoch,
//	    each member with its target assignment, rebalancing at once
//
// Every conversion is written to the group file (through the offsets journal) before
// the request that caused it is answered.

// Migration policies (group.consumer.migration.policy, Apache's names).
const (
	MigrationBidirectional = "bidirectional"
	MigrationUpgrade       = "upgrade"
	MigrationDowngrade     = "downgrade"
	MigrationDisabled      = "disabled"
)

// MigrationPolicies are the values group.consumer.migration.policy takes.
var MigrationPolicies = []string{MigrationBidirectional, MigrationUpgrade, MigrationDowngrade, MigrationDisabled}

func (s *ConsumerSettings) upgradeEnabled() bool {
	return s.Migration == "" || s.Migration == MigrationBidirectional || s.Migration == MigrationUpgrade
}

func (s *ConsumerSettings) downgradeEnabled() bool {
	return s.Migration == "" || s.Migration == MigrationBidirectional || s.Migration == MigrationDowngrade
}

// classicMember is what a member of a consumer-protocol group that speaks the classic
// protocol has besides the consumer-protocol state (Apache ClassicMemberMetadata).
type classicMember struct {
	sessionTimeout time.Duration
	protocols      []Protocol // as its last JoinGroup listed them; the first names the protocol
	// owes: the JoinGroup (after a REBALANCE_IN_PROGRESS) or SyncGroup (after a join)
	// the member must send within its rebalance timeout, else it is fenced (Apache's
	// join and sync timeouts); owesSeq guards the timer.
	owes       classicOwed
	owesSeq    uint64
	owesCancel actor.Cancel
}

type classicOwed uint8

const (
	owesNothing classicOwed = iota
	owesJoin
	owesSync
)

// classicOwedCheck fires when a classic member of a consumer-protocol group has not sent
// the JoinGroup or SyncGroup it owes within its rebalance timeout.
type classicOwedCheck struct {
	member string
	seq    uint64
	owes   classicOwed
}

// sessionTimeout is how long m may stay silent: its JoinGroup's session timeout for a
// classic member, the group's consumer.session.timeout.ms (else the broker's
// group.consumer.session.timeout.ms) otherwise.
func (g *groupActor) sessionTimeoutOf(m *cMember) time.Duration {
	if m.classic != nil {
		return m.classic.sessionTimeout
	}
	s, _ := g.consumerTimes()
	return s
}

// protocolName is the protocol a classic member's JoinGroup answer names (Apache: its
// first).
func (c *classicMember) protocolName() string {
	if len(c.protocols) == 0 {
		return ""
	}
	return c.protocols[0].Name
}

// assignmentVersion is the ConsumerProtocol version a classic member's assignment is
// written in: its subscription's (Apache prepareAssignment).
func (c *classicMember) assignmentVersion() int16 {
	if len(c.protocols) == 0 || len(c.protocols[0].Metadata) < 2 {
		return 0
	}
	md := c.protocols[0].Metadata
	return min(int16(md[0])<<8|int16(md[1]), 3)
}

// encodeAssignment writes a as a ConsumerProtocol assignment of the given version,
// topics and partitions in order.
func encodeAssignment(a assignment, version int16) []byte {
	asg := kmsg.NewConsumerMemberAssignment()
	asg.Version = max(version, 0)
	names := make([]string, 0, len(a))
	for t := range a {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		ps := slices.Clone(a[t])
		slices.Sort(ps)
		asg.Topics = append(asg.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: ps})
	}
	return asg.AppendTo(nil)
}

// decodeAssignment reads a classic member's ConsumerProtocol assignment, keeping the
// topics known keeps (Apache drops those missing from its metadata image). Empty bytes
// are an empty assignment; user data refuses it (Apache fromClassicGroup: a custom
// assignor's, which the broker's assignors would lose).
func decodeAssignment(b []byte, known func(string) bool) (assignment, error) {
	out := assignment{}
	if len(b) == 0 {
		return out, nil
	}
	var asg kmsg.ConsumerMemberAssignment
	if err := asg.ReadFrom(b); err != nil {
		return nil, err
	}
	if len(asg.UserData) > 0 {
		return nil, fmt.Errorf("%w (%d bytes)", errCustomAssignor, len(asg.UserData))
	}
	for _, t := range asg.Topics {
		if !known(t.Topic) {
			continue
		}
		for _, p := range t.Partitions {
			out.add(t.Topic, p)
		}
	}
	return out, nil
}

// decodeSubscription reads a classic member's ConsumerProtocol subscription.
func decodeSubscription(b []byte) (*kmsg.ConsumerMemberMetadata, error) {
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(b); err != nil {
		return nil, err
	}
	return &md, nil
}

func sortedUnique(ts []string) []string {
	out := slices.Clone(ts)
	sort.Strings(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

func (g *groupActor) topicKnown(t string) bool {
	lookup := g.cfg.Settings.Consumer.Topics
	if lookup == nil {
		return false
	}
	_, _, ok := lookup.Topic(t)
	return ok
}

// upgradeRefusal says why this classic group with members cannot become a
// consumer-protocol group ("" when it can): Apache's validateOnlineUpgrade (the policy,
// the consumer embedded protocol, group.consumer.max.size). Its state does not matter:
// a group in a rebalance is converted too (Apache convertToConsumerGroup), its parked
// JoinGroups and SyncGroups answered REBALANCE_IN_PROGRESS once the join is accepted.
// The member gets GROUP_ID_NOT_FOUND with it.
func (g *groupActor) upgradeRefusal() string {
	s := &g.cfg.Settings.Consumer
	switch {
	case !s.upgradeEnabled():
		return "the online upgrade is disabled"
	case g.protocolType != consumerProtocol:
		return "the group does not use the consumer embedded protocol"
	case len(g.members) > s.MaxSize:
		return "the group size exceeds the consumer group maximum size"
	}
	return ""
}

// consumerFromClassic is the consumer-protocol state of this classic group, whatever
// its state (Apache ConsumerGroup.fromClassicGroup): the group and target epochs are
// the generation, and every member is a classic member at that epoch, stable, its
// assignment what its last SyncGroup gave it (also its target; empty for a member that
// has none: it joined in this rebalance, or its assignment was dropped when a rebalance
// interrupted the sync), its subscription and rack from its metadata. A subscription or
// assignment that does not decode refuses it, and so does an assignment carrying user
// data (a custom assignor's, which the broker's assignors would lose).
//
// Beyond Apache, a member is also taken to hold the partitions its last JoinGroup's
// subscription says it owns that no other member holds: a cooperative client keeps its
// partitions through a rebalance, also when the broker dropped its assignment (a sync
// interrupted by a new round), and nobody else may be given them until it has rejoined
// and revoked them.
func (g *groupActor) consumerFromClassic() (*consumerGroup, error) {
	cg := newConsumerGroup()
	cg.epoch, cg.targetEpoch = g.generation, g.generation
	cg.emptySince = time.Time{}
	now := time.Now()
	ms := g.sortedMembers()
	// The protocol the subscriptions are read from: the group's, or before a first
	// generation chose one, the one it would choose.
	proto := g.protocol
	if proto == "" {
		proto, _ = selectProtocol(protocolLists(ms))
	}
	subs := make([]*kmsg.ConsumerMemberMetadata, len(ms))
	for i, om := range ms {
		meta := om.metadataFor(proto)
		if meta == nil && len(om.protocols) > 0 {
			meta = om.protocols[0].Metadata
		}
		md, err := decodeSubscription(meta)
		if err != nil {
			return nil, fmt.Errorf("member %s subscription: %w", om.id, err)
		}
		subs[i] = md
		asg, err := decodeAssignment(om.assignment, g.topicKnown)
		if err != nil {
			return nil, fmt.Errorf("member %s assignment: %w", om.id, err)
		}
		m := &cMember{
			id: om.id, instanceID: om.instanceID, clientID: om.clientID, clientHost: om.clientHost,
			epoch: g.generation, prevEpoch: g.generation, state: memberStable,
			rebalanceTimeout: om.rebalanceTimeout, since: map[topicPartition]int32{},
			assigned: asg, revoking: assignment{},
			classic:  &classicMember{sessionTimeout: om.sessionTimeout, protocols: slices.Clone(om.protocols)},
			deadline: now.Add(om.sessionTimeout),
		}
		if md.Rack != nil {
			m.rackID = *md.Rack
		}
		cg.resubscribe(m, sortedUnique(md.Topics), nil)
		asg.each(func(t string, p int32) {
			cg.owner[topicPartition{t, p}] = m.id
			m.since[topicPartition{t, p}] = g.generation
		})
		cg.members[m.id] = m
		if m.instanceID != "" {
			cg.instances[m.instanceID] = m.id
		}
	}
	lookup := g.cfg.Settings.Consumer.Topics
	if lookup != nil {
		for t := range cg.subscribed {
			if _, n, ok := lookup.Topic(t); ok {
				cg.topicParts[t] = n
			}
		}
	}
	// What a member says it owns and nobody holds is its too (never two owners).
	for i, om := range ms {
		m := cg.members[om.id]
		for _, t := range subs[i].OwnedPartitions {
			if lookup == nil {
				break
			}
			_, n, ok := lookup.Topic(t.Topic)
			if !ok {
				continue
			}
			for _, p := range t.Partitions {
				tp := topicPartition{t.Topic, p}
				if _, held := cg.owner[tp]; held || p < 0 || p >= n {
					continue
				}
				m.assigned.add(t.Topic, p)
				cg.owner[tp] = m.id
				m.since[tp] = g.generation
			}
		}
		cg.target[m.id] = m.assigned.clone()
	}
	cg.dirty = true
	return cg, nil
}

// errCustomAssignor: a classic assignment carries a custom assignor's user data.
var errCustomAssignor = errors.New("the assignment carries user data from a custom assignor")

// dropClassicState ends the classic side of a group that became a consumer-protocol
// group: its members' timers, the rebalance timers and pending members. The group
// keeps existing, its offsets stay.
func (g *groupActor) dropClassicState() {
	for _, m := range g.members {
		if j := g.unpark(m); j != nil {
			j.Reply.Resolve(joinError(kerr.RebalanceInProgress.Code, m.id))
		}
		if m.sync != nil {
			m.sync.fail(kerr.RebalanceInProgress.Code)
			m.sync = nil
		}
		if m.cancel != nil {
			m.cancel()
		}
		m.timerSeq++
	}
	for id := range g.pending {
		g.dropPending(id)
	}
	g.cancelJoin()
	g.cancelSync()
	g.members, g.order = map[string]*member{}, nil
	g.instances, g.supported, g.pendingSync = map[string]string{}, map[string]int{}, map[string]bool{}
	g.awaitingJoin = 0
	g.protocol, g.leader = "", ""
	g.topics, g.topicsKnown = nil, false
	g.initialDelay, g.newMemberAdded = false, false
	g.setState(stateEmpty)
	g.protocolType = consumerProtocol
}

// supportsClassic is Apache's ConsumerGroup.supportsClassicProtocols: a classic member
// must use the consumer embedded protocol and share a protocol name with every classic
// member already there.
func (cg *consumerGroup) supportsClassic(protocolType string, ps []Protocol) bool {
	if protocolType != consumerProtocol || len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		all := true
		for _, m := range cg.members {
			if m.classic != nil && !slices.ContainsFunc(m.classic.protocols, func(q Protocol) bool { return q.Name == p.Name }) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// classicJoinConsumer is a JoinGroup to a consumer-protocol group with members (Apache
// classicGroupJoinToConsumerGroup): the member joins or rejoins as a classic member, its
// subscription and owned partitions read from its ConsumerProtocol metadata, reconciled
// as a heartbeat would be, and answered at once, once the new state is durable, with
// its member epoch as the generation and no leader (every classic member is a follower:
// the broker assigns).
func (g *groupActor) classicJoinConsumer(ctx actor.Context, r *JoinGroup) {
	s := g.cfg.Settings
	cg := g.cg
	if !validSessionTimeout(r.SessionTimeout, s.MinSessionTimeout, s.MaxSessionTimeout) {
		g.replyJoin(r, joinError(kerr.InvalidSessionTimeout.Code, r.MemberID))
		return
	}
	id := r.MemberID
	unknown := id == ""
	if unknown {
		id = g.cfg.NewID()
	}
	if cg.members[id] == nil && len(cg.members) >= s.Consumer.MaxSize {
		g.replyJoin(r, joinError(kerr.GroupMaxSizeReached.Code, r.MemberID))
		return
	}
	if !cg.supportsClassic(r.ProtocolType, r.Protocols) {
		g.replyJoin(r, joinError(kerr.InconsistentGroupProtocol.Code, r.MemberID))
		return
	}
	if unknown && r.RequireKnownMemberID && r.InstanceID == "" {
		// KIP-394 as Apache answers it here: the id is handed out, nothing is kept.
		g.replyJoin(r, joinError(kerr.MemberIDRequired.Code, id))
		return
	}
	md, err := decodeSubscription(r.Protocols[0].Metadata)
	if err != nil {
		// Apache: an IllegalStateException, UNKNOWN_SERVER_ERROR.
		g.log().Warn().Err(err).Str("member", logs.ID(id)).Msg("classic_member_subscription_malformed")
		g.replyJoin(r, joinError(kerr.UnknownServerError.Code, r.MemberID))
		return
	}
	var m *cMember
	replacedConsumer := false // the member replaced speaks the consumer protocol
	if r.InstanceID != "" {
		if oldID, ok := cg.instances[r.InstanceID]; ok && oldID != id {
			replacedConsumer = cg.members[oldID].classic == nil
			m = g.replaceConsumerMember(cg.members[oldID], id)
		}
	}
	if m == nil {
		m = cg.members[id]
	}
	if m == nil {
		m = &cMember{id: id, assigned: assignment{}, revoking: assignment{}, since: map[topicPartition]int32{}}
		cg.members[id] = m
		cg.emptySince = time.Time{}
		cg.bump = true
		g.log().Info().Str("member", logs.ID(id)).Str("instance", logs.ID(r.InstanceID)).Int32("group_epoch", cg.epoch+1).
			Msg("classic_member_joined_consumer_group")
	}
	if r.InstanceID != "" && m.instanceID != r.InstanceID {
		m.instanceID = r.InstanceID
		cg.instances[m.instanceID] = m.id
	}
	if m.classic == nil {
		m.classic = &classicMember{}
	}
	m.classic.sessionTimeout, m.classic.protocols = r.SessionTimeout, slices.Clone(r.Protocols)
	m.clientID, m.clientHost = r.ClientID, r.ClientHost
	if md.Rack != nil {
		m.rackID = *md.Rack
	}
	m.rebalanceTimeout = r.RebalanceTimeout
	if m.assignor != "" {
		m.assignor = ""
		cg.bump = true
	}
	if m.regex != "" {
		m.regex, m.re, m.resolvedGen = "", nil, 0
	}
	if cg.resubscribe(m, sortedUnique(md.Topics), nil) {
		cg.bump = true
	}
	// A mixed group's changes are saved whole: its classic members change in ways
	// the consumer-protocol paths do not mark.
	cg.dirty, cg.full = true, true
	g.refreshTopics()
	if cg.bump {
		cg.epoch++
		cg.bump = false
	}
	if cg.epoch > cg.targetEpoch {
		g.computeTarget()
	}
	owned := assignment{}
	for _, t := range md.OwnedPartitions {
		for _, p := range t.Partitions {
			owned.add(t.Topic, p)
		}
	}
	g.reconcileMember(ctx, m, owned)
	if replacedConsumer && g.allClassicDowngradable() {
		// The last consumer-protocol member was a static member this one replaced: the
		// group goes back to the classic protocol without a rebalance, the joiner with
		// the assignment it took over (Apache validateOnlineDowngradeWithReplacedMemberId).
		g.log().Info().Str("member", logs.ID(m.id)).Msg("consumer_group_downgraded_by_static_replacement")
		g.downgrade(ctx, nil, false, r, func(code int16) {
			if code != 0 {
				g.replyJoin(r, joinError(code, r.MemberID))
				return
			}
			g.replyJoin(r, &JoinResult{Generation: g.generation, ProtocolType: consumerProtocol, ProtocolName: g.protocol, MemberID: m.id})
		})
		return
	}
	m.deadline = time.Now().Add(m.classic.sessionTimeout)
	g.armConsumerSession(ctx, m)
	g.classicOwe(ctx, m, owesSync)
	res := &JoinResult{Generation: m.epoch, ProtocolType: consumerProtocol, ProtocolName: m.classic.protocolName(), MemberID: m.id}
	g.saveConsumer(ctx, r, func(code int16) {
		if code != 0 {
			g.replyJoin(r, joinError(code, r.MemberID))
			return
		}
		g.replyJoin(r, res)
	})
}

// replaceConsumerMember gives old's place, assignment and target to a new member id at
// epoch 0 (Apache getOrMaybeSubscribeStaticConsumerGroupMember for a static member
// rejoining under a new id): it reconciles from what it reports owning.
func (g *groupActor) replaceConsumerMember(old *cMember, id string) *cMember {
	cg := g.cg
	m := &cMember{
		id: id, instanceID: old.instanceID, rackID: old.rackID, clientID: old.clientID, clientHost: old.clientHost,
		subscribed: old.subscribed, regex: old.regex, re: old.re, resolved: old.resolved, resolvedGen: old.resolvedGen,
		assignor: old.assignor, rebalanceTimeout: old.rebalanceTimeout, state: memberStable,
		assigned: old.assigned, revoking: assignment{}, since: old.since, classic: old.classic,
	}
	for tp, holder := range cg.owner {
		if holder == old.id {
			if m.assigned.has(tp.topic, tp.partition) {
				cg.owner[tp] = m.id
			} else {
				delete(cg.owner, tp)
			}
		}
	}
	g.cancelConsumerTimers(old)
	if m.classic != nil {
		m.classic = &classicMember{sessionTimeout: old.classic.sessionTimeout, protocols: old.classic.protocols}
	}
	delete(cg.members, old.id)
	cg.target[m.id] = cg.target[old.id]
	delete(cg.target, old.id)
	cg.members[m.id] = m
	if m.instanceID != "" {
		cg.instances[m.instanceID] = m.id
	}
	cg.dirty, cg.full = true, true
	g.log().Info().Str("member", logs.ID(m.id)).Str("replaced", logs.ID(old.id)).Str("instance", logs.ID(m.instanceID)).
		Msg("consumer_static_member_replaced")
	return m
}

// classicMemberOf finds the classic member a SyncGroup, Heartbeat names (Apache
// validateConsumerGroupMember, throwIfMemberDoesNotUseClassicProtocol).
func (g *groupActor) classicMemberOf(memberID, instanceID string) (*cMember, int16) {
	cg := g.cg
	id := memberID
	if instanceID != "" {
		known, ok := cg.instances[instanceID]
		switch {
		case !ok:
			return nil, kerr.UnknownMemberID.Code
		case known != memberID:
			return nil, kerr.FencedInstanceID.Code
		}
		id = known
	}
	m := cg.members[id]
	if m == nil || m.classic == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return m, 0
}

// classicSyncConsumer is a SyncGroup from a classic member of a consumer-protocol group
// (Apache classicGroupSyncToConsumerGroup): its assignment, unless the group moved on
// since its join (REBALANCE_IN_PROGRESS: it rejoins), its leader assignments ignored.
func (g *groupActor) classicSyncConsumer(ctx actor.Context, r *SyncGroup) {
	m, code := g.classicMemberOf(r.MemberID, r.InstanceID)
	switch {
	case code != 0:
	case r.Generation != m.epoch:
		code = kerr.IllegalGeneration.Code
	case r.ProtocolType != nil && *r.ProtocolType != consumerProtocol,
		r.ProtocolName != nil && *r.ProtocolName != m.classic.protocolName():
		code = kerr.InconsistentGroupProtocol.Code
	case g.cg.epoch > m.epoch && m.state != memberUnrevoked:
		code = kerr.RebalanceInProgress.Code
		g.classicOweIfNothing(ctx, m, owesJoin)
	}
	if code != 0 {
		r.fail(code)
		return
	}
	if m.classic.owes == owesSync {
		g.classicOwe(ctx, m, owesNothing)
	}
	m.deadline = time.Now().Add(m.classic.sessionTimeout)
	g.armConsumerSession(ctx, m)
	res := &SyncResult{Assignment: encodeAssignment(m.assigned, m.classic.assignmentVersion())}
	if r.ProtocolType != nil {
		res.ProtocolType = *r.ProtocolType
	}
	if r.ProtocolName != nil {
		res.ProtocolName = *r.ProtocolName
	}
	r.Reply.Resolve(res)
}

// classicHeartbeatConsumer is a Heartbeat from a classic member of a consumer-protocol
// group (Apache classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS when the
// member must rejoin: the group epoch moved past it, it has partitions to revoke, or the
// partitions it waits for are free.
func (g *groupActor) classicHeartbeatConsumer(ctx actor.Context, r *Heartbeat) {
	m, code := g.classicMemberOf(r.MemberID, r.InstanceID)
	if code == 0 && r.Generation != m.epoch {
		code = kerr.IllegalGeneration.Code
	}
	if code != 0 {
		r.fail(code)
		return
	}
	m.deadline = time.Now().Add(m.classic.sessionTimeout)
	g.armConsumerSession(ctx, m)
	if m.epoch < g.cg.epoch || m.state == memberUnrevoked || (m.state == memberUnreleased && !g.waitingOnUnreleased(m)) {
		g.classicOweIfNothing(ctx, m, owesJoin)
		r.fail(kerr.RebalanceInProgress.Code)
		return
	}
	r.Reply.Resolve(&Result{})
}

// waitingOnUnreleased: a partition of m's target is still held by another member.
func (g *groupActor) waitingOnUnreleased(m *cMember) bool {
	cg := g.cg
	waiting := false
	cg.target[m.id].each(func(t string, p int32) {
		if waiting || m.assigned.has(t, p) {
			return
		}
		if o, ok := cg.owner[topicPartition{t, p}]; ok && o != m.id {
			waiting = true
		}
	})
	return waiting
}

// classicOwe arms (or, with owesNothing, cancels) the timer of what m owes.
func (g *groupActor) classicOwe(ctx actor.Context, m *cMember, what classicOwed) {
	c := m.classic
	if c.owesCancel != nil {
		c.owesCancel()
		c.owesCancel = nil
	}
	c.owes = what
	c.owesSeq++
	if what == owesNothing {
		return
	}
	d := m.rebalanceTimeout
	if d <= 0 {
		d = c.sessionTimeout
	}
	c.owesCancel = actor.After(ctx, d, &classicOwedCheck{member: m.id, seq: c.owesSeq, owes: what})
}

// classicOweIfNothing is Apache's scheduleConsumerGroupJoinTimeoutIfAbsent.
func (g *groupActor) classicOweIfNothing(ctx actor.Context, m *cMember, what classicOwed) {
	if m.classic.owes == owesNothing {
		g.classicOwe(ctx, m, what)
	}
}

// onClassicOwed fences a classic member that did not rejoin or sync in time.
func (g *groupActor) onClassicOwed(ctx actor.Context, t *classicOwedCheck) {
	if g.cg == nil {
		return
	}
	m := g.cg.members[t.member]
	if m == nil || m.classic == nil || m.classic.owesSeq != t.seq || m.classic.owes != t.owes {
		return
	}
	reason := "classic_join_timeout"
	if t.owes == owesSync {
		reason = "classic_sync_timeout"
	}
	g.log().Info().Str("member", logs.ID(m.id)).Int32("member_epoch", m.epoch).Str("reason", reason).Msg("classic_member_fenced")
	g.fenceConsumerMembers(ctx, []*cMember{m}, reason, nil, func(code int16) {
		if code != 0 {
			g.log().Warn().Int16("error_code", code).Msg("consumer_group_state_not_saved")
		}
	})
}

// fenceConsumerMembers removes ms (a leave, a fence, an admin removal; Apache
// consumerGroupFenceMember) and saves the group; then runs with the write's code. When
// ms include a consumer-protocol member and only classic members remain, the group
// goes back to the classic protocol instead, if the policy allows it (Apache
// validateOnlineDowngradeWithFencedMembers, convertToClassicGroup).
func (g *groupActor) fenceConsumerMembers(ctx actor.Context, ms []*cMember, reason string, client Request, then func(code int16)) {
	if g.downgradable(ms) {
		if reason != "left" {
			for range ms {
				g.cfg.Settings.Metrics.consumerFenced(reason)
			}
		}
		g.downgrade(ctx, ms, true, client, then)
		return
	}
	for _, m := range ms {
		g.removeConsumerMember(m, reason)
	}
	g.saveConsumer(ctx, client, then)
}

// downgradable: removing ms leaves a non-empty group of classic members only, one of ms
// is not classic, the policy allows a downgrade and the rest fit in group.max.size.
func (g *groupActor) downgradable(ms []*cMember) bool {
	cg := g.cg
	leaving := map[string]bool{}
	consumer := false
	for _, m := range ms {
		leaving[m.id] = true
		consumer = consumer || m.classic == nil
	}
	if !consumer {
		return false
	}
	rest := 0
	for id, m := range cg.members {
		if leaving[id] {
			continue
		}
		if m.classic == nil {
			return false
		}
		rest++
	}
	switch {
	case rest == 0:
		return false
	case !g.cfg.Settings.Consumer.downgradeEnabled():
		g.log().Info().Msg("consumer_group_not_downgraded_policy_disabled")
		return false
	case rest > g.cfg.Settings.MaxSize:
		g.log().Info().Int("members", rest).Msg("consumer_group_not_downgraded_larger_than_group_max_size")
		return false
	}
	return true
}

// allClassicDowngradable: every member is classic, the policy allows a downgrade and
// they fit in group.max.size.
func (g *groupActor) allClassicDowngradable() bool {
	for _, m := range g.cg.members {
		if m.classic == nil {
			return false
		}
	}
	return g.cfg.Settings.Consumer.downgradeEnabled() && len(g.cg.members) <= g.cfg.Settings.MaxSize
}

// downgrade turns the group into a classic group of its classic members, without ms
// (Apache ClassicGroup.fromConsumerGroup): Stable at the group epoch as generation, each
// member with its protocols and timeouts and its target assignment, the generation
// written to the group file, then a rebalance (members get REBALANCE_IN_PROGRESS and
// rejoin classically). then runs with the write's code, after every request that
// waited for a save of the consumer-protocol state.
//
// Without rebalance (a static classic member that replaced the last consumer-protocol
// member, Apache convertToClassicGroup with a joining member) the group stays Stable.
func (g *groupActor) downgrade(ctx actor.Context, ms []*cMember, rebalance bool, client Request, then func(code int16)) {
	cg := g.cg
	leaving := map[string]bool{}
	for _, m := range ms {
		leaving[m.id] = true
	}
	ids := make([]string, 0, len(cg.members))
	for id := range cg.members {
		if !leaving[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	waiters := cg.takeSaveWaiters()
	for _, m := range cg.members {
		g.cancelConsumerTimers(m)
	}
	g.cg = nil
	g.publishConsumer()
	g.dropClassicState()
	g.generation = cg.epoch
	g.protocolType = consumerProtocol
	g.classicMaps()
	now := time.Now()
	for _, id := range ids {
		cm := cg.members[id]
		g.joinSeq++
		m := &member{
			id: cm.id, instanceID: cm.instanceID, clientID: cm.clientID, clientHost: cm.clientHost,
			sessionTimeout: cm.classic.sessionTimeout, rebalanceTimeout: cm.rebalanceTimeout,
			protocols:  cm.classic.protocols,
			assignment: encodeAssignment(cg.target[id], cm.classic.assignmentVersion()),
			joinSeq:    g.joinSeq, deadline: now.Add(cm.classic.sessionTimeout),
		}
		g.members[m.id] = m
		g.order = append(g.order, m)
		for _, p := range m.protocols {
			g.supported[p.Name]++
		}
		if m.instanceID != "" {
			g.instances[m.instanceID] = m.id
		}
		g.armSession(ctx, m)
	}
	g.leader = ids[0]
	g.protocol, _ = selectProtocol(protocolLists(g.sortedMembers()))
	g.computeTopics()
	g.setState(stateStable)
	meta := g.generationMeta(func(m *member) []byte { return m.assignment })
	g.log().Info().Int32("generation", g.generation).Int("members", len(ids)).Str("protocol", logs.ID(g.protocol)).
		Msg("consumer_group_downgraded_to_classic")
	if rebalance {
		g.prepareRebalance(ctx, causeDowngraded, "group "+g.id+" downgraded from consumer to classic")
	}
	g.saveMeta(ctx, client, meta, func(code int16) {
		if code != 0 {
			g.log().Warn().Int16("error_code", code).Msg("group_meta_not_saved")
		}
		for _, w := range waiters {
			if w.client != nil {
				actor.Handling(ctx, w.client)
			}
			w.then(code)
		}
		then(code)
	})
}

// upgrade converts this classic group with members into a consumer-protocol group for
// a ConsumerGroupHeartbeat join, the classic state untouched (its parked requests
// still parked) until the join is accepted and dropClassicState ends it. refusal is why
// it cannot be done.
func (g *groupActor) upgrade() (cg *consumerGroup, refusal string) {
	if why := g.upgradeRefusal(); why != "" {
		return nil, why
	}
	cg, err := g.consumerFromClassic()
	switch {
	case errors.Is(err, errCustomAssignor):
		g.log().Warn().Err(err).Msg("classic_group_not_upgraded_custom_assignor")
		return nil, "an unsupported custom assignor is in use"
	case err != nil:
		g.log().Warn().Err(err).Msg("classic_group_not_upgraded_malformed_consumer_protocol")
		return nil, "the embedded consumer protocol is malformed"
	}
	return cg, ""
}

// armUpgraded starts the sessions of the members an upgrade brought in.
func (g *groupActor) armUpgraded(ctx actor.Context, cg *consumerGroup) {
	for _, m := range cg.members {
		if m.classic != nil {
			g.armConsumerSession(ctx, m)
		}
	}
}
