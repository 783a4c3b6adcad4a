package group

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

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
		g.log.Info().Str("member", logs.ID(r.MemberID)).Str("instance", logs.ID(r.InstanceID)).Str("reason", logs.ID(r.Reason)).Msg("member_joining")
	}
	m := g.members[r.MemberID]
	if !acceptJoin(g.state, s.MaxSize, m != nil, m != nil && m.join != nil, g.awaitingJoin, len(g.members)) {
		// Apache removes the member (evicting a known one) and answers GROUP_MAX_SIZE_REACHED.
		if m != nil {
			g.removeMember(m, kerr.GroupMaxSizeReached.Code)
		}
		g.replyJoin(r, joinError(kerr.GroupMaxSizeReached.Code, ""))
		g.afterRemoval(ctx, "member rejected by group.max.size")
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
	g.handed(r)
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
			g.log.Warn().Int("pending", len(g.pending)).Msg("pending_member_refused_group_bound")
			g.replyJoin(r, joinError(kerr.GroupMaxSizeReached.Code, ""))
			return
		}
		if !g.cfg.Settings.Pending.take() {
			g.log.Warn().Int64("pending_total", g.cfg.Settings.Pending.Count()).Msg("pending_member_refused_broker_bound")
			g.replyJoin(r, joinError(kerr.CoordinatorLoadInProgress.Code, ""))
			return
		}
		g.pendingSeq++
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
		g.prepareRebalance(ctx, "member "+m.id+" changed its protocols")
	case stateStable:
		if m.id != g.leader && sameProtocols(m.protocols, r.Protocols) {
			g.touch(ctx, m)
			g.replyJoin(r, g.joinResult(m, false))
			return
		}
		g.updateMember(m, r)
		g.park(m, r)
		g.prepareRebalance(ctx, "member "+m.id+" rejoined")
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
		g.prepareRebalance(ctx, "member "+id+" joined")
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
	g.handed(r)
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
	g.log.Info().Str("member", logs.ID(newID)).Str("instance", logs.ID(r.InstanceID)).Str("replaced", logs.ID(oldID)).Msg("static_member_replaced")

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
					g.log.Warn().Int16("error_code", code).Str("instance", logs.ID(r.InstanceID)).
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
		g.prepareRebalance(ctx, "static member "+r.InstanceID+" rejoined with a new protocol")
	case stateCompletingRebalance:
		// KAFKA-9801: the leader's assignment would name the old id; rebalance.
		g.park(m, r)
		g.prepareRebalance(ctx, "static member "+r.InstanceID+" rejoined during CompletingRebalance")
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

// prepareRebalance starts a join phase: parked SyncGroups of CompletingRebalance get
// REBALANCE_IN_PROGRESS; an Empty group waits group.initial.rebalance.delay.ms (extended
// while members keep coming, up to the rebalance timeout); otherwise the rebalance timeout.
func (g *groupActor) prepareRebalance(ctx actor.Context, reason string) {
	if g.state == stateCompletingRebalance {
		for _, m := range g.members {
			if m.sync != nil {
				m.sync.fail(kerr.RebalanceInProgress.Code)
				m.sync = nil
			}
			m.assignment = nil
		}
	}
	g.cancelSync()
	g.pendingSync = map[string]bool{}
	wasEmpty := g.state == stateEmpty
	g.setState(statePreparingRebalance)
	g.log.Info().Str("reason", logs.ID(reason)).Int32("generation", g.generation).Msg("rebalance_started")
	if wasEmpty {
		d := g.cfg.Settings.InitialRebalanceDelay
		g.initialDelay = true
		g.newMemberAdded = false
		g.delayNow = d
		g.delayRemaining = max(g.rebalanceTimeout()-d, 0)
		g.armJoin(ctx, d)
		return
	}
	g.initialDelay = false
	g.armJoin(ctx, g.rebalanceTimeout())
	g.tryCompleteJoin(ctx)
}

// rebalanceTimeout is the largest rebalance timeout of the members.
func (g *groupActor) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

func (g *groupActor) armJoin(ctx actor.Context, d time.Duration) {
	if g.joinCancel != nil {
		g.joinCancel()
	}
	g.joinSeqGuard++
	g.joinCancel = actor.After(ctx, d, &joinDeadline{seq: g.joinSeqGuard})
}

func (g *groupActor) cancelJoin() {
	if g.joinCancel != nil {
		g.joinCancel()
		g.joinCancel = nil
	}
	g.joinSeqGuard++
}

// tryCompleteJoin completes the join phase early once every member has rejoined and no
// KIP-394 member is pending. The initial delay never completes early.
func (g *groupActor) tryCompleteJoin(ctx actor.Context) {
	if g.state != statePreparingRebalance || g.initialDelay {
		return
	}
	if g.awaitingJoin == len(g.members) && len(g.pending) == 0 {
		g.completeJoin(ctx)
	}
}

func (g *groupActor) onJoinDeadline(ctx actor.Context, m *joinDeadline) {
	if m.seq != g.joinSeqGuard || g.state != statePreparingRebalance {
		return
	}
	if g.initialDelay && g.newMemberAdded && g.delayRemaining != 0 {
		// Apache InitialDelayedJoin: each wave of new members buys up to another delay.
		g.newMemberAdded = false
		next := min(g.cfg.Settings.InitialRebalanceDelay, g.delayRemaining)
		g.delayRemaining = max(g.delayRemaining-g.delayNow, 0)
		g.delayNow = next
		g.armJoin(ctx, next)
		return
	}
	g.completeJoin(ctx)
}

// completeJoin ends the join phase (Apache onCompleteJoin): dynamic members that did not
// rejoin are removed (static ones stay until their session expires), a leader is chosen
// among those that rejoined, the generation advances and every parked JoinGroup is
// answered.
func (g *groupActor) completeJoin(ctx actor.Context) {
	g.cancelJoin()
	g.initialDelay = false
	// One pass in joining order: drop the dynamic members that did not rejoin, note the
	// first member that did (the new leader if the old one did not rejoin). A round is
	// O(members), whatever its size.
	ms := g.sortedMembers()
	kept := ms[:0]
	joined := ""
	for _, m := range ms {
		if m.join == nil && m.instanceID == "" {
			g.log.Info().Str("member", logs.ID(m.id)).Msg("member_removed_did_not_rejoin_in_time")
			g.removeMember(m, 0)
			continue
		}
		if joined == "" && m.join != nil {
			joined = m.id
		}
		kept = append(kept, m)
	}
	ms = kept
	if lm := g.members[g.leader]; lm == nil || lm.join == nil {
		if joined == "" && len(ms) > 0 {
			// Only static members that have not rejoined are left: wait another round
			// (Apache groupStuckInRebalanceTimeoutDueToNonjoinedStaticMember).
			g.armJoin(ctx, g.rebalanceTimeout())
			return
		}
		g.leader = joined
	}
	g.generation++
	if len(ms) == 0 {
		g.protocol, g.leader = "", ""
		g.topics, g.topicsKnown = nil, false
		g.setState(stateEmpty)
		g.log.Info().Int32("generation", g.generation).Msg("group_empty")
		g.saveEmpty(ctx)
		ctx.SetReceiveTimeout(g.cfg.Settings.IdlePassivation)
		return
	}
	var voted bool
	if g.protocol, voted = selectProtocol(protocolLists(ms)); !voted {
		// Every join checks that its protocols are shared by all members (§4.3 step 7b/8b),
		// so an empty vote is a broken invariant: say so rather than answer silently.
		g.log.Error().Int32("generation", g.generation).Int("members", len(ms)).
			Msg("no_protocol_common_to_all_members_generation_without_protocol")
	}
	g.computeTopics()
	g.setState(stateCompletingRebalance)
	g.log.Info().Int32("generation", g.generation).Str("protocol", logs.ID(g.protocol)).Str("leader", logs.ID(g.leader)).
		Int("members", len(ms)).Msg("join_phase_complete")
	now := time.Now()
	for _, m := range ms {
		g.pendingSync[m.id] = true
		// Every member's session restarts here, a static member kept without rejoining
		// included (Apache onCompleteJoin reschedules each member's heartbeat; GCT::
		// groupStuckInRebalanceTimeoutDueToNonjoinedStaticMember relies on it).
		m.isNew = false
		m.deadline = now.Add(m.sessionTimeout)
		g.armSession(ctx, m)
		if j := g.unpark(m); j != nil {
			res := g.joinResult(m, false)
			if m.id == g.leader {
				res.Members = g.leaderView(ms)
			}
			j.Reply.Resolve(res)
		}
	}
	g.syncSeqGuard++
	g.syncCancel = actor.After(ctx, g.rebalanceTimeout(), &syncDeadline{seq: g.syncSeqGuard, generation: g.generation})
}

func (g *groupActor) computeTopics() {
	md := make([][]byte, 0, len(g.members))
	for _, m := range g.members {
		md = append(md, m.metadataFor(g.protocol))
	}
	g.topics, g.topicsKnown = subscriptions(g.protocolType, md)
}

func (g *groupActor) cancelSync() {
	if g.syncCancel != nil {
		g.syncCancel()
		g.syncCancel = nil
	}
	g.syncSeqGuard++
}

// onSyncDeadline removes the members that never sent SyncGroup for this generation and
// rebalances (Apache DelayedSync).
func (g *groupActor) onSyncDeadline(ctx actor.Context, m *syncDeadline) {
	if m.seq != g.syncSeqGuard || m.generation != g.generation ||
		(g.state != stateCompletingRebalance && g.state != stateStable) || len(g.pendingSync) == 0 {
		return
	}
	for id := range g.pendingSync {
		if mm := g.members[id]; mm != nil {
			g.log.Info().Str("member", logs.ID(id)).Msg("member_removed_no_syncgroup_in_time")
			g.removeMember(mm, kerr.UnknownMemberID.Code)
		}
	}
	g.pendingSync = map[string]bool{}
	g.prepareRebalance(ctx, "members did not sync in time")
}

// removeMember drops m. Its parked JoinGroup gets UNKNOWN_MEMBER_ID with no member id (the
// client rejoins as new); its parked SyncGroup gets syncCode (0: UNKNOWN_MEMBER_ID).
func (g *groupActor) removeMember(m *member, syncCode int16) {
	if j := g.unpark(m); j != nil {
		j.Reply.Resolve(joinError(kerr.UnknownMemberID.Code, ""))
	}
	if m.sync != nil {
		if syncCode == 0 {
			syncCode = kerr.UnknownMemberID.Code
		}
		m.sync.fail(syncCode)
		m.sync = nil
	}
	if m.cancel != nil {
		m.cancel()
	}
	m.timerSeq++
	for _, p := range m.protocols {
		g.supported[p.Name]--
	}
	delete(g.members, m.id)
	delete(g.pendingSync, m.id)
	if m.instanceID != "" && g.instances[m.instanceID] == m.id {
		delete(g.instances, m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
		if o := g.oldest(); o != nil {
			g.leader = o.id
		}
	}
}

// afterRemoval moves the group on once members left: Stable and CompletingRebalance
// rebalance; PreparingRebalance may now be complete.
func (g *groupActor) afterRemoval(ctx actor.Context, reason string) {
	switch g.state {
	case stateStable, stateCompletingRebalance:
		g.prepareRebalance(ctx, reason)
	case statePreparingRebalance:
		g.tryCompleteJoin(ctx)
	}
}

// touch extends m's session: a heartbeat, a commit or a sync.
func (g *groupActor) touch(ctx actor.Context, m *member) {
	m.deadline = time.Now().Add(m.sessionTimeout)
	g.armSession(ctx, m)
}

// armSession makes sure a timer will look at m's deadline. Extending a session only moves
// the deadline; the timer, when it fires, re-arms for what is left, so a heartbeat costs
// no timer.
func (g *groupActor) armSession(ctx actor.Context, m *member) {
	if m.timerArmed && !m.deadline.Before(m.armedFor) {
		return
	}
	// The deadline moved earlier (a new member's 5-minute timer giving way to its
	// session): fire at the new one.
	if m.cancel != nil {
		m.cancel()
	}
	m.timerArmed = true
	m.timerSeq++
	m.armedFor = m.deadline
	m.cancel = actor.After(ctx, time.Until(m.deadline), &sessionCheck{member: m.id, seq: m.timerSeq})
}

// onSessionCheck: a member whose deadline passed is removed, unless it is waiting for a
// JoinGroup or SyncGroup answer, which counts as alive (Apache hasSatisfiedHeartbeat); a
// new member's 5-minute join timer is the exception.
func (g *groupActor) onSessionCheck(ctx actor.Context, c *sessionCheck) {
	m := g.members[c.member]
	if m == nil || m.timerSeq != c.seq {
		return
	}
	m.timerArmed = false
	now := time.Now()
	if now.Before(m.deadline) {
		g.armSession(ctx, m)
		return
	}
	if !m.isNew && (m.join != nil || m.sync != nil) {
		m.deadline = now.Add(m.sessionTimeout)
		g.armSession(ctx, m)
		return
	}
	g.log.Info().Str("member", logs.ID(m.id)).Str("instance", logs.ID(m.instanceID)).Bool("new", m.isNew).Msg("member_session_expired")
	g.removeMember(m, 0)
	g.afterRemoval(ctx, "member "+m.id+" session expired")
}

func (g *groupActor) onPendingDeadline(ctx actor.Context, m *pendingDeadline) {
	if seq, ok := g.pending[m.member]; !ok || seq != m.seq {
		return
	}
	g.log.Info().Str("member", logs.ID(m.member)).Msg("pending_member_expired")
	g.dropPending(m.member)
	if g.state == statePreparingRebalance {
		g.tryCompleteJoin(ctx)
	}
}

func (g *groupActor) dropPending(id string) {
	if _, ok := g.pending[id]; !ok {
		return
	}
	g.cfg.Settings.Pending.release(1)
	delete(g.pending, id)
	if c := g.pendingTimer[id]; c != nil {
		c()
	}
	delete(g.pendingTimer, id)
}

// SyncGroup (§4.4).
func (g *groupActor) handleSync(ctx actor.Context, r *SyncGroup) {
	if !g.exists {
		g.fail(r, kerr.UnknownMemberID.Code)
		return
	}
	if code := g.checkMember(r.MemberID, r.InstanceID); code != 0 {
		g.fail(r, code)
		return
	}
	if r.Generation != g.generation {
		g.fail(r, kerr.IllegalGeneration.Code)
		return
	}
	// Apache 4.0 compares the v5 fields only when both sides are set.
	if (r.ProtocolType != nil && g.protocolType != "" && *r.ProtocolType != g.protocolType) ||
		(r.ProtocolName != nil && g.protocol != "" && *r.ProtocolName != g.protocol) {
		g.fail(r, kerr.InconsistentGroupProtocol.Code)
		return
	}
	m := g.members[r.MemberID]
	switch g.state {
	case stateEmpty:
		g.fail(r, kerr.UnknownMemberID.Code)
	case statePreparingRebalance:
		g.fail(r, kerr.RebalanceInProgress.Code)
	case stateCompletingRebalance:
		g.handed(r)
		if m.sync != nil {
			m.sync.fail(kerr.RebalanceInProgress.Code)
		}
		m.sync = r
		g.synced(m)
		if m.id == g.leader {
			g.completeSync(ctx, r.Assignments)
		}
	case stateStable:
		g.synced(m)
		g.touch(ctx, m)
		g.handed(r)
		r.Reply.Resolve(&SyncResult{ProtocolType: g.protocolType, ProtocolName: g.protocol, Assignment: m.assignment})
	}
}

func (g *groupActor) synced(m *member) {
	delete(g.pendingSync, m.id)
	if len(g.pendingSync) == 0 {
		g.cancelSync()
	}
}

// completeSync takes the leader's assignment (members it left out get an empty one;
// assignments from followers are ignored). As in Apache (§4.4), the generation with its
// assignment is saved first, and only once it is on disk, and if the group is still
// CompletingRebalance in the same generation, is every parked SyncGroup answered and the
// group Stable. A failed write answers the parked SyncGroups with the write's error and
// rebalances. While the write is in flight the group stays CompletingRebalance: late
// followers park, heartbeats answer 0.
func (g *groupActor) completeSync(ctx actor.Context, assignments map[string][]byte) {
	gen := g.generation
	assign := func(m *member) []byte {
		if a := assignments[m.id]; a != nil {
			return a
		}
		return []byte{}
	}
	g.saveMeta(ctx, nil, g.generationMeta(assign), func(code int16) {
		if g.state != stateCompletingRebalance || g.generation != gen {
			return // the group moved on meanwhile; its parked syncs were answered then
		}
		if code != 0 {
			g.log.Warn().Int16("error_code", code).Int32("generation", gen).Msg("generation_not_saved_rebalancing")
			for _, m := range g.members {
				if m.sync != nil {
					m.sync.fail(code)
					m.sync = nil
				}
				m.assignment = nil
			}
			g.prepareRebalance(ctx, "generation "+strconv.Itoa(int(gen))+" not saved")
			return
		}
		for _, m := range g.members {
			m.assignment = assign(m)
		}
		g.setState(stateStable)
		g.log.Info().Int32("generation", g.generation).Int("members", len(g.members)).Msg("group_stable")
		for _, m := range g.members {
			if m.sync != nil {
				s := m.sync
				m.sync = nil
				s.Reply.Resolve(&SyncResult{ProtocolType: g.protocolType, ProtocolName: g.protocol, Assignment: m.assignment})
				g.touch(ctx, m)
			}
		}
	})
}

// Heartbeat (§4.5).
func (g *groupActor) handleHeartbeat(r *Heartbeat) {
	code := g.heartbeat(r)
	g.handed(r)
	r.Reply.Resolve(&Result{ErrorCode: code})
}

func (g *groupActor) heartbeat(r *Heartbeat) int16 {
	if !g.exists {
		return kerr.UnknownMemberID.Code
	}
	if code := g.checkMember(r.MemberID, r.InstanceID); code != 0 {
		return code
	}
	if r.Generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	m := g.members[r.MemberID]
	switch g.state {
	case stateEmpty:
		return kerr.UnknownMemberID.Code
	case statePreparingRebalance:
		m.deadline = time.Now().Add(m.sessionTimeout)
		return kerr.RebalanceInProgress.Code
	default:
		m.deadline = time.Now().Add(m.sessionTimeout)
		return 0
	}
}

// LeaveGroup (§4.6): one code per member in request order; the group rebalances once,
// after the whole batch (Apache 4.0).
func (g *groupActor) handleLeave(ctx actor.Context, r *LeaveGroup) {
	res := &LeaveResult{Members: make([]int16, len(r.Members))}
	if !g.exists {
		for i := range res.Members {
			res.Members[i] = kerr.UnknownMemberID.Code
		}
		g.handed(r)
		r.Reply.Resolve(res)
		return
	}
	removed, pendingLeft := false, false
	for i, lm := range r.Members {
		g.log.Info().Str("member", logs.ID(lm.MemberID)).Str("instance", logs.ID(lm.InstanceID)).Str("reason", logs.ID(lm.Reason)).Msg("member_leaving")
		switch {
		case lm.MemberID == "":
			// Admin removal by group.instance.id (KIP-345).
			id, ok := g.instances[lm.InstanceID]
			if !ok || lm.InstanceID == "" {
				res.Members[i] = kerr.UnknownMemberID.Code
				continue
			}
			g.removeMember(g.members[id], 0)
			removed = true
		case g.isPending(lm.MemberID):
			g.dropPending(lm.MemberID)
			pendingLeft = true
		default:
			if code := g.checkMember(lm.MemberID, lm.InstanceID); code != 0 {
				res.Members[i] = code
				continue
			}
			g.removeMember(g.members[lm.MemberID], 0)
			removed = true
		}
	}
	g.handed(r)
	r.Reply.Resolve(res)
	if removed {
		g.afterRemoval(ctx, "members left")
	} else if pendingLeft && g.state == statePreparingRebalance {
		g.tryCompleteJoin(ctx)
	}
}

func (g *groupActor) isPending(id string) bool {
	_, ok := g.pending[id]
	return ok
}
