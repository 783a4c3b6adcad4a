package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// OffsetForLeaderEpoch (key 23), v0–v4 (KIP-101, KIP-279, KIP-320).
//
//	v1: leader_epoch in the response. v2: current_leader_epoch, throttle.
//	v3: replica_id. v4: flexible.
//
// Consumers use it to detect log truncation after a leader change (KIP-320): the answer
// is the end offset of the largest epoch at most the asked one. Each partition is asked
// from the connection, as ListOffsets is (askOffsets, route.go).
func init() { register(23, 0, 4, handleOffsetForLeaderEpoch) }

func handleOffsetForLeaderEpoch(c *Call) {
	req := c.Req.(*kmsg.OffsetForLeaderEpochRequest)
	var topics []partition.OffsetTopic
	for _, t := range req.Topics {
		ot := partition.OffsetTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ot.Partitions = append(ot.Partitions, partition.OffsetQuery{Partition: p.Partition, CurrentLeaderEpoch: p.CurrentLeaderEpoch, LeaderEpoch: p.LeaderEpoch})
		}
		topics = append(topics, ot)
	}
	build := func(flat []*partition.EpochEnd) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		k := 0
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition = p.Partition
				rp.LeaderEpoch, rp.EndOffset = -1, -1
				if flat == nil {
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else {
					r := flat[k]
					k++
					rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = r.ErrorCode, r.LeaderEpoch, r.EndOffset
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if noTopics(c) {
		c.Respond(build(nil))
		return
	}
	none := func(code int16) *partition.EpochEnd {
		return &partition.EpochEnd{ErrorCode: code, LeaderEpoch: -1, EndOffset: -1}
	}
	askOffsets(c, topics, none, partition.EpochEndMessage, build)
}
