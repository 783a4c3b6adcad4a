package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// DeleteRecords (key 21), v0–v2 (KIP-107).
//
//	v1: throttle. v2: flexible.
//
// Each partition's log start offset moves to the offset asked (-1: the high watermark)
// on the data route, asked of its partition actor (partition.DeleteRecordsMessage), and
// is answered once the new start is durable: low_watermark is the start after the
// request. An offset past the high watermark is OFFSET_OUT_OF_RANGE; a partition led
// elsewhere NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION; a
// partition that does not answer within DefaultRequestTimeout REQUEST_TIMED_OUT.
// Needs DELETE on each topic (authz.go).
func init() { register(21, 0, 2, handleDeleteRecords) }

func handleDeleteRecords(c *Call) {
	req := c.Req.(*kmsg.DeleteRecordsRequest)
	none := func(code int16) *partition.RecordsDeleted {
		return &partition.RecordsDeleted{ErrorCode: code, LowWatermark: -1}
	}
	respond := func(flat []*partition.RecordsDeleted) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
		k := 0
		for _, t := range req.Topics {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDeleteRecordsResponseTopicPartition()
				rp.Partition = p.Partition
				r := none(kerr.UnknownTopicOrPartition.Code)
				if flat != nil {
					r = flat[k]
					k++
				}
				rp.ErrorCode, rp.LowWatermark = r.ErrorCode, r.LowWatermark
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if noTopics(c) {
		c.Respond(respond(nil))
		return
	}
	var topics []partition.OffsetTopic
	for _, t := range req.Topics {
		ot := partition.OffsetTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ot.Partitions = append(ot.Partitions, partition.OffsetQuery{Partition: p.Partition, Offset: p.Offset})
		}
		topics = append(topics, ot)
	}
	askOffsets(c, topics, none, partition.DeleteRecordsMessage, respond)
}
