package group

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
)

// LeaveGroup.

// LeaveGroup (§4.6): one code per member in request order; the group rebalances once,
// after the whole batch (Apache 4.0).
func (g *groupActor) handleLeave(ctx actor.Context, r *LeaveGroup) {
	res := &LeaveResult{Members: make([]int16, len(r.Members))}
	if !g.exists {
		for i := range res.Members {
			res.Members[i] = kerr.UnknownMemberID.Code
		}
		r.Reply.Resolve(res)
		return
	}
	removed, pendingLeft := false, false
	for i, lm := range r.Members {
		g.log().Info().Str("member", logs.ID(lm.MemberID)).Str("instance", logs.ID(lm.InstanceID)).Str("reason", logs.ID(lm.Reason)).Msg("member_leaving")
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
	r.Reply.Resolve(res)
	if removed {
		g.afterRemoval(ctx, causeMemberLeft, "members left")
	} else if pendingLeft && g.state == statePreparingRebalance {
		g.tryCompleteJoin(ctx)
	}
}

func (g *groupActor) isPending(id string) bool {
	_, ok := g.pending[id]
	return ok
}
