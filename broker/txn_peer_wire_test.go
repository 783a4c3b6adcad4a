package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/peer"
)

// The inter-broker side of the transaction coordinator over a real socket, on one
// broker: the requests another broker of a cluster sends (its client id starts with
// peer.ClientIDPrefix), a group travelling as the reserved topic peer.TxnGroupTopic.

// peerClient is a client that speaks as broker 7 of a cluster, to its seed itself.
func peerClient(t *testing.T, addr string) func(kmsg.Request) kmsg.Response {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID(peer.ClientIDPrefix+"7"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func(req kmsg.Request) kmsg.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
}

func groupMarker(pid int64, epoch int16, group string, commit bool) *kmsg.WriteTxnMarkersRequest {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	rt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	rt.Topic, rt.Partitions = peer.TxnGroupTopic(group), []int32{0}
	m.Topics = append(m.Topics, rt)
	req.Markers = append(req.Markers, m)
	return req
}

func markerCodeOf(r kmsg.Response) int16 {
	return r.(*kmsg.WriteTxnMarkersResponse).Markers[0].Topics[0].Partitions[0].ErrorCode
}

func txnOffsetCommit(v int16, id, group string, pid int64, epoch int16, topic string, p int32, offset int64) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = v
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = id, group, pid, epoch
	req.Generation = -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = p, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func txnOffsetCommitCode(r kmsg.Response) int16 {
	return r.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// committedOffset is group's committed offset of (topic, p), -1 when none.
func committedOffset(t *testing.T, c *brokertest.Raw, group, topic string, p int32) int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = append(req.Topics, rt)
	resp := c.Roundtrip(req, 9).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	rp := resp.Topics[0].Partitions[0]
	if rp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch %s/%d: %v", topic, p, kerr.ErrorForCode(rp.ErrorCode))
	}
	return rp.Offset
}

// A peer's WriteTxnMarkers naming a group in the reserved form ends the producer's
// pending offsets in it (a coordinator on another broker commits its transaction); the
// same name from any other client is no topic, and nothing is applied.
func TestTxnPeerGroupMarkerAppliesPendingOffsets(t *testing.T) {
	b := brokertest.StartWith(t, brokertest.Config(t))
	createTopic(t, b.Addr(), "t", 1)
	c := brokertest.Dial(t, b.Addr())
	send := peerClient(t, b.Addr())

	ip := c.Roundtrip(initPID(4, "tg", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(ip.ErrorCode))
	}
	pid, epoch := ip.ProducerID, ip.ProducerEpoch
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.Version = 3
	ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = "tg", pid, epoch, "gtx"
	if code := c.Roundtrip(ao, 2).(*kmsg.AddOffsetsToTxnResponse).ErrorCode; code != 0 {
		t.Fatalf("AddOffsetsToTxn: %v", kerr.ErrorForCode(code))
	}
	if code := txnOffsetCommitCode(c.Roundtrip(txnOffsetCommit(3, "tg", "gtx", pid, epoch, "t", 0, 42), 3)); code != 0 {
		t.Fatalf("TxnOffsetCommit: %v", kerr.ErrorForCode(code))
	}
	if off := committedOffset(t, c, "gtx", "t", 0); off != -1 {
		t.Fatalf("pending offset visible before its marker: %d", off)
	}

	// An ordinary client: the reserved name is no topic.
	if code := markerCodeOf(c.Roundtrip(groupMarker(pid, epoch, "gtx", true), 4)); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("reserved topic from a client: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}
	if off := committedOffset(t, c, "gtx", "t", 0); off != -1 {
		t.Fatalf("a client's marker applied the pending offset: %d", off)
	}

	// A peer: the group's marker.
	if code := markerCodeOf(send(groupMarker(pid, epoch, "gtx", true))); code != 0 {
		t.Fatalf("peer's group marker: %v", kerr.ErrorForCode(code))
	}
	if off := committedOffset(t, c, "gtx", "t", 0); off != 42 {
		t.Fatalf("committed offset after the peer's marker: %d, want 42", off)
	}
	// Idempotent: again, nothing pending, 0.
	if code := markerCodeOf(send(groupMarker(pid, epoch, "gtx", true))); code != 0 {
		t.Fatalf("peer's group marker again: %v", kerr.ErrorForCode(code))
	}
	// The reserved form names partition 0 only.
	bad := groupMarker(pid, epoch, "gtx", false)
	bad.Markers[0].Topics[0].Partitions = []int32{1}
	if code := markerCodeOf(send(bad)); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("reserved topic, partition 1: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}
}

func peerAddPartitions(id string, pid int64, epoch int16, verifyOnly bool, topics map[string][]int32) *kmsg.AddPartitionsToTxnRequest {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = id, pid, epoch, verifyOnly
	for topic, ps := range topics {
		rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		rt.Topic, rt.Partitions = topic, ps
		tx.Topics = append(tx.Topics, rt)
	}
	req.Transactions = append(req.Transactions, tx)
	return req
}

func peerAddCodes(r kmsg.Response) map[string]map[int32]int16 {
	resp := r.(*kmsg.AddPartitionsToTxnResponse)
	out := map[string]map[int32]int16{}
	for _, tx := range resp.Transactions {
		for _, rt := range tx.Topics {
			out[rt.Topic] = map[int32]int16{}
			for _, p := range rt.Partitions {
				out[rt.Topic][p.Partition] = p.ErrorCode
			}
		}
	}
	return out
}

// A peer's AddPartitionsToTxn v5 is another broker's verification of a write to a
// partition or group it serves: VerifyOnly=false adds the partitions (Produce v12's
// implicit add) and a group in the reserved form (TxnOffsetCommit v5's), VerifyOnly=true
// only checks them.
func TestTxnPeerAddPartitionsAddsPartitionsAndGroups(t *testing.T) {
	b := brokertest.StartWith(t, brokertest.Config(t))
	createTopic(t, b.Addr(), "t", 2)
	c := brokertest.Dial(t, b.Addr())
	send := peerClient(t, b.Addr())

	ip := c.Roundtrip(initPID(4, "tq", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(ip.ErrorCode))
	}
	pid, epoch := ip.ProducerID, ip.ProducerEpoch
	gq := peer.TxnGroupTopic("gq")

	// Before the add, a verification finds neither.
	codes := peerAddCodes(send(peerAddPartitions("tq", pid, epoch, true, map[string][]int32{"t": {0}, gq: {0}})))
	if codes["t"][0] != kerr.TransactionAbortable.Code || codes[gq][0] != kerr.TransactionAbortable.Code {
		t.Fatalf("verify before the add: %v, want TRANSACTION_ABORTABLE for both", codes)
	}
	codes = peerAddCodes(send(peerAddPartitions("tq", pid, epoch, false, map[string][]int32{"t": {0}, gq: {0}})))
	if codes["t"][0] != 0 || codes[gq][0] != 0 {
		t.Fatalf("peer's implicit add: %v, want 0 for both", codes)
	}
	st := waitTxnState(t, c, "tq", "Ongoing")
	if len(st.Topics) != 1 || st.Topics[0].Topic != "t" || len(st.Topics[0].Partitions) != 1 || st.Topics[0].Partitions[0] != 0 {
		t.Fatalf("transaction's partitions: %+v, want t/0 only (the group is no partition)", st.Topics)
	}
	codes = peerAddCodes(send(peerAddPartitions("tq", pid, epoch, true, map[string][]int32{"t": {0, 1}, gq: {0, 1}})))
	if codes["t"][0] != 0 || codes[gq][0] != 0 || codes["t"][1] != kerr.TransactionAbortable.Code ||
		codes[gq][1] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("verify after the add: %v", codes)
	}
	// The group is in the transaction: a TxnOffsetCommit v3, which only verifies, is taken.
	if code := txnOffsetCommitCode(c.Roundtrip(txnOffsetCommit(3, "tq", "gq", pid, epoch, "t", 0, 7), 2)); code != 0 {
		t.Fatalf("TxnOffsetCommit after the peer's group add: %v", kerr.ErrorForCode(code))
	}
	if code := c.Roundtrip(endTxn(3, "tq", pid, epoch, true), 3).(*kmsg.EndTxnResponse).ErrorCode; code != 0 {
		t.Fatalf("EndTxn: %v", kerr.ErrorForCode(code))
	}
	waitTxnState(t, c, "tq", "CompleteCommit")
	if off := committedOffset(t, c, "gq", "t", 0); off != 7 {
		t.Fatalf("committed offset: %d, want 7", off)
	}
	// A wrong epoch is the producer's code, for the group too.
	codes = peerAddCodes(send(peerAddPartitions("tq", pid, epoch+5, false, map[string][]int32{gq: {0}})))
	if codes[gq][0] != kerr.ProducerFenced.Code {
		t.Fatalf("stale epoch: %v, want PRODUCER_FENCED", codes)
	}
}

// A peer's abort marker is written straight to the partition: the sender is the
// transaction's coordinator, and this broker's coordinator (which an operator's abort
// goes through) is not asked, so a transaction it holds stays as it is.
func TestTxnPeerAbortMarkerBypassesLocalCoordinator(t *testing.T) {
	b := brokertest.StartWith(t, brokertest.Config(t))
	createTopic(t, b.Addr(), "t", 1)
	c := brokertest.Dial(t, b.Addr())
	send := peerClient(t, b.Addr())

	ip := c.Roundtrip(initPID(4, "ta", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if ip.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(ip.ErrorCode))
	}
	pid, epoch := ip.ProducerID, ip.ProducerEpoch
	req := produceReq("t", 0, -1, txnBatch(pid, epoch, 0, 1))
	req.SetVersion(12)
	req.TransactionID = kmsg.StringPtr("ta")
	if code := c.Roundtrip(req, 2).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("transactional produce: %v", kerr.ErrorForCode(code))
	}
	waitTxnState(t, c, "ta", "Ongoing")

	m := kmsg.NewPtrWriteTxnMarkersRequest()
	m.Version = 1
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed = pid, epoch, false
	mk.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "t", Partitions: []int32{0}}}
	m.Markers = append(m.Markers, mk)
	if code := markerCodeOf(send(m)); code != 0 {
		t.Fatalf("peer's abort marker: %v", kerr.ErrorForCode(code))
	}
	if st := describeTxn(c, "ta"); st.State != "Ongoing" || st.ProducerEpoch != epoch {
		t.Fatalf("after a peer's abort marker the local coordinator has %s at epoch %d, want Ongoing at %d (untouched)",
			st.State, st.ProducerEpoch, epoch)
	}
}
