package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

// The rebalance: preparing it, its timeouts, and completing the join phase.

// prepareRebalance starts a join phase: parked SyncGroups of CompletingRebalance get
// REBALANCE_IN_PROGRESS; an Empty group waits group.initial.rebalance.delay.ms (extended
// while members keep coming, up to the rebalance timeout); otherwise the rebalance timeout.
// cause is reason's bounded name, the metrics' label.
func (g *groupActor) prepareRebalance(ctx actor.Context, cause, reason string) {
	g.cfg.Settings.Metrics.rebalanceStarted(cause)
	if g.rebalanceStart == 0 {
		g.rebalanceStart, g.rebalanceCause = max(time.Since(monoBase), 1), cause
	}
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
	g.log().Info().Str("reason", logs.ID(reason)).Int32("generation", g.generation).Msg("rebalance_started")
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

// armJoin ends the join phase after d. A deadline of 0 (group.initial.rebalance.delay.ms=0)
// is a message to the group itself rather than a timer: it comes after the requests
// already in the mailbox, as a timer firing at once would, without a timer goroutine's
// hop; the guard drops it if the phase ends first, as a cancelled timer's.
func (g *groupActor) armJoin(ctx actor.Context, d time.Duration) {
	if g.joinCancel != nil {
		g.joinCancel()
		g.joinCancel = nil
	}
	g.joinSeqGuard++
	if d <= 0 {
		ctx.Send(ctx.Self(), &joinDeadline{seq: g.joinSeqGuard})
		return
	}
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
			g.log().Info().Str("member", logs.ID(m.id)).Msg("member_removed_did_not_rejoin_in_time")
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
		g.log().Info().Int32("generation", g.generation).Msg("group_empty")
		g.saveEmpty(ctx)
		ctx.SetReceiveTimeout(g.cfg.Settings.IdlePassivation)
		return
	}
	var voted bool
	if g.protocol, voted = selectProtocol(protocolLists(ms)); !voted {
		// Every join checks that its protocols are shared by all members (§4.3 step 7b/8b),
		// so an empty vote is a broken invariant: say so rather than answer silently.
		g.log().Error().Int32("generation", g.generation).Int("members", len(ms)).
			Msg("no_protocol_common_to_all_members_generation_without_protocol")
	}
	g.computeTopics()
	g.setState(stateCompletingRebalance)
	g.log().Info().Int32("generation", g.generation).Str("protocol", logs.ID(g.protocol)).Str("leader", logs.ID(g.leader)).
		Int("members", len(ms)).Msg("join_phase_complete")
	now := time.Now()
	g.classicMaps()
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
