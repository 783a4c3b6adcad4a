package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/cluster"
	"kaas/logs"
	"kaas/peer"
)

// clusterTxnSides is the transaction coordinator's Sides in a cluster: a partition this
// broker leads (or whose leader no view names now) and a group it coordinates are
// reached as txnSides reaches them, through the local topics and groups managers; a
// partition another broker leads, and a group another broker coordinates, through a
// WriteTxnMarkers v1 with that one marker sent to that broker over the inter-broker
// client (the group as the reserved topic peer.TxnGroupTopic, partition 0), the reply
// resolved from its answer on the client's goroutine. The coordinator epoch travels
// unchanged.
//
// Every failure to reach the other broker is a retriable code, so the coordinator sends
// the marker again (txn's outcomeOf): the request failed or timed out, or the answer
// does not name the partition: REQUEST_TIMED_OUT; no inter-broker client (a SASL
// listener without credentials): NOT_LEADER_OR_FOLLOWER for a partition,
// COORDINATOR_NOT_AVAILABLE for a group, logged at most once a minute; a group no broker
// serves now: COORDINATOR_NOT_AVAILABLE, or COORDINATOR_LOAD_IN_PROGRESS while this
// broker waits for a peer to release it. The leader's own answers are retriable for a
// partition that moved (NOT_LEADER_OR_FOLLOWER, its topics manager re-reading the
// catalogue before it answers UNKNOWN_TOPIC_OR_PARTITION) and for a group that moved
// (NOT_COORDINATOR).
func (b *Broker) clusterTxnSides() txn.Sides {
	local := txnSides(b.env.Topics, b.env.Groups)
	noPeers := logs.NewLimiter(time.Minute)
	state := func() *cluster.State {
		if b.cluster == nil || b.cluster.ctl == nil {
			return nil
		}
		return b.cluster.ctl.State()
	}
	// send sends m to broker to and calls then with the answer's code, or with sent
	// false when there is no inter-broker client to send it with.
	send := func(to int32, m txn.Marker, then func(code int16, sent bool)) {
		if b.peers == nil {
			noPeers.Event(b.log.Warn()).Int32("peer", to).Msg("txn_marker_not_sent_no_inter_broker_client")
			then(0, false)
			return
		}
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		req.Version = 1
		rm := kmsg.NewWriteTxnMarkersRequestMarker()
		rm.ProducerID, rm.ProducerEpoch, rm.Committed, rm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
		rt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		rt.Topic, rt.Partitions = m.Topic, []int32{m.Partition}
		rm.Topics = append(rm.Topics, rt)
		req.Markers = append(req.Markers, rm)
		b.peers.Send(to, req, func(r kmsg.Response, err error) {
			then(markerCode(r, err, m.ProducerID, m.Topic, m.Partition), true)
		})
	}
	return txn.Sides{
		WriteMarker: func(ctx actor.Context, m txn.Marker, reply actor.Promise) {
			leader := int32(-1)
			if st := state(); st != nil {
				leader = st.PartitionLeader(m.Topic, m.Partition)
			}
			if leader < 0 || leader == b.cfg.NodeID {
				local.WriteMarker(ctx, m, reply)
				return
			}
			send(leader, m, func(code int16, sent bool) {
				if !sent {
					code = kerr.NotLeaderForPartition.Code
				}
				reply.Resolve(&partition.TxnMarkerWritten{ErrorCode: code})
			})
		},
		EndOffsets: func(ctx actor.Context, g txn.GroupMarker, reply actor.Promise) {
			owner, st := state().Group(g.Group)
			switch st {
			case cluster.Mine:
				local.EndOffsets(ctx, g, reply)
				return
			case cluster.Unavailable:
				reply.Resolve(&group.TxnOffsetMarked{ErrorCode: kerr.CoordinatorNotAvailable.Code})
				return
			case cluster.Waiting:
				reply.Resolve(&group.TxnOffsetMarked{ErrorCode: kerr.CoordinatorLoadInProgress.Code})
				return
			}
			m := txn.Marker{Topic: peer.TxnGroupTopic(g.Group), Partition: 0, ProducerID: g.ProducerID,
				ProducerEpoch: g.ProducerEpoch, Commit: g.Commit, CoordinatorEpoch: -1}
			send(owner, m, func(code int16, sent bool) {
				if !sent {
					code = kerr.CoordinatorNotAvailable.Code
				}
				reply.Resolve(&group.TxnOffsetMarked{ErrorCode: code})
			})
		},
		Code: local.Code,
	}
}

// markerCode is the code of one marker's partition in a peer's WriteTxnMarkers answer:
// REQUEST_TIMED_OUT (retriable) when there is no answer or it does not name it.
func markerCode(r kmsg.Response, err error, pid int64, topic string, p int32) int16 {
	resp, _ := r.(*kmsg.WriteTxnMarkersResponse)
	if err != nil || resp == nil {
		return kerr.RequestTimedOut.Code
	}
	for _, m := range resp.Markers {
		if m.ProducerID != pid {
			continue
		}
		for _, t := range m.Topics {
			if t.Topic != topic {
				continue
			}
			for _, rp := range t.Partitions {
				if rp.Partition == p {
					return rp.ErrorCode
				}
			}
		}
	}
	return kerr.RequestTimedOut.Code
}
