package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// ListOffsets (key 2), v1–v10.
//
//	v1: one offset per partition, by timestamp (-1 latest, -2 earliest). v2: isolation
//	(read_committed: latest is the last stable offset, nothing found past it).
//	v4: current_leader_epoch, leader_epoch in the response (KIP-320). v6: flexible.
//	v7: -3 max timestamp (KIP-734). v8: -4 earliest local (KIP-405).
//	v9: -5 latest tiered (KIP-1005; nothing is tiered, so -1). v10: timeout_ms (KIP-1075).
func init() { register(2, 1, 10, handleListOffsets) }

func handleListOffsets(c *Call) {
	req := c.Req.(*kmsg.ListOffsetsRequest)
	if noTopics(c) {
		c.Respond(listOffsetsResponse(req, nil))
		return
	}
	none := func(code int16) *partition.Listed {
		return &partition.Listed{ErrorCode: code, Timestamp: -1, Offset: -1, LeaderEpoch: -1}
	}
	askOffsets(c, offsetTopics(req), none, partition.ListOffsetMessage, func(flat []*partition.Listed) kmsg.Response {
		return listOffsetsResponse(req, flat)
	})
}

func offsetTopics(req *kmsg.ListOffsetsRequest) []partition.OffsetTopic {
	var out []partition.OffsetTopic
	for _, t := range req.Topics {
		ot := partition.OffsetTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ot.Partitions = append(ot.Partitions, partition.OffsetQuery{Partition: p.Partition, CurrentLeaderEpoch: p.CurrentLeaderEpoch, Timestamp: p.Timestamp, ReadCommitted: req.IsolationLevel == 1 && req.Version >= 2})
		}
		out = append(out, ot)
	}
	return out
}

// listOffsetsResponse builds the response from one answer per partition, in request
// order, or UNKNOWN_TOPIC_OR_PARTITION for every partition when flat is nil.
func listOffsetsResponse(req *kmsg.ListOffsetsRequest, flat []*partition.Listed) *kmsg.ListOffsetsResponse {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	k := 0
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			if flat == nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				r := flat[k]
				k++
				rp.ErrorCode, rp.Timestamp, rp.Offset, rp.LeaderEpoch = r.ErrorCode, r.Timestamp, r.Offset, r.LeaderEpoch
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
