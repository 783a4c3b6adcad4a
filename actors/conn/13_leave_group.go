package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// LeaveGroup (key 13), v0–v5.
//
//	v1: throttle. v2: same shape.
//	v3: batched members with group_instance_id; per-member codes (KIP-345 admin removal).
//	v4: flexible. v5: per-member reason (KIP-800), logged by the group.
//
// v0-2 carry one member; their single error code is the first member's when the group
// itself had none (LeaveGroupResponse).
func init() { register(13, 0, 5, handleLeaveGroup) }

func handleLeaveGroup(c *Call) {
	req := c.Req.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	version := c.Version
	if code := groupCheck(c, req.Group); code != 0 {
		resp.ErrorCode = code
		c.Respond(resp)
		return
	}
	msg := &group.LeaveGroup{Group: req.Group}
	if version < 3 {
		msg.Members = []group.LeaveMember{{MemberID: req.MemberID}}
	}
	for _, m := range req.Members {
		lm := group.LeaveMember{MemberID: m.MemberID}
		if m.InstanceID != nil {
			lm.InstanceID = *m.InstanceID
		}
		if m.Reason != nil {
			lm.Reason = *m.Reason
		}
		msg.Members = append(msg.Members, lm)
	}
	members := msg.Members
	msg.Reply = c.Await(func(v any) kmsg.Response {
		r := v.(*group.LeaveResult)
		resp.ErrorCode = r.ErrorCode
		if version < 3 {
			if resp.ErrorCode == 0 && len(r.Members) > 0 {
				resp.ErrorCode = r.Members[0]
			}
			return resp
		}
		if r.ErrorCode != 0 {
			return resp
		}
		for i, m := range members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID = m.MemberID
			if m.InstanceID != "" {
				rm.InstanceID = strPtr(m.InstanceID)
			}
			if i < len(r.Members) {
				rm.ErrorCode = r.Members[i]
			}
			resp.Members = append(resp.Members, rm)
		}
		return resp
	})
	askGroups(c, msg)
}
