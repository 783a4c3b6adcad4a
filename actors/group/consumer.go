package group

import (
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
	"kaas/logs"
)

// The consumer group protocol (KIP-848) in the group actor, as Apache 4.2's
// GroupMetadataManager runs it (apache-kip848.md §1):
//
//	group epoch   ── bumped by a join, a subscription or assignor change, a leave or
//	                 fence, a change of the subscribed topics' partitions
//	target epoch  ── when behind the group epoch, the assignor runs (in the heartbeat that
//	                 sees it) and the new target is stamped with the group epoch
//	member epoch  ── each member moves to the target one heartbeat at a time:
//
//	   stable ──target moved──▶ unrevoked_partitions (keeps its epoch; told only what it
//	     ▲                        retains, until it stops reporting the rest)
//	     │                      │ revoked
//	     │                      ▼
//	     └──all free── unreleased_partitions (new epoch; waits for partitions another
//	                                            member still reports)
//
// A partition is never given to a member while another member holds it (assigned or
// being revoked). The session timer fences a silent member; the rebalance timer fences
// one that does not revoke within its rebalance timeout. Both are actor timeouts. The
// state is durable (the group file's meta and the offsets journal, consumer_persist.go):
// a restart or a coordinator move continues every member at its epoch.

// consumerGroup is the state of a consumer-protocol group; nil for a classic group.
type consumerGroup struct {
	epoch       int32
	targetEpoch int32
	members     map[string]*cMember
	instances   map[string]string         // instance id → member id
	target      map[string]assignment     // member id → target assignment
	owner       map[topicPartition]string // partitions held (assigned or being revoked) → member
	subscribed  map[string]int            // topic → members subscribed
	// topicParts: the partition counts of the subscribed topics the target was
	// computed with (topics that do not exist are absent).
	topicParts map[string]int32
	emptySince time.Time
	// regexGen: every regular expression is resolved at this catalogue number (0: some
	// may not be).
	regexGen uint64
	// dirty: something durable changed since the last save; bump: the heartbeat being
	// handled moves the group epoch (once, whatever it changed).
	dirty, bump bool
	// stateName is state() as of the last save (the gauges read it after every
	// message; every change of epochs or members is saved, which refreshes it).
	stateName string
	// reconcileSince: when the target the members are moving to was first computed
	// (zero while the group is Stable or Empty): kaas_consumer_group_reconciliation_seconds.
	reconcileSince time.Time
	// saves: the saves in flight, oldest first (consumer_persist.go); waiting: what waits
	// for the next one, sent by a consumerFlush (flushQueued: one is on its way).
	// saveSeq numbers the saves; a failed one fails every save up to failedThrough with
	// failCode.
	saves         []*consumerSave
	waiting       []saveWaiter
	flushQueued   bool
	saveSeq       uint64
	failedThrough uint64
	failCode      int16
	// marks counts the changes (markDirty): a heartbeat that made none is answered
	// without waiting for a save, unless what it reports is not durable yet.
	marks uint64
	// touched: the members whose saved record changed (or that are gone) since the last
	// save; full: the next save writes the whole state rather than a delta of the
	// touched members (consumer_persist.go).
	touched map[string]bool
	full    bool
}

// cMember is one consumer-protocol member.
type cMember struct {
	id, instanceID, rackID, clientID, clientHost string
	epoch, prevEpoch                             int32
	state                                        memberState
	rebalanceTimeout                             time.Duration
	subscribed                                   []string // topic names asked for: sorted, unique
	assignor                                     string   // "" : the group's default
	// A regular expression subscription (v1): its source, compiled, the topics it
	// resolved to (sorted) at catalogue number resolvedGen, and the describe filter of
	// the member's principal (nil until it heartbeats after a load: not resolved then).
	regex              string
	re                 *regexp.Regexp
	resolved           []string
	resolvedGen        uint64
	canDescribe        func(string) bool
	assigned, revoking assignment
	// since: the member epoch each held partition was given at (KIP-1251 commits).
	since map[topicPartition]int32
	// classic: a member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) in
	// this group (online migration, migrate.go); nil for a consumer-protocol member.
	classic *classicMember

	deadline        time.Time
	sessionSeq      uint64
	sessionArmed    bool
	sessionFor      time.Time
	sessionCancel   actor.Cancel
	rebalanceSeq    uint64
	rebalanceCancel actor.Cancel
}

func newConsumerGroup() *consumerGroup {
	return &consumerGroup{
		members: map[string]*cMember{}, instances: map[string]string{}, target: map[string]assignment{},
		owner: map[topicPartition]string{}, subscribed: map[string]int{}, topicParts: map[string]int32{},
		emptySince: time.Now(), stateName: "Empty", touched: map[string]bool{}, full: true,
	}
}

// changed marks member id's saved record as changed (or gone) and the group as dirty.
func (cg *consumerGroup) changed(id string) {
	cg.touched[id] = true
	cg.markDirty()
}

// markDirty notes a change to be saved.
func (cg *consumerGroup) markDirty() {
	cg.dirty = true
	cg.marks++
}

// consumerStates are a consumer-protocol group's states (Apache ConsumerGroupState).
var consumerStates = []string{"Empty", "Assigning", "Reconciling", "Stable"}

// state is the group's state, derived as Apache's ConsumerGroup does.
func (cg *consumerGroup) state() string {
	switch {
	case len(cg.members) == 0:
		return "Empty"
	case cg.epoch > cg.targetEpoch:
		return "Assigning"
	}
	for _, m := range cg.members {
		// Apache ConsumerGroupMember.isReconciledTo: at the target epoch and stable (a
		// member waiting for unreleased partitions is at the epoch but not there yet).
		if m.epoch != cg.targetEpoch || m.state != memberStable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// memberStateName is a member's state as `kaas groups describe` and the metric show it.
func (m *cMember) stateName() string {
	if m.epoch == epochStaticLeave {
		return "left"
	}
	return m.state.String()
}

// consumerHandles runs r if it concerns the consumer protocol: its own requests always,
// classic ones while the group is a consumer-protocol group. false: the classic
// handlers take r.
func (g *groupActor) consumerHandles(ctx actor.Context, r Request) bool {
	switch m := r.(type) {
	case *ConsumerHeartbeat:
		g.handleConsumerHeartbeat(ctx, m)
		return true
	case *ConsumerDescribe:
		g.handleConsumerDescribe(m)
		return true
	}
	cg := g.cg
	if cg == nil {
		return false
	}
	switch m := r.(type) {
	case *JoinGroup:
		if len(cg.members) > 0 {
			// A classic member joining a consumer-protocol group with members: a mixed
			// group (Apache classicGroupJoinToConsumerGroup, migrate.go).
			g.classicJoinConsumer(ctx, m)
			return true
		}
		// An empty consumer-protocol group gives way to a classic one (Apache deletes
		// the empty group); its offsets stay.
		g.dropConsumer()
		return false
	case *SyncGroup:
		g.classicSyncConsumer(ctx, m)
		return true
	case *Heartbeat:
		g.classicHeartbeatConsumer(ctx, m)
		return true
	case *DescribeGroup:
		// DescribeGroups of a consumer-protocol group (KIP-1043).
		m.Reply.Resolve(&Description{Group: g.id, ErrorCode: kerr.GroupIDNotFound.Code, State: stateDead.String()})
		return true
	case *DeleteGroup:
		if len(cg.members) > 0 {
			m.fail(kerr.NonEmptyGroup.Code)
			return true
		}
		return false
	case *LeaveGroup:
		g.consumerAdminLeave(ctx, m)
		return true
	case *CommitOffsets:
		return g.consumerCommit(ctx, m)
	case *TxnCommitOffsets:
		return g.consumerTxnCommit(ctx, m)
	case *FetchOffsets:
		return g.consumerFetch(m)
	case *DeleteOffsets:
		return g.consumerDeleteOffsets(ctx, m)
	case *listEntry:
		m.reply.Resolve(&listedGroup{
			ListedGroup: ListedGroup{Group: g.id, ProtocolType: consumerProtocol, State: cg.state(), Type: consumerType},
			exists:      true,
		})
		return true
	}
	return false
}

// dropConsumer turns an empty consumer-protocol group back into a (empty) classic one.
func (g *groupActor) dropConsumer() {
	g.shutdownConsumer(notAvailable)
	g.cg = nil
	g.publishConsumer()
}

func (g *groupActor) handleConsumerHeartbeat(ctx actor.Context, r *ConsumerHeartbeat) {
	s := &g.cfg.Settings.Consumer
	if !s.Enabled {
		r.fail(kerr.UnsupportedVersion.Code)
		return
	}
	// marks: the group's changes so far; a heartbeat that makes none and reports what is
	// durable is answered at once.
	var marks uint64
	if g.cg != nil {
		marks = g.cg.marks
	}
	// upgraded: this join converts a classic group with members; its classic state is
	// dropped once the join is accepted (committed), kept if the join is refused.
	var upgraded *consumerGroup
	committed, replaced := false, false
	if g.cg == nil {
		if r.MemberEpoch != 0 {
			g.answerHeartbeat(r, kerr.GroupIDNotFound.Code, "Group "+g.id+" not found.")
			return
		}
		if len(g.members) > 0 || g.state != stateEmpty {
			// Online upgrade (migrate.go), in whatever state the classic group is;
			// refused, Apache answers GROUP_ID_NOT_FOUND.
			cg, why := g.upgrade()
			if cg == nil {
				g.log().Info().Str("reason", why).Msg("classic_group_not_upgraded")
				g.answerHeartbeat(r, kerr.GroupIDNotFound.Code, "Cannot upgrade classic group "+g.id+
					" to consumer group because "+why+".")
				return
			}
			g.cg, upgraded = cg, cg
		} else {
			// An empty classic group (offsets only, or KIP-394 members still to come back
			// with their ids) is replaced by a new consumer-protocol group, which starts at
			// epoch 0 (Apache deletes the classic one); its offsets stay.
			g.cg = newConsumerGroup()
			g.cg.markDirty()
			replaced = true
		}
		// A join refused below leaves the group as it was (Apache writes nothing then).
		prevExists, prevType, made := g.exists, g.protocolType, g.cg
		g.exists, g.protocolType = true, consumerProtocol
		answer := r.Reply
		r = r.withReply(actor.PromiseFunc(func(v any) {
			if res, ok := v.(*ConsumerHeartbeatResult); ok && res.ErrorCode != 0 && !committed && g.cg == made {
				g.cg, g.exists, g.protocolType = nil, prevExists, prevType
			}
			answer.Resolve(v)
		})).(*ConsumerHeartbeat)
	}
	cg := g.cg
	owned := g.ownedFrom(r.Owned)
	// A regular expression is compiled before anything changes; it is refused only where
	// Apache refuses it, after the member checks.
	var re *regexp.Regexp
	var reErr error
	if r.Regex != nil && *r.Regex != "" {
		re, reErr = compileRegex(*r.Regex)
	}
	var m *cMember
	switch {
	case r.MemberEpoch == epochLeave || r.MemberEpoch == epochStaticLeave:
		m = cg.members[r.MemberID]
		if r.InstanceID != nil {
			if code := cg.checkInstance(*r.InstanceID, r.MemberID); code != 0 {
				g.answerHeartbeat(r, code, "")
				return
			}
			m = cg.members[r.MemberID]
		}
		if m == nil {
			g.answerHeartbeat(r, kerr.UnknownMemberID.Code, "Member "+r.MemberID+" is not a member of group "+g.id+".")
			return
		}
		res := &ConsumerHeartbeatResult{MemberID: r.MemberID, MemberEpoch: r.MemberEpoch,
			HeartbeatInterval: g.heartbeatIntervalMs()}
		if r.MemberEpoch == epochStaticLeave {
			g.staticLeave(m)
			g.finishHeartbeat(ctx, r, res, m.id, marks)
			return
		}
		g.log().Info().Str("member", logs.ID(m.id)).Int32("member_epoch", m.epoch).Msg("consumer_member_left")
		g.fenceConsumerMembers(ctx, []*cMember{m}, "left", r, func(code int16) {
			if code != 0 {
				r.Reply.Resolve(&ConsumerHeartbeatResult{ErrorCode: code, MemberID: r.MemberID, MemberEpoch: r.MemberEpoch})
				return
			}
			r.Reply.Resolve(res)
		})
		return
	case len(cg.members) >= g.cfg.Settings.Consumer.MaxSize && (r.MemberID == "" || cg.members[r.MemberID] == nil):
		// Apache throwIfConsumerGroupIsFull, before the member is looked up: a full group
		// refuses any member id it does not have (a static replacement's too).
		g.answerHeartbeat(r, kerr.GroupMaxSizeReached.Code, "The consumer group has reached its maximum capacity of "+
			epochStr(int32(g.cfg.Settings.Consumer.MaxSize))+" members.")
		return
	case r.MemberEpoch == 0:
		var code int16
		var msg string
		m, code, msg = g.consumerJoin(r, re, reErr)
		if code != 0 {
			g.answerHeartbeat(r, code, msg)
			return
		}
	default:
		m = cg.members[r.MemberID]
		if r.InstanceID != nil {
			if code := cg.checkInstance(*r.InstanceID, r.MemberID); code != 0 {
				g.answerHeartbeat(r, code, "")
				return
			}
		}
		if m == nil {
			g.answerHeartbeat(r, kerr.UnknownMemberID.Code, "Member "+r.MemberID+" is not a member of group "+g.id+".")
			return
		}
		if code := epochCheck(r.MemberEpoch, m.epoch, m.prevEpoch, owned, m.assigned); code != 0 {
			g.cfg.Settings.Metrics.consumerFenced("epoch")
			g.log().Debug().Str("member", logs.ID(m.id)).Int32("got", r.MemberEpoch).Int32("member_epoch", m.epoch).Msg("consumer_member_epoch_fenced")
			g.answerHeartbeat(r, code, "The consumer group member's epoch ("+epochStr(r.MemberEpoch)+") is not the one known by the group coordinator ("+
				epochStr(m.epoch)+"). The member must abandon all its partitions and rejoin.")
			return
		}
		if r.Regex != nil && *r.Regex != m.regex && reErr != nil {
			g.answerHeartbeat(r, kerr.InvalidRegularExpression.Code, reErr.Error())
			return
		}
	}
	committed = true
	if replaced {
		// The empty classic group's pending members go with it (Apache forgets them:
		// they come back as new members).
		for id := range g.pending {
			g.dropPending(id)
		}
	}
	if upgraded != nil {
		// The join is accepted: the classic side goes, its members are now this group's;
		// the JoinGroups and SyncGroups a rebalance had parked are answered
		// REBALANCE_IN_PROGRESS, and they rejoin as classic members of this group.
		g.dropClassicState()
		g.armUpgraded(ctx, upgraded)
		g.log().Info().Int32("group_epoch", upgraded.epoch).Int("members", len(upgraded.members)-1).
			Msg("classic_group_upgraded_to_consumer_protocol")
	}
	g.updateConsumerMember(ctx, m, r, re)
	g.refreshTopics()
	if cg.bump {
		// One bump for whatever this heartbeat changed (Apache bumpGroupEpoch).
		cg.epoch++
		cg.bump = false
	}
	if cg.epoch > cg.targetEpoch {
		g.computeTarget()
	}
	before := m.assigned
	g.reconcileMember(ctx, m, owned)
	session, _ := g.consumerTimes() // the group's, from this heartbeat on
	m.deadline = time.Now().Add(session)
	g.armConsumerSession(ctx, m)
	res := &ConsumerHeartbeatResult{MemberID: m.id, MemberEpoch: m.epoch}
	full := r.RebalanceTimeout != -1 && r.Subscribed != nil && r.Owned != nil
	if r.MemberEpoch == 0 || full || !before.equal(m.assigned) {
		res.HasAssignment = true
		res.Assignment = g.assignedTopics(m.assigned)
	}
	g.finishHeartbeat(ctx, r, res, m.id, marks)
}

// answerHeartbeat answers r with an error.
func (g *groupActor) answerHeartbeat(r *ConsumerHeartbeat, code int16, msg string) {
	r.Reply.Resolve(&ConsumerHeartbeatResult{ErrorCode: code, ErrorMessage: msg, MemberID: r.MemberID, MemberEpoch: r.MemberEpoch})
}

// finishHeartbeat answers r with res, after the group's new state is durable when it
// changed (as Apache answers once its records are written): a restart then continues
// every member at the epoch it was told. A failed write answers the write's error. A
// heartbeat that changed nothing (marks: the group's changes before it) is answered at
// once when member's record is durable, even while saves of other members' changes
// are in flight or due: what it reports was saved before.
func (g *groupActor) finishHeartbeat(ctx actor.Context, r *ConsumerHeartbeat, res *ConsumerHeartbeatResult, member string, marks uint64) {
	res.HeartbeatInterval = g.heartbeatIntervalMs()
	if cg := g.cg; cg == nil || cg.marks == marks && cg.memberDurable(member) {
		r.Reply.Resolve(res)
		return
	}
	g.saveConsumer(ctx, r, func(code int16) {
		if code != 0 {
			r.Reply.Resolve(&ConsumerHeartbeatResult{ErrorCode: code, MemberID: r.MemberID, MemberEpoch: r.MemberEpoch})
			return
		}
		r.Reply.Resolve(res)
	})
}

// checkInstance: the instance id must belong to memberID (Apache
// throwIfStaticMemberIsUnknown, throwIfInstanceIdIsFenced).
func (cg *consumerGroup) checkInstance(instance, memberID string) int16 {
	id, ok := cg.instances[instance]
	switch {
	case !ok:
		return kerr.UnknownMemberID.Code
	case id != memberID:
		return kerr.FencedInstanceID.Code
	}
	return 0
}

// consumerJoin is a heartbeat with epoch 0: a new member, a known member rejoining
// (KAFKA-19233, Apache 4.2), or a static member taking over the assignment its instance
// id left with epoch -2.
func (g *groupActor) consumerJoin(r *ConsumerHeartbeat, re *regexp.Regexp, reErr error) (*cMember, int16, string) {
	cg := g.cg
	if r.InstanceID != nil {
		// Apache throwIfInstanceIdIsUnreleased: while the instance id is held by a member
		// not at -2 the joiner cannot join, even under the same member id (the reverse of
		// classic static membership, where the old member is fenced).
		// A classic member's instance id is taken over at once (Apache replaces a
		// static member of the other protocol without this check).
		if oldID, ok := cg.instances[*r.InstanceID]; ok && cg.members[oldID].epoch != epochStaticLeave && cg.members[oldID].classic == nil {
			return nil, kerr.UnreleasedInstanceID.Code, "Static member " + r.MemberID + " with instance id " + *r.InstanceID +
				" cannot join the group because the instance id is owned by " + oldID + " member."
		}
	}
	if reErr != nil {
		return nil, kerr.InvalidRegularExpression.Code, reErr.Error()
	}
	if r.InstanceID != nil {
		inst := *r.InstanceID
		if oldID, ok := cg.instances[inst]; ok {
			old := cg.members[oldID]
			// The replacement inherits the assignment (Apache replaceStaticMember).
			m := &cMember{
				id: r.MemberID, instanceID: inst, rackID: old.rackID, subscribed: old.subscribed,
				regex: old.regex, re: old.re, resolved: old.resolved, resolvedGen: old.resolvedGen,
				assignor: old.assignor, rebalanceTimeout: old.rebalanceTimeout,
				assigned: old.assigned, revoking: assignment{}, since: old.since, state: memberStable,
			}
			for tp, id := range cg.owner {
				if id == oldID {
					if m.assigned.has(tp.topic, tp.partition) {
						cg.owner[tp] = m.id
					} else {
						delete(cg.owner, tp)
					}
				}
			}
			g.cancelConsumerTimers(old)
			delete(cg.members, oldID)
			tgt := cg.target[oldID]
			delete(cg.target, oldID)
			cg.target[m.id] = tgt
			cg.members[m.id] = m
			cg.instances[inst] = m.id
			cg.changed(oldID)
			cg.changed(m.id)
			g.log().Info().Str("member", logs.ID(m.id)).Str("replaced", logs.ID(oldID)).Str("instance", logs.ID(inst)).Msg("consumer_static_member_replaced")
			return m, 0, ""
		}
	}
	if m := cg.members[r.MemberID]; m != nil && r.MemberID != "" {
		// A rejoin: the member owns nothing now (a join reports no partitions), so what it
		// held is free, and it reconciles from nothing to its target.
		g.setHeld(m, assignment{}, assignment{}, 0)
		m.epoch, m.prevEpoch, m.state = 0, 0, memberStable
		cg.changed(m.id)
		return m, 0, ""
	}
	id := r.MemberID
	if id == "" {
		id = g.cfg.NewID() // v0: the coordinator names the member
	}
	m := &cMember{id: id, assigned: assignment{}, revoking: assignment{}, since: map[topicPartition]int32{}}
	if r.InstanceID != nil {
		m.instanceID = *r.InstanceID
		cg.instances[m.instanceID] = id
	}
	cg.members[id] = m
	cg.emptySince = time.Time{}
	cg.bump = true
	cg.changed(id)
	g.log().Info().Str("member", logs.ID(id)).Str("instance", logs.ID(m.instanceID)).Int32("group_epoch", cg.epoch+1).Msg("consumer_member_joined")
	return m, 0, ""
}

// updateConsumerMember takes what the heartbeat sets; a subscription or assignor change bumps
// the group epoch.
func (g *groupActor) updateConsumerMember(ctx actor.Context, m *cMember, r *ConsumerHeartbeat, re *regexp.Regexp) {
	cg := g.cg
	m.clientID, m.clientHost = r.ClientID, r.ClientHost
	if m.classic != nil {
		// A classic member now heartbeating with the consumer protocol (Apache clears
		// its classic metadata).
		g.classicOwe(ctx, m, owesNothing)
		m.classic = nil
		cg.changed(m.id)
	}
	if r.RackID != nil && *r.RackID != m.rackID {
		m.rackID = *r.RackID
		cg.changed(m.id)
	}
	if r.RebalanceTimeout != -1 {
		if d := time.Duration(r.RebalanceTimeout) * time.Millisecond; d != m.rebalanceTimeout {
			m.rebalanceTimeout = d
			cg.changed(m.id)
		}
	}
	if r.CanDescribe != nil {
		m.canDescribe = r.CanDescribe
	}
	if r.Subscribed != nil {
		subs := slices.Clone(r.Subscribed)
		sort.Strings(subs)
		subs = slices.Compact(subs)
		if !slices.Equal(subs, m.subscribed) {
			cg.resubscribe(m, subs, m.resolved)
			cg.bump = true
			cg.changed(m.id)
		}
	}
	if r.Regex != nil && *r.Regex != m.regex {
		// A new expression is resolved by refreshTopics in this same heartbeat; an empty
		// one drops the topics it matched.
		m.regex, m.re, m.resolvedGen = *r.Regex, re, 0
		cg.regexGen = 0
		if m.re == nil && cg.resubscribe(m, m.subscribed, nil) {
			cg.bump = true
		}
		cg.changed(m.id)
	}
	if r.ServerAssignor != nil && *r.ServerAssignor != m.assignor {
		m.assignor = *r.ServerAssignor
		cg.bump = true
		cg.changed(m.id)
	}
}

// refreshTopics bumps the group epoch when a subscribed topic was created, deleted or
// grew since the target was computed (Apache compares the subscribed topics' metadata
// on each heartbeat).
func (g *groupActor) refreshTopics() {
	cg := g.cg
	lookup := g.cfg.Settings.Consumer.Topics
	g.resolveRegexes()
	// Compared in place first: a heartbeat that finds nothing changed allocates nothing.
	changed, present := false, 0
	for t := range cg.subscribed {
		n, ok := int32(0), false
		if lookup != nil {
			_, n, ok = lookup.Topic(t)
		}
		if ok {
			present++
		}
		if was, had := cg.topicParts[t]; had != ok || was != n {
			changed = true
			break
		}
	}
	if !changed && present == len(cg.topicParts) {
		return
	}
	now := make(map[string]int32, len(cg.subscribed))
	for t := range cg.subscribed {
		if lookup == nil {
			break
		}
		if _, n, ok := lookup.Topic(t); ok {
			now[t] = n
		}
	}
	cg.topicParts = now
	cg.bump = true
	cg.markDirty()
}

// preferredAssignor is the assignor most members ask for, ties and no preference going
// to the first of group.consumer.assignors (Apache's preferred server assignor).
func (g *groupActor) preferredAssignor() string {
	names := g.cfg.Settings.Consumer.Assignors
	counts := map[string]int{}
	for _, m := range g.cg.members {
		if m.assignor != "" {
			counts[m.assignor]++
		}
	}
	best, n := names[0], 0
	for _, a := range names {
		if counts[a] > n {
			best, n = a, counts[a]
		}
	}
	return best
}

// computeTarget runs the assignor and stamps the target with the group epoch.
func (g *groupActor) computeTarget() {
	cg := g.cg
	name := g.preferredAssignor()
	ms := make([]assignMember, 0, len(cg.members))
	for _, m := range cg.members {
		ms = append(ms, assignMember{id: m.id, instanceID: m.instanceID, subscribed: m.topics(), prev: cg.target[m.id]})
	}
	prev := cg.target
	cg.target = assignors[name](ms, cg.topicParts)
	for id, a := range cg.target {
		if !a.equal(prev[id]) {
			cg.changed(id)
		}
	}
	cg.targetEpoch = cg.epoch
	if cg.reconcileSince.IsZero() {
		cg.reconcileSince = time.Now()
	}
	cg.markDirty()
	g.log().Info().Int32("group_epoch", cg.epoch).Str("assignor", name).Int("members", len(ms)).Msg("consumer_target_assignment_computed")
}

// reconcileMember moves m one step towards its target, keeps the partition holders up
// to date, and arms or cancels its rebalance timer.
func (g *groupActor) reconcileMember(ctx actor.Context, m *cMember, owned assignment) {
	cg := g.cg
	if m.epoch == epochStaticLeave {
		return
	}
	tgt := cg.target[m.id]
	if tgt == nil {
		tgt = assignment{}
	}
	rec := reconcile(m.state, m.epoch, m.assigned, m.revoking, tgt, cg.targetEpoch, owned, func(t string, p int32) bool {
		o, ok := cg.owner[topicPartition{t, p}]
		return ok && o != m.id
	})
	wasUnrevoked, oldEpoch := m.state == memberUnrevoked, m.epoch
	if rec.state == m.state && rec.epoch == m.epoch && rec.assigned.equal(m.assigned) && rec.revoking.equal(m.revoking) {
		return
	}
	g.setHeld(m, rec.assigned, rec.revoking, rec.epoch)
	if rec.epoch != m.epoch {
		m.prevEpoch = m.epoch
	}
	m.epoch, m.state = rec.epoch, rec.state
	cg.changed(m.id)
	switch {
	case m.state == memberUnrevoked && (!wasUnrevoked || oldEpoch != m.epoch || m.rebalanceCancel == nil):
		g.armRebalance(ctx, m)
	case m.state != memberUnrevoked && m.rebalanceCancel != nil:
		m.rebalanceCancel()
		m.rebalanceCancel = nil
	}
}

// setHeld gives m assigned and revoking, keeping the holders map and the epochs the
// partitions were given at (newly held ones at epoch).
func (g *groupActor) setHeld(m *cMember, assigned, revoking assignment, epoch int32) {
	cg := g.cg
	release := func(a assignment) {
		a.each(func(t string, p int32) {
			if !assigned.has(t, p) && !revoking.has(t, p) {
				tp := topicPartition{t, p}
				if cg.owner[tp] == m.id {
					delete(cg.owner, tp)
				}
				delete(m.since, tp)
			}
		})
	}
	release(m.assigned)
	release(m.revoking)
	if m.since == nil {
		m.since = map[topicPartition]int32{}
	}
	assigned.each(func(t string, p int32) {
		tp := topicPartition{t, p}
		cg.owner[tp] = m.id
		if _, ok := m.since[tp]; !ok {
			m.since[tp] = epoch
		}
	})
	revoking.each(func(t string, p int32) { cg.owner[topicPartition{t, p}] = m.id })
	m.assigned, m.revoking = assigned, revoking
	cg.changed(m.id)
}

// staticLeave is a heartbeat with epoch -2: the member stays with its assignment at
// epoch -2 and its session timer running; what it was revoking is free. The group epoch
// does not move, so nobody takes its partitions unless its session expires first.
func (g *groupActor) staticLeave(m *cMember) {
	g.setHeld(m, m.assigned, assignment{}, m.epoch)
	m.epoch, m.state = epochStaticLeave, memberStable
	if m.rebalanceCancel != nil {
		m.rebalanceCancel()
		m.rebalanceCancel = nil
	}
	g.cg.changed(m.id)
	g.log().Info().Str("member", logs.ID(m.id)).Str("instance", logs.ID(m.instanceID)).Msg("consumer_static_member_left_temporarily")
}

// removeConsumerMember takes m out of the group (a leave or a fence) and bumps the
// group epoch; the next heartbeat computes the new target.
func (g *groupActor) removeConsumerMember(m *cMember, reason string) {
	cg := g.cg
	g.setHeld(m, assignment{}, assignment{}, 0)
	g.cancelConsumerTimers(m)
	delete(cg.members, m.id)
	delete(cg.target, m.id)
	if m.instanceID != "" && cg.instances[m.instanceID] == m.id {
		delete(cg.instances, m.instanceID)
	}
	cg.resubscribe(m, nil, nil)
	cg.epoch++
	cg.changed(m.id)
	if len(cg.members) == 0 {
		cg.emptySince = time.Now()
	}
	if reason != "left" {
		g.cfg.Settings.Metrics.consumerFenced(reason)
	}
}

func (g *groupActor) cancelConsumerTimers(m *cMember) {
	if m.classic != nil && m.classic.owesCancel != nil {
		m.classic.owesCancel()
		m.classic.owesCancel = nil
		m.classic.owes = owesNothing
	}
	if m.sessionCancel != nil {
		m.sessionCancel()
		m.sessionCancel = nil
	}
	m.sessionArmed = false
	if m.rebalanceCancel != nil {
		m.rebalanceCancel()
		m.rebalanceCancel = nil
	}
}

// armConsumerSession makes sure a timer fires at m's deadline or before; a heartbeat only
// moves the deadline, and an early firing re-arms for the rest (no timer per heartbeat).
func (g *groupActor) armConsumerSession(ctx actor.Context, m *cMember) {
	if m.sessionArmed && !m.deadline.Before(m.sessionFor) {
		return
	}
	if m.sessionCancel != nil {
		m.sessionCancel()
	}
	m.sessionSeq++
	m.sessionArmed, m.sessionFor = true, m.deadline
	m.sessionCancel = actor.After(ctx, time.Until(m.deadline), &consumerSessionCheck{member: m.id, seq: m.sessionSeq})
}

func (g *groupActor) armRebalance(ctx actor.Context, m *cMember) {
	if m.rebalanceCancel != nil {
		m.rebalanceCancel()
	}
	m.rebalanceSeq++
	d := m.rebalanceTimeout
	if d <= 0 {
		d, _ = g.consumerTimes()
	}
	m.rebalanceCancel = actor.After(ctx, d, &consumerRebalanceCheck{member: m.id, seq: m.rebalanceSeq, epoch: m.epoch})
}

// onConsumerTimer handles the consumer-protocol timers.
func (g *groupActor) onConsumerTimer(ctx actor.Context, msg any) {
	if g.cg == nil {
		return
	}
	switch t := msg.(type) {
	case *consumerSessionCheck:
		m := g.cg.members[t.member]
		if m == nil || m.sessionSeq != t.seq {
			return
		}
		m.sessionArmed = false
		if time.Now().Before(m.deadline) {
			g.armConsumerSession(ctx, m)
			return
		}
		g.log().Info().Str("member", logs.ID(m.id)).Int32("member_epoch", m.epoch).Msg("consumer_member_session_expired_fenced")
		g.cfg.Settings.Metrics.sessionExpired()
		g.fenceConsumerMembers(ctx, []*cMember{m}, "session_timeout", nil, logNotSaved(g))
	case *consumerRebalanceCheck:
		m := g.cg.members[t.member]
		if m == nil || m.rebalanceSeq != t.seq || m.state != memberUnrevoked || m.epoch != t.epoch {
			return
		}
		g.log().Info().Str("member", logs.ID(m.id)).Int32("member_epoch", m.epoch).Msg("consumer_member_rebalance_timeout_fenced")
		g.fenceConsumerMembers(ctx, []*cMember{m}, "rebalance_timeout", nil, logNotSaved(g))
	}
}

func logNotSaved(g *groupActor) func(code int16) {
	return func(code int16) {
		if code != 0 {
			g.log().Warn().Int16("error_code", code).Msg("consumer_group_state_not_saved")
		}
	}
}

// consumerAdminLeave is a LeaveGroup on a consumer-protocol group: the admin removal of
// members (kadm RemoveMembers), by instance id or member id, as Apache's
// consumerGroupLeave does.
func (g *groupActor) consumerAdminLeave(ctx actor.Context, r *LeaveGroup) {
	cg := g.cg
	res := &LeaveResult{Members: make([]int16, len(r.Members))}
	var gone []*cMember
	for i, lm := range r.Members {
		id := lm.MemberID
		if lm.InstanceID != "" {
			known, ok := cg.instances[lm.InstanceID]
			switch {
			case !ok:
				res.Members[i] = kerr.UnknownMemberID.Code
				continue
			case id != "" && known != id:
				res.Members[i] = kerr.FencedInstanceID.Code
				continue
			}
			id = known
		}
		m := cg.members[id]
		if m == nil || slices.Contains(gone, m) {
			res.Members[i] = kerr.UnknownMemberID.Code
			continue
		}
		g.log().Info().Str("member", logs.ID(m.id)).Str("reason", logs.ID(lm.Reason)).Msg("consumer_member_removed_by_leave_group")
		gone = append(gone, m)
	}
	if len(gone) == 0 && !cg.dirty {
		r.Reply.Resolve(res)
		return
	}
	g.fenceConsumerMembers(ctx, gone, "removed", r, func(code int16) {
		if code != 0 {
			r.fail(code)
			return
		}
		r.Reply.Resolve(res)
	})
}

// ownedFrom reads the partitions a member reports owning (topic ids to names); nil when
// it did not say. A topic id the catalogue does not know is left out.
func (g *groupActor) ownedFrom(ts []OwnedTopic) assignment {
	if ts == nil {
		return nil
	}
	out := assignment{}
	lookup := g.cfg.Settings.Consumer.Topics
	for _, t := range ts {
		var name string
		ok := false
		if lookup != nil {
			name, ok = lookup.TopicName(t.ID)
		}
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			out.add(name, p)
		}
	}
	return out
}

// assignedTopics is an assignment as the wire carries it: by topic id, in name order.
func (g *groupActor) assignedTopics(a assignment) []AssignedTopic {
	out := []AssignedTopic{}
	lookup := g.cfg.Settings.Consumer.Topics
	names := make([]string, 0, len(a))
	for t := range a {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		var id TopicID
		if lookup != nil {
			id, _, _ = lookup.Topic(t)
		}
		out = append(out, AssignedTopic{ID: id, Topic: t, Partitions: slices.Clone(a[t])})
	}
	return out
}

func (g *groupActor) handleConsumerDescribe(r *ConsumerDescribe) {
	cg := g.cg
	if cg == nil {
		msg := "Group " + g.id + " not found."
		if g.exists {
			msg = "Group " + g.id + " is not a consumer group."
		}
		r.Reply.Resolve(&ConsumerDescription{Group: g.id, ErrorCode: kerr.GroupIDNotFound.Code, ErrorMessage: msg})
		return
	}
	d := &ConsumerDescription{Group: g.id, State: cg.state(), Epoch: cg.epoch, AssignmentEpoch: cg.targetEpoch,
		AssignorName: g.preferredAssignor()}
	ids := make([]string, 0, len(cg.members))
	for id := range cg.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := cg.members[id]
		tgt := cg.target[id]
		if tgt == nil {
			tgt = assignment{}
		}
		d.Members = append(d.Members, ConsumerDescribedMember{
			MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID, MemberEpoch: m.epoch,
			ClientID: m.clientID, ClientHost: m.clientHost, Subscribed: slices.Clone(m.subscribed), Regex: m.regex,
			Assignment: g.assignedTopics(m.assigned), Target: g.assignedTopics(tgt), State: m.stateName(),
			Classic: m.classic != nil,
		})
	}
	r.Reply.Resolve(d)
}

// consumerCommit validates an OffsetCommit to a consumer-protocol group (Apache
// ConsumerGroup.validateOffsetCommit, relaxed per partition by KIP-1251). false: the
// classic path stores it (a simple commit to an empty group).
func (g *groupActor) consumerCommit(ctx actor.Context, r *CommitOffsets) bool {
	cg := g.cg
	if r.Generation < 0 && len(cg.members) == 0 {
		return false // an admin or simple commit to an empty group
	}
	m := cg.members[r.MemberID]
	if m == nil {
		r.fail(kerr.UnknownMemberID.Code)
		return true
	}
	if r.Version < 9 && m.classic == nil {
		// A consumer-protocol member commits with v9+ (the member epoch).
		r.fail(kerr.UnsupportedVersion.Code)
		return true
	}
	if m.classic != nil && r.Generation != m.epoch {
		// A classic member commits at its member epoch exactly (Apache validateMemberEpoch).
		r.fail(kerr.IllegalGeneration.Code)
		return true
	}
	codes := make([]int16, len(r.Entries))
	var pass []offsets.Entry
	var at []int
	for i, e := range r.Entries {
		tp := topicPartition{e.Topic, e.Partition}
		since, held := m.since[tp]
		holds := held && (m.assigned.has(e.Topic, e.Partition) || m.revoking.has(e.Topic, e.Partition))
		if c := commitEpochCheck(r.Generation, m.epoch, holds, since); c != 0 {
			codes[i] = c
			continue
		}
		pass = append(pass, e)
		at = append(at, i)
	}
	if len(pass) == 0 {
		r.Reply.Resolve(&offsets.CommitResult{Codes: codes})
		return true
	}
	m.deadline = time.Now().Add(g.sessionTimeoutOf(m)) // a commit is a sign of life
	if len(pass) == len(r.Entries) {
		g.commitDirect(ctx, pass, r.Reply)
		return true
	}
	reply := r.Reply
	g.ask(ctx, r, func(p actor.Promise) any { return &offsets.Commit{Entries: pass, Reply: p} }, func(v any) {
		res, ok := v.(*offsets.CommitResult)
		for j, i := range at {
			c := notAvailable
			if ok && j < len(res.Codes) {
				c = res.Codes[j]
			}
			codes[i] = c
		}
		reply.Resolve(&offsets.CommitResult{Codes: codes})
	})
	return true
}

// consumerTxnCommit validates a TxnOffsetCommit to a consumer-protocol group as Apache's
// ConsumerGroup.validateOffsetCommit does for a transactional one: the member epoch
// checks of OffsetCommit (KIP-1251's per partition) without its version floor; an empty
// group takes one without a member (false: the classic path stores it in the producer's
// pending layer).
func (g *groupActor) consumerTxnCommit(ctx actor.Context, r *TxnCommitOffsets) bool {
	cg := g.cg
	if r.Generation < 0 && len(cg.members) == 0 {
		return false
	}
	m := cg.members[r.MemberID]
	if m == nil {
		r.fail(kerr.UnknownMemberID.Code)
		return true
	}
	if m.classic != nil && r.Generation != m.epoch {
		r.fail(kerr.IllegalGeneration.Code)
		return true
	}
	codes := make([]int16, len(r.Entries))
	var pass []offsets.Entry
	var at []int
	for i, e := range r.Entries {
		tp := topicPartition{e.Topic, e.Partition}
		since, held := m.since[tp]
		holds := held && (m.assigned.has(e.Topic, e.Partition) || m.revoking.has(e.Topic, e.Partition))
		if c := commitEpochCheck(r.Generation, m.epoch, holds, since); c != 0 {
			codes[i] = c
			continue
		}
		pass = append(pass, e)
		at = append(at, i)
	}
	if len(pass) == 0 {
		r.Reply.Resolve(&offsets.CommitResult{Codes: codes})
		return true
	}
	reply := r.Reply
	g.ask(ctx, r, func(p actor.Promise) any {
		return &offsets.TxnCommit{ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Entries: pass, Reply: p}
	}, func(v any) {
		res, ok := v.(*offsets.CommitResult)
		for j, i := range at {
			c := notAvailable
			if ok && j < len(res.Codes) {
				c = res.Codes[j]
			}
			codes[i] = c
		}
		reply.Resolve(&offsets.CommitResult{Codes: codes})
	})
	return true
}

// consumerFetch checks an OffsetFetch v9+ that names a member (Apache
// ConsumerGroup.validateOffsetFetch): no member id with a negative epoch is an admin
// fetch; otherwise the member must exist (UNKNOWN_MEMBER_ID) at that epoch
// (STALE_MEMBER_EPOCH), a group-level error. false: the fetch goes on as usual.
func (g *groupActor) consumerFetch(r *FetchOffsets) bool {
	if !r.MemberChecked || (r.MemberID == nil && r.MemberEpoch < 0) {
		return false
	}
	id := ""
	if r.MemberID != nil {
		id = *r.MemberID
	}
	m := g.cg.members[id]
	switch {
	case m == nil:
		r.fail(kerr.UnknownMemberID.Code)
		return true
	case r.MemberEpoch != m.epoch && m.classic != nil:
		r.fail(kerr.IllegalGeneration.Code)
		return true
	case r.MemberEpoch != m.epoch:
		r.fail(kerr.StaleMemberEpoch.Code)
		return true
	}
	return false
}

// consumerDeleteOffsets: the topics members subscribe to get GROUP_SUBSCRIBED_TO_TOPIC;
// false lets the classic path delete the rest (it sees no classic members).
func (g *groupActor) consumerDeleteOffsets(ctx actor.Context, r *DeleteOffsets) bool {
	cg := g.cg
	if len(cg.subscribed) == 0 {
		return false
	}
	codes := make([]int16, len(r.Partitions))
	var del []offsets.TopicPartition
	var at []int
	for i, tp := range r.Partitions {
		if cg.subscribed[tp.Topic] > 0 {
			codes[i] = kerr.GroupSubscribedToTopic.Code
			continue
		}
		del = append(del, tp)
		at = append(at, i)
	}
	if len(del) == 0 {
		r.Reply.Resolve(&OffsetDeleteResult{Codes: codes})
		return true
	}
	g.ask(ctx, r, func(p actor.Promise) any { return &offsets.Delete{Partitions: del, Reply: p} }, func(v any) {
		res, ok := v.(*offsets.Result)
		if !ok || res.ErrorCode != 0 {
			code := notAvailable
			if ok {
				code = res.ErrorCode
			}
			r.Reply.Resolve(&OffsetDeleteResult{ErrorCode: code})
			return
		}
		r.Reply.Resolve(&OffsetDeleteResult{Codes: codes})
	})
	return true
}

// consumerExpiryRule is offset expiry for a consumer-protocol group: Apache's rule for
// a group with members (only topics nobody subscribes to expire) or an empty one.
func (g *groupActor) consumerExpiryRule() offsets.ExpiryRule {
	retention := g.cfg.Settings.OffsetsRetention
	if len(g.cg.members) == 0 {
		return offsets.ExpiryRule{Empty: true, Retention: retention}
	}
	subs := make(map[string]bool, len(g.cg.subscribed))
	for t := range g.cg.subscribed {
		subs[t] = true
	}
	return offsets.ExpiryRule{StableConsumer: true, Subscribed: subs, Retention: retention}
}

// shutdownConsumer cancels every consumer-protocol timer and answers the requests that
// wait for a save with code (a stop, restart or release).
func (g *groupActor) shutdownConsumer(code int16) {
	if g.cg == nil {
		return
	}
	for _, m := range g.cg.members {
		g.cancelConsumerTimers(m)
	}
	for _, w := range g.cg.takeSaveWaiters() {
		if w.client != nil {
			w.client.fail(code)
		}
	}
}

// publishConsumer brings kaas_consumer_group_members{state} to the group's members
// (none once the actor stops). It runs with every save, which every state change makes.
func (g *groupActor) publishConsumer() {
	var now [4]int32
	if cg := g.cg; cg != nil {
		cg.stateName = cg.state()
		if (cg.stateName == "Stable" || cg.stateName == "Empty") && !cg.reconcileSince.IsZero() {
			g.cfg.Settings.Metrics.consumerReconciled(time.Since(cg.reconcileSince))
			cg.reconcileSince = time.Time{}
		}
	}
	if g.cg != nil && !g.stopped {
		for _, m := range g.cg.members {
			now[slices.Index(memberStates, m.stateName())]++
		}
	}
	g.cfg.Settings.Metrics.consumerMembers(&g.consumerPublished, now)
}

func epochStr(n int32) string { return strconv.Itoa(int(n)) }

// topics is what m subscribes to: the names it asked for and those its regular
// expression resolved to, sorted.
func (m *cMember) topics() []string {
	if len(m.resolved) == 0 {
		return m.subscribed
	}
	out := append(slices.Clone(m.subscribed), m.resolved...)
	sort.Strings(out)
	return slices.Compact(out)
}

// resubscribe gives m the names and resolved topics, keeping the group's count of
// members per topic; it reports whether what m subscribes to changed.
func (cg *consumerGroup) resubscribe(m *cMember, names, resolved []string) bool {
	before := m.topics()
	m.subscribed, m.resolved = names, resolved
	after := m.topics()
	if slices.Equal(before, after) {
		return false
	}
	for _, t := range before {
		if cg.subscribed[t]--; cg.subscribed[t] <= 0 {
			delete(cg.subscribed, t)
		}
	}
	for _, t := range after {
		cg.subscribed[t]++
	}
	return true
}

// resolveRegexes matches the members' regular expressions against the catalogue when it
// changed since they were last resolved (a topic created, deleted), each filtered by
// its member's describe rights; a changed resolution bumps the group epoch. Apache
// resolves them off its thread at most every 10 s; here a resolution is a pass over the
// topic names, made at most once per catalogue change, in the heartbeat that sees it, so
// a topic created later that matches is assigned at the next heartbeat.
func (g *groupActor) resolveRegexes() {
	cg := g.cg
	lookup := g.cfg.Settings.Consumer.Topics
	if lookup == nil {
		return
	}
	gen := lookup.TopicsGen()
	if cg.regexGen == gen {
		return
	}
	var names []string
	for _, m := range cg.members {
		if m.re == nil || m.resolvedGen == gen || m.canDescribe == nil {
			continue
		}
		if names == nil {
			names, gen = lookup.TopicNames()
		}
		var res []string
		for _, t := range names {
			if m.re.MatchString(t) && m.canDescribe(t) {
				res = append(res, t)
			}
		}
		sort.Strings(res)
		m.resolvedGen = gen
		if cg.resubscribe(m, m.subscribed, res) {
			g.log().Info().Str("member", logs.ID(m.id)).Str("regex", logs.ID(m.regex)).Int("topics", len(res)).Msg("consumer_regex_resolved")
			cg.bump = true
			cg.changed(m.id)
		}
	}
	cg.regexGen = gen
}
