package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// SyncGroup (key 14), v0–v5.
//
//	v1: throttle. v2: same shape. v3: group_instance_id (KIP-345). v4: flexible.
//	v5: protocol_type and protocol_name, both required and checked against the group;
//	    the response carries them on success.
//
// The group parks a follower's request until the leader's assignment arrives.
func init() { register(14, 0, 5, handleSyncGroup) }

func handleSyncGroup(c *Call) {
	req := c.Req.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	version := c.Version
	// Apache checks the v5 fields before anything else, even the ACL
	// (KAT::testSyncGroupProtocolTypeAndNameAreMandatorySinceV5).
	if version >= 5 && (req.ProtocolType == nil || req.Protocol == nil) {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		c.Respond(resp)
		return
	}
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		c.Respond(resp)
		return
	}
	if code := groupRoute(c, req.Group); code != 0 {
		resp.ErrorCode = code
		c.Respond(resp)
		return
	}
	msg := &group.SyncGroup{
		Group: req.Group, MemberID: req.MemberID, Generation: req.Generation,
		ProtocolType: req.ProtocolType, ProtocolName: req.Protocol,
	}
	if req.InstanceID != nil {
		msg.InstanceID = *req.InstanceID
	}
	if len(req.GroupAssignment) > 0 {
		msg.Assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			msg.Assignments[a.MemberID] = a.MemberAssignment
		}
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		r := v.(*group.SyncResult)
		resp.ErrorCode = r.ErrorCode
		resp.MemberAssignment = r.Assignment
		if r.ErrorCode == 0 && version >= 5 {
			resp.ProtocolType = strPtr(r.ProtocolType)
			resp.Protocol = strPtr(r.ProtocolName)
		}
		if resp.MemberAssignment == nil {
			resp.MemberAssignment = []byte{}
		}
		return resp
	})
	askGroups(c, msg)
}
