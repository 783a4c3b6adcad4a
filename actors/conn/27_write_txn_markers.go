package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// WriteTxnMarkers (key 27), v0–v1: a transaction coordinator ends producers'
// transactions on the partitions led here (KIP-98), and an operator aborts a hanging
// one (KIP-664). Authorized by CLUSTER: CLUSTER_ACTION.
//
//	v1: flexible.
//
// Each partition's marker goes to the topics manager, which routes it to the partition
// actor (partition.WriteTxnMarker); its code is answered once the marker is fsynced.
// A partition that does not answer in time is REQUEST_TIMED_OUT (the coordinator
// retries: markers are idempotent).
func init() { register(27, 0, 1, handleWriteTxnMarkers) }

func handleWriteTxnMarkers(c *Call) {
	req := c.Req.(*kmsg.WriteTxnMarkersRequest)
	respond := func(flat []int16) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		k := 0
		for _, m := range req.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					if flat == nil {
						rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					} else {
						rp.ErrorCode = flat[k]
					}
					k++
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	}
	if noTopics(c) {
		c.Respond(respond(nil))
		return
	}
	n := 0
	for _, m := range req.Markers {
		for _, t := range m.Topics {
			n += len(t.Partitions)
		}
	}
	a := c.conn
	g := a.newGather(c, n, func(int) any { return &partition.TxnMarkerWritten{ErrorCode: kerr.RequestTimedOut.Code} },
		func(results []any) kmsg.Response {
			flat := make([]int16, len(results))
			for i, v := range results {
				flat[i] = v.(*partition.TxnMarkerWritten).ErrorCode
			}
			return respond(flat)
		})
	i := 0
	for _, m := range req.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				w := &partition.WriteTxnMarker{Topic: t.Topic, Partition: p, ProducerID: m.ProducerID,
					ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}
				a.ask(g, i, c.Env.Topics, func(reply actor.Promise) any { w.Reply = reply; return w })
				i++
			}
		}
	}
	a.start(g, partition.DefaultRequestTimeout)
}
