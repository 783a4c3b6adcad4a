package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/actors/txn"
)

// WriteTxnMarkers (key 27), v0–v1: a transaction coordinator ends producers'
// transactions on the partitions led here (KIP-98), and an operator aborts a hanging
// one (KIP-664). Authorized by CLUSTER: CLUSTER_ACTION.
//
//	v1: flexible.
//
// Each partition's marker goes to the topics manager, which routes it to the partition
// actor (partition.WriteTxnMarker); its code is answered once the marker is fsynced.
// An abort goes to the transaction coordinator first, when the broker has one
// (txn.AdminAbort): a transaction it holds Ongoing is aborted through it, so that its
// state and the partitions agree; it writes the other partitions' markers as above.
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
	// One answer per partition, or, for an abort the coordinator is asked about, one per
	// marker (its codes by partition).
	viaTxns := func(m kmsg.WriteTxnMarkersRequestMarker) bool { return !m.Committed && c.Env.Txns != nil }
	n := 0
	for _, m := range req.Markers {
		if viaTxns(m) {
			n++
			continue
		}
		for _, t := range m.Topics {
			n += len(t.Partitions)
		}
	}
	a := c.conn
	g := a.newGather(c, n, func(int) any { return nil },
		func(results []any) kmsg.Response {
			var flat []int16
			i := 0
			for _, m := range req.Markers {
				if viaTxns(m) {
					r, _ := results[i].(*txn.AdminAborted)
					i++
					for _, t := range m.Topics {
						for _, p := range t.Partitions {
							code := kerr.RequestTimedOut.Code
							if r != nil {
								if c, ok := r.Codes[t.Topic][p]; ok {
									code = c
								}
							}
							flat = append(flat, code)
						}
					}
					continue
				}
				for _, t := range m.Topics {
					for range t.Partitions {
						code := kerr.RequestTimedOut.Code
						if r, ok := results[i].(*partition.TxnMarkerWritten); ok {
							code = r.ErrorCode
						}
						flat = append(flat, code)
						i++
					}
				}
			}
			return respond(flat)
		})
	i := 0
	for _, m := range req.Markers {
		if viaTxns(m) {
			ab := &txn.AdminAbort{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch,
				CoordinatorEpoch: m.CoordinatorEpoch, Partitions: map[string][]int32{}}
			for _, t := range m.Topics {
				ab.Partitions[t.Topic] = append(ab.Partitions[t.Topic], t.Partitions...)
			}
			a.ask(g, i, c.Env.Txns, func(reply actor.Promise) any { ab.Reply = reply; return ab })
			i++
			continue
		}
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
