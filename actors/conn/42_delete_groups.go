package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// DeleteGroups (key 42), v0–v2.
//
//	v1: same shape (throttle behaviour). v2: flexible.
//
// Per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or the group and its offsets file go.
// Repeated ids are answered once (Apache de-duplicates).
func init() { register(42, 0, 2, handleDeleteGroups) }

func handleDeleteGroups(c *Call) {
	req := c.Req.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	var batch group.Batch
	var at []int
	seen := map[string]bool{}
	for _, id := range req.Groups {
		if seen[id] {
			continue
		}
		seen[id] = true
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = id
		if code := groupRoute(c, id); code != 0 {
			g.ErrorCode = code
		} else {
			batch.Requests = append(batch.Requests, &group.DeleteGroup{Group: id})
			at = append(at, len(resp.Groups))
		}
		resp.Groups = append(resp.Groups, g)
	}
	if len(batch.Requests) == 0 {
		c.Respond(resp)
		return
	}
	batch.Reply = c.Await(func(v any) kmsg.Response {
		for j, x := range v.(*group.BatchResult).Values {
			resp.Groups[at[j]].ErrorCode = x.(*group.Result).ErrorCode
		}
		return resp
	})
	askGroups(c, &batch)
}
