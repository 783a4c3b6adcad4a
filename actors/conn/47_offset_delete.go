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
// members subscribe to (§4.13); UNKNOWN_TOPIC_OR_PARTITION for partitions missing from
// the topic catalogue (KafkaApis). The group is always asked, even when no partition is
// left, so its error is reported (KAT::testOffsetDeleteWithInvalidGroup).
func init() { register(47, 0, 0, handleOffsetDelete) }

func handleOffsetDelete(c *Call) {
	req := c.Req.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if code := groupCheck(c, req.Group); code != 0 {
		resp.ErrorCode = code
		c.Respond(resp)
		return
	}
	var tps []offsets.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	withExistence(c, tps, func(exists []bool) kmsg.Response { return deleteKnown(c, req, tps, exists) })
}

// deleteKnown asks the group to delete the partitions that exist and merges its codes
// with UNKNOWN_TOPIC_OR_PARTITION for the others; the group is asked even when none is
// left, so its group-level error is reported.
func deleteKnown(c *Call, req *kmsg.OffsetDeleteRequest, tps []offsets.TopicPartition, exists []bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	msg := &group.DeleteOffsets{Group: req.Group}
	for i, tp := range tps {
		if exists[i] {
			msg.Partitions = append(msg.Partitions, tp)
		}
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		r := v.(*group.OffsetDeleteResult)
		resp.ErrorCode = r.ErrorCode
		if r.ErrorCode != 0 {
			return resp
		}
		k, n := 0, 0
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				if exists[n] {
					rp.ErrorCode = r.Codes[k]
					k++
				}
				n++
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	})
	askGroups(c, msg)
	return nil
}
