package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// The transaction coordinator over a real socket (a broker alone): kmsg requests for
// the main paths, codes by version, and the state kept across a restart.

func initPID(v int16, id string, timeoutMs int32, pid int64, epoch int16) *kmsg.InitProducerIDRequest {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(v)
	req.TransactionalID = kmsg.StringPtr(id)
	req.TransactionTimeoutMillis = timeoutMs
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return req
}

func addParts(v int16, id string, pid int64, epoch int16, topic string, parts ...int32) *kmsg.AddPartitionsToTxnRequest {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.SetVersion(v)
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
	t := kmsg.NewAddPartitionsToTxnRequestTopic()
	t.Topic, t.Partitions = topic, parts
	req.Topics = append(req.Topics, t)
	return req
}

func endTxn(v int16, id string, pid int64, epoch int16, commit bool) *kmsg.EndTxnRequest {
	req := kmsg.NewPtrEndTxnRequest()
	req.SetVersion(v)
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, commit
	return req
}

func describeTxn(c *brokertest.Raw, id string) kmsg.DescribeTransactionsResponseTransactionState {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	return c.Roundtrip(req, 1).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]
}

// waitTxnState polls DescribeTransactions until id is in state (the markers and the
// Complete* follow the answer to EndTxn).
func waitTxnState(t *testing.T, c *brokertest.Raw, id, state string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	var st kmsg.DescribeTransactionsResponseTransactionState
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st = describeTxn(c, id); st.State != state {
			return fmt.Errorf("%s: state %q (error %d), want %s", id, st.State, st.ErrorCode, state)
		}
		return nil
	})
	return st
}

func TestTxnCoordinatorWire(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.StartWith(t, cfg)
	createTopic(t, b.Addr(), "t", 3)
	c := brokertest.Dial(t, b.Addr())

	// Argument checks.
	for _, tc := range []struct {
		id      string
		timeout int32
		want    int16
	}{
		{"", 1000, kerr.InvalidRequest.Code},
		{"w", 0, kerr.InvalidTransactionTimeout.Code},
		{"w", 900001, kerr.InvalidTransactionTimeout.Code},
	} {
		r := c.Roundtrip(initPID(4, tc.id, tc.timeout, -1, -1), 1).(*kmsg.InitProducerIDResponse)
		if r.ErrorCode != tc.want {
			t.Fatalf("init %q %d: %d, want %d", tc.id, tc.timeout, r.ErrorCode, tc.want)
		}
	}

	init := c.Roundtrip(initPID(4, "w", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 || init.ProducerEpoch != 0 || init.ProducerID < 0 {
		t.Fatalf("init: %+v", init)
	}
	pid := init.ProducerID
	// An idempotent producer's id never collides with a transactional one.
	idem := kmsg.NewPtrInitProducerIDRequest()
	if r := c.Roundtrip(idem, 1).(*kmsg.InitProducerIDResponse); r.ProducerID == pid {
		t.Fatalf("idempotent producer got the transactional id's producer id %d", pid)
	}

	add := c.Roundtrip(addParts(3, "w", pid, 0, "t", 0, 1), 1).(*kmsg.AddPartitionsToTxnResponse)
	for _, p := range add.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("add: partition %d error %d", p.Partition, p.ErrorCode)
		}
	}
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.SetVersion(3)
	ao.TransactionalID, ao.ProducerID, ao.ProducerEpoch, ao.Group = "w", pid, 0, "g"
	if r := c.Roundtrip(ao, 1).(*kmsg.AddOffsetsToTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("add offsets: %d", r.ErrorCode)
	}
	// A stale epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
	if r := c.Roundtrip(addParts(1, "w", pid, 5, "t", 2), 1).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("v1 stale epoch: %d", r.Topics[0].Partitions[0].ErrorCode)
	}
	if r := c.Roundtrip(addParts(3, "w", pid, 5, "t", 2), 1).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("v3 stale epoch: %d", r.Topics[0].Partitions[0].ErrorCode)
	}

	// A partition the catalogue does not hold: nothing added.
	if r := c.Roundtrip(addParts(3, "w", pid, 0, "nope", 0), 1).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %d", r.Topics[0].Partitions[0].ErrorCode)
	}

	st := describeTxn(c, "w")
	if st.ErrorCode != 0 || st.State != "Ongoing" || st.ProducerID != pid || len(st.Topics) != 1 || len(st.Topics[0].Partitions) != 2 {
		t.Fatalf("describe: %+v", st)
	}
	if st := describeTxn(c, "unknown"); st.ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Fatalf("describe unknown: %d", st.ErrorCode)
	}

	// v4 verification (the brokers' form).
	v4 := kmsg.NewPtrAddPartitionsToTxnRequest()
	v4.SetVersion(4)
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = "w", pid, 0, true
	tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	tt.Topic, tt.Partitions = "t", []int32{1, 9}
	tx.Topics = append(tx.Topics, tt)
	v4.Transactions = append(v4.Transactions, tx)
	vr := c.Roundtrip(v4, 1).(*kmsg.AddPartitionsToTxnResponse)
	codes := map[int32]int16{}
	for _, p := range vr.Transactions[0].Topics[0].Partitions {
		codes[p.Partition] = p.ErrorCode
	}
	if codes[1] != 0 || codes[9] != kerr.InvalidTxnState.Code { // v4 does not know TRANSACTION_ABORTABLE
		t.Fatalf("verify: %v", codes)
	}

	lt := kmsg.NewPtrListTransactionsRequest()
	lt.SetVersion(1)
	lt.StateFilters = []string{"Ongoing", "Bogus"}
	lt.DurationFilterMillis = -1
	lr := c.Roundtrip(lt, 1).(*kmsg.ListTransactionsResponse)
	if len(lr.TransactionStates) != 1 || lr.TransactionStates[0].TransactionalID != "w" || len(lr.UnknownStateFilters) != 1 {
		t.Fatalf("list: %+v", lr)
	}

	if r := c.Roundtrip(endTxn(3, "w", pid, 0, true), 1).(*kmsg.EndTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("commit: %d", r.ErrorCode)
	}
	waitTxnState(t, c, "w", "CompleteCommit")
	if r := c.Roundtrip(endTxn(3, "w", pid, 0, true), 1).(*kmsg.EndTxnResponse); r.ErrorCode != 0 {
		t.Fatalf("retried commit: %d", r.ErrorCode)
	}
	if r := c.Roundtrip(endTxn(1, "w", pid, 3, true), 1).(*kmsg.EndTxnResponse); r.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("v1 stale epoch: %d", r.ErrorCode)
	}
	// KIP-360: the client names its pid and epoch; the epoch is bumped.
	init = c.Roundtrip(initPID(4, "w", 60000, pid, 0), 1).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 || init.ProducerID != pid || init.ProducerEpoch != 1 {
		t.Fatalf("re-init: %+v", init)
	}
	// TV2: an empty abort bumps the epoch and names it.
	if r := c.Roundtrip(endTxn(5, "w", pid, 1, false), 1).(*kmsg.EndTxnResponse); r.ErrorCode != 0 || r.ProducerID != pid || r.ProducerEpoch != 2 {
		t.Fatalf("v5 empty abort: %+v", r)
	}
	waitTxnState(t, c, "w", "CompleteAbort")

	// Restart: the state is kept.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, cfg)
	c = brokertest.Dial(t, b.Addr())
	st = describeTxn(c, "w")
	if st.ErrorCode != 0 || st.State != "CompleteAbort" || st.ProducerID != pid || st.ProducerEpoch != 2 {
		t.Fatalf("after restart: %+v", st)
	}
	if r := c.Roundtrip(endTxn(5, "w", pid, 1, false), 1).(*kmsg.EndTxnResponse); r.ErrorCode != 0 || r.ProducerEpoch != 2 {
		t.Fatalf("v5 retried abort after restart: %+v", r)
	}
}

// TestTxnTimeoutFencesStalledProducer: a transaction left Ongoing past its timeout is
// aborted within the timeout + 1 s, and its producer is fenced.
func TestTxnTimeoutFencesStalledProducer(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "t", 1)
	c := brokertest.Dial(t, b.Addr())
	init := c.Roundtrip(initPID(4, "stall", 500, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	start := time.Now()
	c.Roundtrip(addParts(3, "stall", init.ProducerID, 0, "t", 0), 1)
	st := waitTxnState(t, c, "stall", "CompleteAbort")
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("aborted after %v (timeout 500 ms)", took)
	}
	if st.ProducerEpoch != 1 {
		t.Fatalf("epoch after the timeout: %d, want 1 (bumped)", st.ProducerEpoch)
	}
	if r := c.Roundtrip(endTxn(3, "stall", init.ProducerID, 0, true), 1).(*kmsg.EndTxnResponse); r.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("stalled producer's commit: %d", r.ErrorCode)
	}
}

// TestTxnAdminClient: kadm finds the coordinator (FindCoordinator key type 1) and reads
// DescribeTransactions and ListTransactions as an operator's tool would.
func TestTxnAdminClient(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "t", 2)
	c := brokertest.Dial(t, b.Addr())
	init := c.Roundtrip(initPID(4, "adm", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if add := c.Roundtrip(addParts(3, "adm", init.ProducerID, 0, "t", 1), 1).(*kmsg.AddPartitionsToTxnResponse); add.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("add: %d", add.Topics[0].Partitions[0].ErrorCode)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := adm.DescribeTransactions(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	d := ds["adm"]
	if d.Err != nil || d.State != "Ongoing" || d.ProducerID != init.ProducerID || len(d.Topics["t"]) != 1 {
		t.Fatalf("describe: %+v", d)
	}
	ls, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ls.TransactionalIDs(); len(got) != 1 || got[0] != "adm" {
		t.Fatalf("list: %v", got)
	}
}

// TestTxnVersionFeatureAdvertised: a broker with a transaction coordinator finalizes
// transaction.version 2 in ApiVersions v3+, the only way franz-go learns to use KIP-890
// part 2 (Produce v12's implicit add, EndTxn v5's epoch bump); v0–2 carry no features.
func TestTxnVersionFeatureAdvertised(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version, req.ClientSoftwareName, req.ClientSoftwareVersion = 3, "kaas-test", "1"
	r := c.Roundtrip(req, 1).(*kmsg.ApiVersionsResponse)
	var found bool
	for _, f := range r.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel == 2 {
			found = true
		}
	}
	if !found || r.FinalizedFeaturesEpoch < 0 {
		t.Fatalf("ApiVersions v3: finalized features %+v (epoch %d), want transaction.version 2", r.FinalizedFeatures, r.FinalizedFeaturesEpoch)
	}
	old := kmsg.NewPtrApiVersionsRequest()
	old.Version = 2
	if r := c.Roundtrip(old, 2).(*kmsg.ApiVersionsResponse); len(r.FinalizedFeatures) != 0 {
		t.Fatalf("ApiVersions v2 carries features: %+v", r.FinalizedFeatures)
	}
}
