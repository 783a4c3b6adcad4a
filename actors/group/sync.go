package group

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

// The sync phase: SyncGroup, its deadline, and the saved generation that completes it.

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
			g.log().Info().Str("member", logs.ID(id)).Msg("member_removed_no_syncgroup_in_time")
			g.removeMember(mm, kerr.UnknownMemberID.Code)
		}
	}
	g.pendingSync = map[string]bool{}
	g.prepareRebalance(ctx, causeSyncTimeout, "members did not sync in time")
}

// SyncGroup (§4.4).
func (g *groupActor) handleSync(ctx actor.Context, r *SyncGroup) {
	if !g.exists {
		r.fail(kerr.UnknownMemberID.Code)
		return
	}
	if code := g.checkMember(r.MemberID, r.InstanceID); code != 0 {
		r.fail(code)
		return
	}
	if r.Generation != g.generation {
		r.fail(kerr.IllegalGeneration.Code)
		return
	}
	// Apache 4.0 compares the v5 fields only when both sides are set.
	if (r.ProtocolType != nil && g.protocolType != "" && *r.ProtocolType != g.protocolType) ||
		(r.ProtocolName != nil && g.protocol != "" && *r.ProtocolName != g.protocol) {
		r.fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	m := g.members[r.MemberID]
	switch g.state {
	case stateEmpty:
		r.fail(kerr.UnknownMemberID.Code)
	case statePreparingRebalance:
		r.fail(kerr.RebalanceInProgress.Code)
	case stateCompletingRebalance:
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
			g.log().Warn().Int16("error_code", code).Int32("generation", gen).Msg("generation_not_saved_rebalancing")
			for _, m := range g.members {
				if m.sync != nil {
					m.sync.fail(code)
					m.sync = nil
				}
				m.assignment = nil
			}
			g.prepareRebalance(ctx, causeNotSaved, "generation "+strconv.Itoa(int(gen))+" not saved")
			return
		}
		for _, m := range g.members {
			m.assignment = assign(m)
		}
		g.setState(stateStable)
		g.log().Info().Int32("generation", g.generation).Int("members", len(g.members)).Msg("group_stable")
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
