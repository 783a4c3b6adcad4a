package conn

import (
	"kaas/cluster"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// ListGroups (key 16), v0–v5.
//
//	v1: throttle. v2: same shape. v3: flexible.
//	v4: states_filter and group_state (KIP-518); matched case-insensitively (Apache 4.0).
//	v5: types_filter and group_type (KIP-848): classic, or consumer for a consumer-protocol
//	    group; the filter is matched case-insensitively (Apache).
//
// Groups that exist only as committed offsets are listed as Empty, also right after a
// restart (Apache loads them from __consumer_offsets).
func init() { register(16, 0, 5, handleListGroups) }

func handleListGroups(c *Call) {
	req := c.Req.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if c.Env.Groups == nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		c.Respond(resp)
		return
	}
	msg := &group.ListGroups{States: req.StatesFilter, Types: req.TypesFilter}
	var own *cluster.State
	if c.Env.Ownership != nil {
		own = c.Env.Ownership()
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		l := v.(*group.Listing)
		resp.ErrorCode = l.ErrorCode
		for _, g := range l.Groups {
			// Only the groups this broker coordinates (a group file on the shared volume
			// may belong to another broker).
			if c.Env.Ownership != nil && !own.OwnsGroup(g.Group) {
				continue
			}
			rg := kmsg.NewListGroupsResponseGroup()
			rg.Group = g.Group
			rg.ProtocolType = g.ProtocolType
			rg.GroupState = g.State
			rg.GroupType = g.Type
			resp.Groups = append(resp.Groups, rg)
		}
		return resp
	})
	askGroups(c, msg)
}
