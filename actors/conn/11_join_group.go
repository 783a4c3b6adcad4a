package conn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// JoinGroup (key 11), v0–v9.
//
//	v1: rebalance_timeout_ms (v0 takes it from session_timeout_ms, KAFKA-8653).
//	v2: throttle. v3: same shape.
//	v4: a new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394).
//	v5: group_instance_id (static membership, KIP-345).
//	v6: flexible. v7: protocol_type in the response; null protocol_name on errors.
//	v8: reason (KIP-800), logged by the group. v9: skip_assignment (KIP-814).
//
// The group parks the request until the rebalance round completes.
func init() { register(11, 0, 9, handleJoinGroup) }

func handleJoinGroup(c *Call) {
	req := c.Req.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	version := c.Version
	fill := func(r *group.JoinResult) kmsg.Response {
		resp.ErrorCode = r.ErrorCode
		resp.Generation = r.Generation
		resp.LeaderID = r.Leader
		resp.MemberID = r.MemberID
		resp.SkipAssignment = r.SkipAssignment
		// v7+ sends an empty protocol as null; below it is "" (JoinGroupResponse).
		if r.ProtocolName != "" || version < 7 {
			resp.Protocol = strPtr(r.ProtocolName)
		}
		if r.ErrorCode == 0 && r.ProtocolType != "" {
			resp.ProtocolType = strPtr(r.ProtocolType)
		}
		for _, m := range r.Members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID = m.MemberID
			if m.InstanceID != "" {
				rm.InstanceID = strPtr(m.InstanceID)
			}
			rm.ProtocolMetadata = m.Metadata
			resp.Members = append(resp.Members, rm)
		}
		return resp
	}
	if req.Group == "" {
		c.Respond(fill(&group.JoinResult{ErrorCode: kerr.InvalidGroupID.Code, Generation: -1}))
		return
	}
	if code := groupRoute(c, req.Group); code != 0 {
		c.Respond(fill(&group.JoinResult{ErrorCode: code, Generation: -1}))
		return
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	if version == 0 {
		rebalance = session
	}
	msg := &group.JoinGroup{
		Group:                  req.Group,
		MemberID:               req.MemberID,
		ClientID:               c.ClientID,
		ClientHost:             c.ClientHost(),
		SessionTimeout:         session,
		RebalanceTimeout:       rebalance,
		ProtocolType:           req.ProtocolType,
		RequireKnownMemberID:   version >= 4,
		SupportsSkipAssignment: version >= 9,
	}
	if req.InstanceID != nil {
		msg.InstanceID = *req.InstanceID
	}
	if req.Reason != nil {
		msg.Reason = *req.Reason
	}
	for _, p := range req.Protocols {
		msg.Protocols = append(msg.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return fill(v.(*group.JoinResult)) })
	askGroups(c, msg)
}
