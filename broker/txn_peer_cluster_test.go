package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/actors/group"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/cluster"
	"kaas/internal/testwait"
)

// sideAnswer calls side with a promise and waits for its answer (the remote path
// resolves it on the inter-broker client's goroutine).
func sideAnswer(t *testing.T, side func(reply actor.Promise)) any {
	t.Helper()
	ch := make(chan any, 1)
	side(actor.PromiseFunc(func(v any) { ch <- v }))
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("no answer from the side")
		return nil
	}
}

// The coordinator's sides in a cluster: a marker for a partition another broker leads,
// and the end of a group's offsets another broker coordinates, go to that broker as a
// WriteTxnMarkers over the inter-broker client and come back as the partition's and the
// group's answers.
func TestClusterTxnSidesReachOtherBrokers(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	createTopic(t, a.Addr(), "tm", 4)

	// A partition b leads, as a names it.
	onB := int32(-1)
	ctx := context.Background()
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		md, err := kadm.NewClient(directClient(t, a.Addr())).Metadata(ctx, "tm")
		if err != nil {
			return err
		}
		for _, p := range md.Topics["tm"].Partitions {
			if p.Leader == 1 {
				onB = p.Partition
				return nil
			}
		}
		return fmt.Errorf("no partition of tm led by broker 1 yet")
	})

	sides := a.ClusterTxnSides()
	marker := func(epoch int16, coordEpoch int32) int16 {
		v := sideAnswer(t, func(reply actor.Promise) {
			// The remote path sends nothing through ctx.
			sides.WriteMarker(nil, txn.Marker{Topic: "tm", Partition: onB, ProducerID: 4242, ProducerEpoch: epoch,
				Commit: true, CoordinatorEpoch: coordEpoch}, reply)
		})
		r, ok := v.(*partition.TxnMarkerWritten)
		if !ok {
			t.Fatalf("marker answer %T, want *partition.TxnMarkerWritten", v)
		}
		if code, ok := sides.Code(v); !ok || code != r.ErrorCode {
			t.Fatalf("Code(%+v) = %d, %v", r, code, ok)
		}
		return r.ErrorCode
	}
	// Until b leads the partition (a's metadata can name b a moment before b has opened
	// it), the marker is answered NOT_LEADER_OR_FOLLOWER, which the coordinator retries.
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		switch code := marker(5, 3); code {
		case 0:
			return nil
		case kerr.NotLeaderForPartition.Code:
			return errors.New("marker on b's partition: NOT_LEADER_OR_FOLLOWER, want 0 once b leads it")
		default:
			t.Fatalf("marker on b's partition: %v", kerr.ErrorForCode(code))
			return nil
		}
	})
	// It reached b's partition, the epochs with it: an older producer epoch, then an
	// older coordinator epoch, are refused there.
	if code := marker(4, 3); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("older producer epoch: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(code))
	}
	if code := marker(5, 2); code != kerr.TransactionCoordinatorFenced.Code {
		t.Fatalf("older coordinator epoch: %v, want TRANSACTION_COORDINATOR_FENCED", kerr.ErrorForCode(code))
	}

	// A group b coordinates: nothing pending for the producer there, 0.
	gb := groupOf(1, 2, "txg")
	v := sideAnswer(t, func(reply actor.Promise) {
		sides.EndOffsets(nil, txn.GroupMarker{Group: gb, ProducerID: 4242, ProducerEpoch: 5, Commit: true}, reply)
	})
	if r, ok := v.(*group.TxnOffsetMarked); !ok || r.ErrorCode != 0 {
		t.Fatalf("group marker on b's group: %#v, want *group.TxnOffsetMarked with 0", v)
	}

}

// A partition leader's verification of a transactional batch (conn.VerifyWithCoordinator)
// whose transactional id another broker coordinates is asked of that broker, as an
// AddPartitionsToTxn v5 over the inter-broker client. That broker's coordinator has
// never seen the transactional id: its INVALID_PRODUCER_ID_MAPPING comes back to the
// producer, as a broker alone answers a batch of an id it does not know (this broker's
// own coordinator would have answered NOT_COORDINATOR).
func TestClusterVerifyAsksTheRemoteCoordinator(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a, _, err := brokertest.StartLogged(t, cfgs[0], broker.WithTxnVerifier(conn.VerifyWithCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	createTopic(t, a.Addr(), "tv", 4)
	// A partition a leads, as a names it now (asked again at each try below: one a led
	// alone before b came moves to b).
	ledByA := func() (int32, error) {
		md, err := kadm.NewClient(directClient(t, a.Addr())).Metadata(context.Background(), "tv")
		if err != nil {
			return -1, err
		}
		for _, p := range md.Topics["tv"].Partitions {
			if p.Leader == 0 {
				return p.Partition, nil
			}
		}
		return -1, fmt.Errorf("no partition of tv led by broker 0 yet")
	}
	id := ""
	for i := 0; id == ""; i++ {
		if owner, st := a.Env().Ownership().Txn(fmt.Sprintf("tx-%d", i)); st == cluster.Elsewhere && owner == 1 {
			id = fmt.Sprintf("tx-%d", i)
		}
	}

	c := brokertest.Dial(t, a.Addr())
	corr := int32(0)
	// Until a leads the partition and both have settled the id's coordinator, the
	// produce gets the retriable NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS (a
	// coordinator not reachable yet).
	testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		onA, err := ledByA()
		if err != nil {
			return err
		}
		req := produceReq("tv", onA, -1, txnBatch(777, 0, 0, 1))
		req.SetVersion(12)
		req.TransactionID = kmsg.StringPtr(id)
		corr++
		resp := c.Roundtrip(req, corr).(*kmsg.ProduceResponse)
		switch code := resp.Topics[0].Partitions[0].ErrorCode; code {
		case kerr.InvalidProducerIDMapping.Code:
			return nil
		case kerr.NotLeaderForPartition.Code, kerr.NotEnoughReplicas.Code:
			return fmt.Errorf("transactional produce: %v, want INVALID_PRODUCER_ID_MAPPING once settled", kerr.ErrorForCode(code))
		default:
			t.Fatalf("transactional produce, coordinator on broker 1: %v, want INVALID_PRODUCER_ID_MAPPING", kerr.ErrorForCode(code))
			return nil
		}
	})
	if n := forwardedOK(a, "AddPartitionsToTxn"); n < 1 {
		t.Fatalf("AddPartitionsToTxn sent to broker 1: %v, want at least 1", n)
	}
}

// A marker for a topic created through another broker a moment ago: the broker that
// has not read the catalogue since reads it again rather than answer
// UNKNOWN_TOPIC_OR_PARTITION, which the coordinator would give the marker up on.
func TestClusterMarkerForNewTopicIsNotUnknown(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	req := kmsg.NewPtrMetadataRequest()
	r, err := directClient(t, a.Addr()).SeedBrokers()[0].Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	writer := r.(*kmsg.MetadataResponse).ControllerID
	brokers := []*broker.Broker{a, b}
	other := brokers[1-writer]
	send := peerClient(t, other.Addr())
	createTopic(t, brokers[writer].Addr(), "warm", 1)
	send(groupMarker(1, 0, "g", true)) // the connection is made before the topic

	createTopic(t, brokers[writer].Addr(), "fresh", 2)
	m := kmsg.NewPtrWriteTxnMarkersRequest()
	m.Version = 1
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed = 4243, 0, true
	mk.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "fresh", Partitions: []int32{0, 1}}}
	m.Markers = append(m.Markers, mk)
	resp := send(m).(*kmsg.WriteTxnMarkersResponse)
	for _, p := range resp.Markers[0].Topics[0].Partitions {
		if p.ErrorCode != 0 && p.ErrorCode != kerr.NotLeaderForPartition.Code {
			t.Fatalf("broker %d right after fresh was created: marker on fresh/%d: %v, want 0 or NOT_LEADER_OR_FOLLOWER",
				1-writer, p.Partition, kerr.ErrorForCode(p.ErrorCode))
		}
	}
}
