package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// DescribeGroups (key 15), v0–v6.
//
//	v1: throttle. v2: same shape.
//	v3: include_authorized_operations; authorized_operations in the response.
//	v4: group_instance_id of members. v5: flexible.
//	v6: an unknown group is GROUP_ID_NOT_FOUND with an error message (KIP-1043); v0-5
//	    describe it as Dead with no error (Apache 4.0).
//
// authorized_operations is Apache 4.0's with no authorizer (3400) when asked, and
// INT32_MIN when not. Member metadata and assignment are given only for a Stable group.
func init() { register(15, 0, 6, handleDescribeGroups) }

func handleDescribeGroups(c *Call) {
	req := c.Req.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	version := c.Version
	ops := int32(int32Min)
	if req.IncludeAuthorizedOperations {
		ops = groupAuthorizedOperations
	}
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(req.Groups))
	var batch group.Batch
	var at []int // resp.Groups index of each batch request
	for i, id := range req.Groups {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = id
		g.AuthorizedOperations = int32Min
		if code := groupRoute(c, id); code != 0 {
			g.ErrorCode = code
		} else {
			batch.Requests = append(batch.Requests, &group.DescribeGroup{Group: id})
			at = append(at, i)
		}
		resp.Groups[i] = g
	}
	if len(batch.Requests) == 0 {
		c.Respond(resp)
		return
	}
	batch.Reply = c.Await(func(v any) kmsg.Response {
		for j, x := range v.(*group.BatchResult).Values {
			d := x.(*group.Description)
			g := &resp.Groups[at[j]]
			g.ErrorCode = d.ErrorCode
			g.State = d.State
			if d.ErrorCode == kerr.GroupIDNotFound.Code {
				if version < 6 {
					g.ErrorCode = 0
				} else {
					g.ErrorMessage = strPtr("Group " + d.Group + " not found.")
				}
			}
			if g.ErrorCode != 0 {
				continue
			}
			g.AuthorizedOperations = ops
			g.ProtocolType = d.ProtocolType
			g.Protocol = d.Protocol
			for _, m := range d.Members {
				gm := kmsg.NewDescribeGroupsResponseGroupMember()
				gm.MemberID = m.MemberID
				if m.InstanceID != "" {
					gm.InstanceID = strPtr(m.InstanceID)
				}
				gm.ClientID = m.ClientID
				gm.ClientHost = m.ClientHost
				gm.ProtocolMetadata = orEmpty(m.Metadata)
				gm.MemberAssignment = orEmpty(m.Assignment)
				g.Members = append(g.Members, gm)
			}
		}
		return resp
	})
	askGroups(c, &batch)
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
