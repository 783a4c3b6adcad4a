package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
)

// ConsumerGroupDescribe (key 69), v0–v1: consumer-protocol groups (KIP-848).
//
//	v1: member_type (KIP-1099): 1 for a consumer-protocol member (mixed groups with
//	    classic members, 0, are planned).
//
// A group that does not exist or is not a consumer-protocol group is GROUP_ID_NOT_FOUND
// (Apache). Assignments carry topic ids and names. authorized_operations is as in
// DescribeGroups.
func init() { register(69, 0, 1, handleConsumerGroupDescribe) }

func handleConsumerGroupDescribe(c *Call) {
	req := c.Req.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	ops := int32(int32Min)
	if req.IncludeAuthorizedOperations {
		ops = groupAuthorizedOperations
	}
	resp.Groups = make([]kmsg.ConsumerGroupDescribeResponseGroup, len(req.Groups))
	var batch group.Batch
	var at []int
	for i, id := range req.Groups {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group = id
		g.AuthorizedOperations = int32Min
		switch code := groupRoute(c, id); {
		case id == "":
			g.ErrorCode = kerr.InvalidGroupID.Code
		case code != 0:
			g.ErrorCode = code
		default:
			batch.Requests = append(batch.Requests, &group.ConsumerDescribe{Group: id})
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
			d := x.(*group.ConsumerDescription)
			g := &resp.Groups[at[j]]
			g.ErrorCode = d.ErrorCode
			if d.ErrorMessage != "" {
				g.ErrorMessage = strPtr(d.ErrorMessage)
			}
			if d.ErrorCode != 0 {
				continue
			}
			g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName = d.State, d.Epoch, d.AssignmentEpoch, d.AssignorName
			g.AuthorizedOperations = ops
			for _, m := range d.Members {
				gm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				gm.MemberID, gm.MemberEpoch, gm.ClientID, gm.ClientHost = m.MemberID, m.MemberEpoch, m.ClientID, m.ClientHost
				if m.InstanceID != "" {
					gm.InstanceID = strPtr(m.InstanceID)
				}
				if m.RackID != "" {
					gm.RackID = strPtr(m.RackID)
				}
				gm.SubscribedTopics = m.Subscribed
				if m.Regex != "" {
					gm.SubscribedTopicRegex = strPtr(m.Regex)
				}
				if gm.SubscribedTopics == nil {
					gm.SubscribedTopics = []string{}
				}
				gm.Assignment = describedAssignment(m.Assignment)
				gm.TargetAssignment = describedAssignment(m.Target)
				gm.MemberType = 1 // consumer protocol; 0 classic (KIP-1099)
				if m.Classic {
					gm.MemberType = 0
				}
				g.Members = append(g.Members, gm)
			}
		}
		return resp
	})
	askGroups(c, &batch)
}

func describedAssignment(ts []group.AssignedTopic) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, t := range ts {
		tp := kmsg.NewAssignmentTopicPartition()
		tp.TopicID, tp.Topic, tp.Partitions = t.ID, t.Topic, t.Partitions
		a.TopicPartitions = append(a.TopicPartitions, tp)
	}
	return a
}
