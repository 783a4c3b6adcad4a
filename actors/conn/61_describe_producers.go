package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// DescribeProducers (key 61), v0 (KIP-664): every producer of each partition's producer
// state, idempotent ones included: its id, epoch, last sequence and timestamp, the
// coordinator epoch of its last marker, and the first offset of its open transaction
// (-1: none). Authorized by TOPIC: READ per topic. Each partition is asked of its actor
// on the data route (route.go).
func init() { register(61, 0, 0, handleDescribeProducers) }

func handleDescribeProducers(c *Call) {
	req := c.Req.(*kmsg.DescribeProducersRequest)
	var topics []partition.OffsetTopic
	for _, t := range req.Topics {
		ot := partition.OffsetTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ot.Partitions = append(ot.Partitions, partition.OffsetQuery{Partition: p})
		}
		topics = append(topics, ot)
	}
	respond := func(flat []*partition.ProducerStates) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
		k := 0
		for _, t := range req.Topics {
			rt := kmsg.NewDescribeProducersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeProducersResponseTopicPartition()
				rp.Partition = p
				r := flat[k]
				k++
				rp.ErrorCode = r.ErrorCode
				for _, s := range r.Producers {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = s.ProducerID, int32(s.ProducerEpoch), s.LastSequence
					ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = s.LastTimestamp, s.CoordinatorEpoch, s.TxnStartOffset
					rp.ActiveProducers = append(rp.ActiveProducers, ap)
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	none := func(code int16) *partition.ProducerStates { return &partition.ProducerStates{ErrorCode: code} }
	if noTopics(c) {
		flat := make([]*partition.ProducerStates, 0)
		for _, t := range topics {
			for range t.Partitions {
				flat = append(flat, none(kerr.UnknownTopicOrPartition.Code))
			}
		}
		c.Respond(respond(flat))
		return
	}
	askOffsets(c, topics, none, func(_ partition.OffsetQuery, reply actor.Promise) any {
		return partition.ProducersMessage(reply)
	}, respond)
}
