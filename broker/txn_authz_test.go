package broker_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
)

// The transactional data path's authorization (docs/security.md): WriteTxnMarkers needs
// CLUSTER_ACTION on the cluster, DescribeProducers READ on the topic, and a Produce with a
// transactional id WRITE on it.
func TestTransactionalDataPathAuthorization(t *testing.T) {
	b, admin := authzBroker(t)
	anon := b.ListenerAddr("PLAINTEXT")
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "t", 1, 1
	create.Topics = append(create.Topics, ct)
	if r, err := create.RequestWith(context.Background(), admin); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	markers := func() *kmsg.WriteTxnMarkersRequest {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = 1, 0, false
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = "t", []int32{0}
		m.Topics = append(m.Topics, mt)
		req.Markers = append(req.Markers, m)
		return req
	}
	producers := func() *kmsg.DescribeProducersRequest {
		req := kmsg.NewPtrDescribeProducersRequest()
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic, rt.Partitions = "t", []int32{0}
		req.Topics = append(req.Topics, rt)
		return req
	}
	produce := func() *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.TransactionID = kmsg.StringPtr("tx")
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = []byte{} // never read: refused before
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return req
	}

	setACLs(t, admin, allow(auth.Topic, "t", auth.Write))
	for _, v := range []int16{0, 1} {
		r := request[*kmsg.WriteTxnMarkersResponse](t, anon, markers(), v)
		if code := r.Markers[0].Topics[0].Partitions[0].ErrorCode; code != kerr.ClusterAuthorizationFailed.Code {
			t.Fatalf("WriteTxnMarkers v%d without CLUSTER_ACTION: %v", v, kerr.ErrorForCode(code))
		}
	}
	if r := request[*kmsg.DescribeProducersResponse](t, anon, producers(), 0); r.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("DescribeProducers without READ: %+v", r)
	}
	if r := request[*kmsg.ProduceResponse](t, anon, produce(), 9); r.Topics[0].Partitions[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transactional Produce without WRITE on the transactional id: %+v", r)
	}

	setACLs(t, admin, allow(auth.Cluster, auth.ClusterName, auth.ClusterAction), allow(auth.Topic, "t", auth.Read))
	r := request[*kmsg.WriteTxnMarkersResponse](t, anon, markers(), 1)
	if code := r.Markers[0].Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("WriteTxnMarkers with CLUSTER_ACTION (nothing open: answered 0): %v", kerr.ErrorForCode(code))
	}
	if r := request[*kmsg.DescribeProducersResponse](t, anon, producers(), 0); r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("DescribeProducers with READ: %+v", r)
	}
}
