package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
)

// TestAuthzTransactions: the transaction coordinator's APIs check TransactionalId WRITE
// (then TOPIC WRITE, GROUP READ) and DESCRIBE, as the table says.
func TestAuthzTransactions(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(admin)
	for _, name := range []string{"open", "closed"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	setACLs(t, admin, allow(auth.TransactionalID, "mine", auth.Write), allow(auth.TransactionalID, "mine", auth.Describe),
		allow(auth.Topic, "open", auth.Write), allow(auth.Topic, "open", auth.Describe))

	r, _ := roundtrip(t, addr, initPID(4, "theirs", 60000, -1, -1), 4)
	if code := r.(*kmsg.InitProducerIDResponse).ErrorCode; code != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("init of another id: %d", code)
	}
	r, _ = roundtrip(t, addr, initPID(4, "mine", 60000, -1, -1), 4)
	init := r.(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 {
		t.Fatalf("init: %d", init.ErrorCode)
	}
	// A denied topic fails its partitions (29) and the others are not attempted (55).
	req := addParts(3, "mine", init.ProducerID, 0, "open", 0)
	closed := kmsg.NewAddPartitionsToTxnRequestTopic()
	closed.Topic, closed.Partitions = "closed", []int32{0}
	req.Topics = append(req.Topics, closed)
	r, _ = roundtrip(t, addr, req, 3)
	codes := map[string]int16{}
	for _, tp := range r.(*kmsg.AddPartitionsToTxnResponse).Topics {
		codes[tp.Topic] = tp.Partitions[0].ErrorCode
	}
	if codes["closed"] != kerr.TopicAuthorizationFailed.Code || codes["open"] != kerr.OperationNotAttempted.Code {
		t.Fatalf("add with a denied topic: %v", codes)
	}
	r, _ = roundtrip(t, addr, addParts(3, "mine", init.ProducerID, 0, "open", 0), 3)
	if code := r.(*kmsg.AddPartitionsToTxnResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("add: %d", code)
	}
	// AddOffsetsToTxn needs GROUP READ.
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = "mine", init.ProducerID, 0, "g"
	r, _ = roundtrip(t, addr, ao, 3)
	if code := r.(*kmsg.AddOffsetsToTxnResponse).ErrorCode; code != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("add offsets without group READ: %d", code)
	}
	// v4 is the brokers': CLUSTER_ACTION.
	v4 := kmsg.NewPtrAddPartitionsToTxnRequest()
	r, _ = roundtrip(t, addr, v4, 4)
	if code := r.(*kmsg.AddPartitionsToTxnResponse).ErrorCode; code != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("v4 without CLUSTER_ACTION: %d", code)
	}
	// DescribeTransactions: a denied id is 53 in its place.
	d := kmsg.NewPtrDescribeTransactionsRequest()
	d.TransactionalIDs = []string{"theirs", "mine"}
	r, _ = roundtrip(t, addr, d, 0)
	sts := r.(*kmsg.DescribeTransactionsResponse).TransactionStates
	if len(sts) != 2 || sts[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code || sts[1].ErrorCode != 0 || sts[1].State != "Ongoing" {
		t.Fatalf("describe: %+v", sts)
	}
	r, _ = roundtrip(t, addr, endTxn(3, "theirs", 1, 0, false), 3)
	if code := r.(*kmsg.EndTxnResponse).ErrorCode; code != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("end of another id: %d", code)
	}
	r, _ = roundtrip(t, addr, endTxn(3, "mine", init.ProducerID, 0, false), 3)
	if code := r.(*kmsg.EndTxnResponse).ErrorCode; code != 0 {
		t.Fatalf("abort: %d", code)
	}
}
