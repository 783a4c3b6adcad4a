package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
	"kaas/actors/offsets"
)

// OffsetDelete (key 47), v0.
//
// GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a group with members that
// is not a consumer group, GROUP_SUBSCRIBED_TO_TOPIC per partition of a topic the group's
// members subscribe to (§4.13). The group is always asked, even when no partition is
// left, so its error is reported (KAT::testOffsetDeleteWithInvalidGroup).
func init() { register(47, 0, 0, handleOffsetDelete) }

func handleOffsetDelete(c *Call) {
	req := c.Req.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
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
	const sent = -2
	codes := make([][]int16, len(req.Topics))
	msg := &group.DeleteOffsets{Group: req.Group}
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			if !partitionKnown(c, t.Topic, p.Partition) {
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			codes[i][j] = sent
			msg.Partitions = append(msg.Partitions, offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		r := v.(*group.OffsetDeleteResult)
		resp.ErrorCode = r.ErrorCode
		if r.ErrorCode != 0 {
			return resp
		}
		k := 0
		for i, t := range req.Topics {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for j, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = codes[i][j]
				if rp.ErrorCode == sent {
					rp.ErrorCode = r.Codes[k]
					k++
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	})
	askGroups(c, msg)
}
