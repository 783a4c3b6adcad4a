package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

// The join phase: JoinGroup, new and known members, KIP-394 pending members, KIP-345
// static members replaced, and what a JoinGroup answer carries.

// JoinGroup (§4.3 of the reference, Apache 4.x where it differs from 3.7).
func (g *groupActor) handleJoin(ctx actor.Context, r *JoinGroup) {
	s := g.cfg.Settings
	if !validSessionTimeout(r.SessionTimeout, s.MinSessionTimeout, s.MaxSessionTimeout) {
		g.replyJoin(r, joinError(kerr.InvalidSessionTimeout.Code, r.MemberID))
		return
	}
	if !g.exists && r.MemberID != "" {
		g.replyJoin(r, joinError(kerr.UnknownMemberID.Code, r.MemberID))
		return
	}
	if r.Reason != "" {
		g.log().Info().Str("member", logs.ID(r.MemberID)).Str("instance", logs.ID(r.InstanceID)).Str("reason", logs.ID(r.Reason)).Msg("member_joining")
	}
	m := g.members[r.MemberID]
	if !acceptJoin(g.state, s.MaxSize, m != nil, m != nil && m.join != nil, g.awaitingJoin, len(g.members)) {
		// Apache removes the member (evicting a known one) and answers GROUP_MAX_SIZE_REACHED.
		if m != nil {
			g.removeMember(m, kerr.GroupMaxSizeReached.Code)
		}
		g.replyJoin(r, joinError(kerr.GroupMaxSizeReached.Code, ""))
		g.afterRemoval(ctx, causeMaxSize, "member rejected by group.max.size")
		return
	}
	if r.MemberID == "" {
		g.joinNewMember(ctx, r)
	} else {
		g.joinCurrentMember(ctx, r)
	}
	if g.state == statePreparingRebalance {
		g.tryCompleteJoin(ctx)
	}
}

func (g *groupActor) replyJoin(r *JoinGroup, res *JoinResult) {
	r.Reply.Resolve(res)
}

func (g *groupActor) supports(r *JoinGroup) bool {
	return supportsProtocols(g.state == stateEmpty && len(g.members) == 0, g.protocolType, len(g.members),
		g.supported, r.ProtocolType, r.Protocols)
}

func (g *groupActor) newMemberID(r *JoinGroup) string {
	if r.InstanceID != "" {
		return r.InstanceID + "-" + g.cfg.NewID()
	}
	return r.ClientID + "-" + g.cfg.NewID()
}

func (g *groupActor) joinNewMember(ctx actor.Context, r *JoinGroup) {
	if !g.supports(r) {
		g.replyJoin(r, joinError(kerr.InconsistentGroupProtocol.Code, ""))
		return
	}
	id := g.newMemberID(r)
	g.exists = true
	switch {
	case r.InstanceID != "":
		if old, ok := g.instances[r.InstanceID]; ok {
			g.replaceStaticMember(ctx, old, id, r)
			return
		}
		g.addMember(ctx, id, r)
	case r.RequireKnownMemberID:
		// KIP-394: the member must come back with this id; until then it is pending and
		// blocks the join phase, and expires after its session timeout. A client that
		// never comes back holds its place that long, so pending members are bounded per
		// group (GROUP_MAX_SIZE_REACHED, as a group that is full) and per broker
		// (COORDINATOR_LOAD_IN_PROGRESS: retriable, the client tries again later).
		if max := g.cfg.Settings.MaxPendingMembers; max > 0 && len(g.pending) >= max {
			g.log().Warn().Int("pending", len(g.pending)).Msg("pending_member_refused_group_bound")
			g.replyJoin(r, joinError(kerr.GroupMaxSizeReached.Code, ""))
			return
		}
		if !g.cfg.Settings.Pending.take() {
			g.log().Warn().Int64("pending_total", g.cfg.Settings.Pending.Count()).Msg("pending_member_refused_broker_bound")
			g.replyJoin(r, joinError(kerr.CoordinatorLoadInProgress.Code, ""))
			return
		}
		g.pendingSeq++
		g.classicMaps()
		g.pending[id] = g.pendingSeq
		g.pendingTimer[id] = actor.After(ctx, r.SessionTimeout, &pendingDeadline{member: id, seq: g.pendingSeq})
		g.replyJoin(r, joinError(kerr.MemberIDRequired.Code, id))
	default:
		g.addMember(ctx, id, r)
	}
}

func (g *groupActor) joinCurrentMember(ctx actor.Context, r *JoinGroup) {
	if !g.supports(r) {
		g.replyJoin(r, joinError(kerr.InconsistentGroupProtocol.Code, r.MemberID))
		return
	}
	if _, ok := g.pending[r.MemberID]; ok {
		if r.InstanceID != "" {
			// Apache throws IllegalStateException here: a pending id is only ever given to a
			// dynamic member.
			g.replyJoin(r, joinError(kerr.UnknownServerError.Code, r.MemberID))
			return
		}
		g.dropPending(r.MemberID)
		g.addMember(ctx, r.MemberID, r)
		return
	}
	if code := g.checkMember(r.MemberID, r.InstanceID); code != 0 {
		g.replyJoin(r, joinError(code, r.MemberID))
		return
	}
	m := g.members[r.MemberID]
	switch g.state {
	case statePreparingRebalance:
		g.updateMember(m, r)
		g.park(m, r)
	case stateCompletingRebalance:
		if sameProtocols(m.protocols, r.Protocols) {
			// A member that missed its JoinGroup response asks again: answer from the
			// current generation without a new rebalance.
			g.replyJoin(r, g.joinResult(m, m.id == g.leader))
			return
		}
		g.updateMember(m, r)
		g.park(m, r)
		g.prepareRebalance(ctx, causeProtocolsChanged, "member "+m.id+" changed its protocols")
	case stateStable:
		if m.id != g.leader && sameProtocols(m.protocols, r.Protocols) {
			g.touch(ctx, m)
			g.replyJoin(r, g.joinResult(m, false))
			return
		}
		g.updateMember(m, r)
		g.park(m, r)
		g.prepareRebalance(ctx, causeMemberRejoined, "member "+m.id+" rejoined")
	default:
		g.replyJoin(r, joinError(kerr.UnknownMemberID.Code, r.MemberID))
	}
}

// checkMember is validateCurrentMember for this group.
func (g *groupActor) checkMember(memberID, instanceID string) int16 {
	owner, instanceKnown := g.instances[instanceID]
	_, known := g.members[memberID]
	return memberCheck(memberID, instanceID, known, owner, instanceKnown)
}

// addMember adds a member whose JoinGroup is parked until the round completes, and starts
// (or joins) a rebalance.
func (g *groupActor) addMember(ctx actor.Context, id string, r *JoinGroup) {
	g.joinSeq++
	m := &member{
		id: id, instanceID: r.InstanceID, clientID: r.ClientID, clientHost: r.ClientHost,
		sessionTimeout: r.SessionTimeout, rebalanceTimeout: r.RebalanceTimeout,
		protocols: r.Protocols, joinSeq: g.joinSeq, isNew: true,
	}
	if len(g.members) == 0 {
		g.protocolType = r.ProtocolType
	}
	g.classicMaps()
	g.members[id] = m
	g.order = append(g.order, m)
	for _, p := range m.protocols {
		g.supported[p.Name]++
	}
	if r.InstanceID != "" {
		g.instances[r.InstanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	// Apache 4.0 extends the initial delay for members joining a group that was Empty.
	if g.state == statePreparingRebalance && g.prevState == stateEmpty {
		g.newMemberAdded = true
	}
	g.park(m, r)
	m.deadline = time.Now().Add(newMemberJoinTimeout)
	g.armSession(ctx, m)
	if g.state.canRebalance() {
		g.prepareRebalance(ctx, causeMemberJoined, "member "+id+" joined")
	}
}

// updateMember takes a rejoining member's new protocols and timeouts.
func (g *groupActor) updateMember(m *member, r *JoinGroup) {
	for _, p := range m.protocols {
		g.supported[p.Name]--
	}
	m.protocols = r.Protocols
	for _, p := range m.protocols {
		g.supported[p.Name]++
	}
	m.sessionTimeout = r.SessionTimeout
	m.rebalanceTimeout = r.RebalanceTimeout
	if r.ClientID != "" {
		m.clientID = r.ClientID
	}
	if r.ClientHost != "" {
		m.clientHost = r.ClientHost
	}
}

// park keeps r as m's JoinGroup until the round completes. A JoinGroup it replaces (the
// same member asking twice) is answered REBALANCE_IN_PROGRESS rather than left hanging.
func (g *groupActor) park(m *member, r *JoinGroup) {
	if m.join != nil {
		m.join.Reply.Resolve(joinError(kerr.RebalanceInProgress.Code, m.id))
	} else {
		g.awaitingJoin++
	}
	m.join = r
}

func (g *groupActor) unpark(m *member) *JoinGroup {
	r := m.join
	if r != nil {
		m.join = nil
		g.awaitingJoin--
	}
	return r
}

// replaceStaticMember: a known group.instance.id joins with no member id (KIP-345). The
// member gets a new id, the old one is fenced, and in Stable with an unchanged protocol
// there is no rebalance: the member keeps its assignment (KIP-814 for the leader at v9).
func (g *groupActor) replaceStaticMember(ctx actor.Context, oldID, newID string, r *JoinGroup) {
	m := g.members[oldID]
	oldLeader := g.leader
	prev := memberSettings{protocols: m.protocols, sessionTimeout: m.sessionTimeout,
		rebalanceTimeout: m.rebalanceTimeout, clientID: m.clientID, clientHost: m.clientHost}
	if j := g.unpark(m); j != nil {
		j.Reply.Resolve(joinError(kerr.FencedInstanceID.Code, oldID))
	}
	if m.sync != nil {
		m.sync.fail(kerr.FencedInstanceID.Code)
		m.sync = nil
	}
	// The deadline is set before the timeouts change (Apache updateStaticMemberAndRebalance).
	g.renameMember(ctx, m, newID)
	g.updateMember(m, r)
	g.log().Info().Str("member", logs.ID(newID)).Str("instance", logs.ID(r.InstanceID)).Str("replaced", logs.ID(oldID)).Msg("static_member_replaced")

	switch g.state {
	case stateStable:
		if sel, _ := selectProtocol(protocolLists(g.sortedMembers())); sel == g.protocol {
			res := g.joinResult(m, false)
			if r.SupportsSkipAssignment {
				if newID == g.leader {
					res = g.joinResult(m, true)
					res.SkipAssignment = true
				}
			} else {
				res.Leader = oldLeader
			}
			// The new member id is saved before the member hears of it; if the write fails
			// the replacement is undone and the member gets the write's error with no id
			// (Apache updateStaticMemberAndRebalance's storeGroup callback).
			meta := g.generationMeta(func(o *member) []byte { return o.assignment })
			g.saveMeta(ctx, r, meta, func(code int16) {
				if code != 0 {
					g.log().Warn().Int16("error_code", code).Str("instance", logs.ID(r.InstanceID)).
						Msg("static_member_replacement_not_saved_undone")
					g.undoReplacement(ctx, m, newID, oldID, prev)
					g.replyJoin(r, joinError(code, ""))
					return
				}
				g.replyJoin(r, res)
			})
			return
		}
		g.park(m, r)
		g.prepareRebalance(ctx, causeStaticRejoined, "static member "+r.InstanceID+" rejoined with a new protocol")
	case stateCompletingRebalance:
		// KAFKA-9801: the leader's assignment would name the old id; rebalance.
		g.park(m, r)
		g.prepareRebalance(ctx, causeStaticRejoined, "static member "+r.InstanceID+" rejoined during CompletingRebalance")
	case statePreparingRebalance:
		g.park(m, r)
	default:
		g.replyJoin(r, joinError(kerr.UnknownServerError.Code, ""))
	}
}

// memberSettings is what a JoinGroup may change on a member (updateMember).
type memberSettings struct {
	protocols                        []Protocol
	sessionTimeout, rebalanceTimeout time.Duration
	clientID, clientHost             string
}

// renameMember moves m to a new id (static replacement, or its undoing): the member
// table, the instance, the leader and pending-sync follow, and the session timer, armed
// under the old id, is re-armed under the new one from now.
func (g *groupActor) renameMember(ctx actor.Context, m *member, id string) {
	old := m.id
	delete(g.members, old)
	m.id = id
	g.classicMaps()
	g.members[id] = m
	if m.instanceID != "" {
		g.instances[m.instanceID] = id
	}
	if g.leader == old {
		g.leader = id
	}
	if g.pendingSync[old] {
		delete(g.pendingSync, old)
		g.pendingSync[id] = true
	}
	if m.cancel != nil {
		m.cancel()
	}
	m.timerArmed = false
	g.touch(ctx, m)
}

// undoReplacement puts a static member back under its old id with its old settings,
// unless it was replaced again or removed while the write was in flight.
func (g *groupActor) undoReplacement(ctx actor.Context, m *member, newID, oldID string, prev memberSettings) {
	if g.members[newID] != m || g.instances[m.instanceID] != newID {
		return
	}
	for _, p := range m.protocols {
		g.supported[p.Name]--
	}
	m.protocols = prev.protocols
	for _, p := range m.protocols {
		g.supported[p.Name]++
	}
	m.sessionTimeout, m.rebalanceTimeout = prev.sessionTimeout, prev.rebalanceTimeout
	m.clientID, m.clientHost = prev.clientID, prev.clientHost
	// Its session restarts on the old timeout (Apache reverts the member, then
	// reschedules its heartbeat).
	g.renameMember(ctx, m, oldID)
}

// protocolLists is every member's protocols, ms in joining order.
func protocolLists(ms []*member) [][]Protocol {
	out := make([][]Protocol, len(ms))
	for i, m := range ms {
		out[i] = m.protocols
	}
	return out
}

// joinResult is the JoinGroup answer for m from the current generation; the leader also
// gets every member with its metadata for the selected protocol (followers get none, as
// in Apache, so a round's answers cost O(members) in all).
func (g *groupActor) joinResult(m *member, withMembers bool) *JoinResult {
	res := &JoinResult{
		Generation: g.generation, ProtocolType: g.protocolType, ProtocolName: g.protocol,
		Leader: g.leader, MemberID: m.id,
	}
	if withMembers {
		res.Members = g.leaderView(g.sortedMembers())
	}
	return res
}

// leaderView is the member list the leader's JoinGroup answer carries, ms in joining order.
func (g *groupActor) leaderView(ms []*member) []JoinMember {
	out := make([]JoinMember, len(ms))
	for i, o := range ms {
		out[i] = JoinMember{MemberID: o.id, InstanceID: o.instanceID, Metadata: o.metadataFor(g.protocol)}
	}
	return out
}
