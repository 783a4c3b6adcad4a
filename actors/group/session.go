package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

// Sessions: heartbeats, session and pending-member timers, and removing members.

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
func (g *groupActor) afterRemoval(ctx actor.Context, cause, reason string) {
	switch g.state {
	case stateStable, stateCompletingRebalance:
		g.prepareRebalance(ctx, cause, reason)
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
	g.log().Info().Str("member", logs.ID(m.id)).Str("instance", logs.ID(m.instanceID)).Bool("new", m.isNew).Msg("member_session_expired")
	g.cfg.Settings.Metrics.sessionExpired()
	g.removeMember(m, 0)
	g.afterRemoval(ctx, causeSessionExpired, "member "+m.id+" session expired")
}

func (g *groupActor) onPendingDeadline(ctx actor.Context, m *pendingDeadline) {
	if seq, ok := g.pending[m.member]; !ok || seq != m.seq {
		return
	}
	g.log().Info().Str("member", logs.ID(m.member)).Msg("pending_member_expired")
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

// Heartbeat (§4.5).
func (g *groupActor) handleHeartbeat(r *Heartbeat) {
	code := g.heartbeat(r)
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
