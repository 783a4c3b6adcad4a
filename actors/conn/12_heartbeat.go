package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// Heartbeat (key 12), v0–v4.
//
//	v1: throttle. v2: same shape. v3: group_instance_id (KIP-345). v4: flexible.
func init() { register(12, 0, 4, handleHeartbeat) }

func handleHeartbeat(c *Call) {
	req := c.Req.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if code := groupCheck(c, req.Group); code != 0 {
		resp.ErrorCode = code
		c.Respond(resp)
		return
	}
	msg := &group.Heartbeat{Group: req.Group, MemberID: req.MemberID, Generation: req.Generation}
	if req.InstanceID != nil {
		msg.InstanceID = *req.InstanceID
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		resp.ErrorCode = v.(*group.Result).ErrorCode
		return resp
	})
	askGroups(c, msg)
}
