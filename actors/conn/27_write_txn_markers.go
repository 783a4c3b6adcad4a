package conn

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/peer"
)

// WriteTxnMarkers (key 27), v0–v1: a transaction coordinator ends producers'
// transactions on the partitions led here (KIP-98), and an operator aborts a hanging
// one (KIP-664). Authorized by CLUSTER: CLUSTER_ACTION.
//
//	v1: flexible.
//
// Each partition's marker goes to the topics manager, which routes it to the partition
// actor (partition.WriteTxnMarker); its code is answered once the marker is fsynced.
// An operator's abort goes to the transaction coordinator first, when the broker has one
// (txn.AdminAbort): a transaction it holds Ongoing is aborted through it, so that its
// state and the partitions agree; it writes the other partitions' markers as above.
// A partition that does not answer in time is REQUEST_TIMED_OUT (the coordinator
// retries: markers are idempotent).
//
// From a peer (its client id starts with peer.ClientIDPrefix: a transaction coordinator
// on another broker of the cluster) every marker, abort or commit, is written straight
// to the partitions, never through this broker's coordinator: the sender is the
// coordinator. A topic named in the reserved group form (peer.TxnGroupTopic, partition
// 0) is the end of the producer's pending offsets in a group this broker coordinates:
// group.TxnOffsetMarker to the groups manager, its code the partition's. The same name
// from any other client is UNKNOWN_TOPIC_OR_PARTITION, what Apache answers for a topic
// it does not have (no topic can have that name).
func init() { register(27, 0, 1, handleWriteTxnMarkers) }

// markerSlot is how one partition of a WriteTxnMarkers is answered.
type markerSlot struct {
	kind int
	i    int // the gather's answer it reads (markerAbort: the marker's AdminAbort)
	code int16
}

const (
	markerFixed     = iota // code, asked of no one
	markerPartition        // a *partition.TxnMarkerWritten
	markerGroup            // a *group.TxnOffsetMarked
	markerAbort            // the coordinator's *txn.AdminAborted, by topic and partition
)

func handleWriteTxnMarkers(c *Call) {
	req := c.Req.(*kmsg.WriteTxnMarkersRequest)
	respond := func(codes []int16) kmsg.Response {
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
					if codes == nil {
						rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					} else {
						rp.ErrorCode = codes[k]
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
	fromPeer := strings.HasPrefix(c.ClientID, peer.ClientIDPrefix)
	// An operator's abort is asked of the coordinator, one answer per marker (its codes
	// by partition), unless the marker names only reserved topics.
	viaTxns := func(m kmsg.WriteTxnMarkersRequestMarker) bool {
		if fromPeer || m.Committed || c.Env.Txns == nil {
			return false
		}
		for _, t := range m.Topics {
			if _, reserved := peer.TxnGroupOf(t.Topic); !reserved && len(t.Partitions) > 0 {
				return true
			}
		}
		return false
	}
	// The plan: a slot per partition, in request order, and the asks.
	var slots []markerSlot
	type ask struct {
		to  *actor.PID
		msg func(actor.Promise) any
	}
	var asks []ask
	for _, m := range req.Markers {
		abort := -1
		if viaTxns(m) {
			abort = len(asks)
			ab := &txn.AdminAbort{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch,
				CoordinatorEpoch: m.CoordinatorEpoch, Partitions: map[string][]int32{}}
			for _, t := range m.Topics {
				if _, reserved := peer.TxnGroupOf(t.Topic); !reserved {
					ab.Partitions[t.Topic] = append(ab.Partitions[t.Topic], t.Partitions...)
				}
			}
			asks = append(asks, ask{c.Env.Txns, func(reply actor.Promise) any { ab.Reply = reply; return ab }})
		}
		for _, t := range m.Topics {
			g, reserved := peer.TxnGroupOf(t.Topic)
			for _, p := range t.Partitions {
				switch {
				case reserved && (!fromPeer || p != 0):
					slots = append(slots, markerSlot{kind: markerFixed, code: kerr.UnknownTopicOrPartition.Code})
				case reserved && c.Env.Groups == nil:
					slots = append(slots, markerSlot{kind: markerFixed, code: kerr.CoordinatorNotAvailable.Code})
				case reserved:
					gm := &group.TxnOffsetMarker{Group: g, ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch,
						Commit: m.Committed}
					slots = append(slots, markerSlot{kind: markerGroup, i: len(asks)})
					asks = append(asks, ask{c.Env.Groups, func(reply actor.Promise) any { gm.Reply = reply; return gm }})
				case abort >= 0:
					slots = append(slots, markerSlot{kind: markerAbort, i: abort})
				default:
					w := &partition.WriteTxnMarker{Topic: t.Topic, Partition: p, ProducerID: m.ProducerID,
						ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}
					slots = append(slots, markerSlot{kind: markerPartition, i: len(asks)})
					asks = append(asks, ask{c.Env.Topics, func(reply actor.Promise) any { w.Reply = reply; return w }})
				}
			}
		}
	}
	a := c.conn
	g := a.newGather(c, len(asks), func(int) any { return nil },
		func(results []any) kmsg.Response {
			codes := make([]int16, 0, len(slots))
			k := 0
			for _, m := range req.Markers {
				for _, t := range m.Topics {
					for _, p := range t.Partitions {
						s := slots[k]
						k++
						code := kerr.RequestTimedOut.Code // no answer in time: the coordinator retries
						switch s.kind {
						case markerFixed:
							code = s.code
						case markerPartition:
							if r, ok := results[s.i].(*partition.TxnMarkerWritten); ok {
								code = r.ErrorCode
							}
						case markerGroup:
							if r, ok := results[s.i].(*group.TxnOffsetMarked); ok {
								code = r.ErrorCode
							}
						case markerAbort:
							if r, ok := results[s.i].(*txn.AdminAborted); ok {
								if rc, ok := r.Codes[t.Topic][p]; ok {
									code = rc
								}
							}
						}
						codes = append(codes, code)
					}
				}
			}
			return respond(codes)
		})
	for i, q := range asks {
		a.ask(g, i, q.to, q.msg)
	}
	a.start(g, partition.DefaultRequestTimeout)
}
