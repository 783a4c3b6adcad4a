package partition_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

// The transactional data path over the wire: transactional batches verified through a
// stand-in coordinator (conn.Env.VerifyTxn), markers through WriteTxnMarkers, and what
// read_committed Fetch, ListOffsets and DescribeProducers answer.

// fakeCoordinator answers every verification with 0, after before (if set) ran.
type fakeCoordinator struct {
	mu    sync.Mutex
	asked []conn.TxnVerify
	// before runs on its own goroutine before the answer, after after it; call counts
	// the verifications from 1.
	before func(call int, v *conn.TxnVerify)
	after  func(call int, v *conn.TxnVerify)
}

func (f *fakeCoordinator) verify(_ *conn.Call, v *conn.TxnVerify, reply actor.Promise) {
	f.mu.Lock()
	f.asked = append(f.asked, *v)
	call := len(f.asked)
	before, after := f.before, f.after
	f.mu.Unlock()
	answer := func() {
		codes := map[string]map[int32]int16{}
		for t, ps := range v.Partitions {
			codes[t] = map[int32]int16{}
			for _, p := range ps {
				codes[t][p] = 0
			}
		}
		reply.Resolve(&conn.TxnVerified{Codes: codes})
	}
	if before == nil {
		answer()
		return
	}
	go func() {
		before(call, v)
		answer()
		if after != nil {
			after(call, v)
		}
	}()
}

func (f *fakeCoordinator) asks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asked)
}

func startTxnBroker(t *testing.T, c config.Config, f *fakeCoordinator) *broker.Broker {
	t.Helper()
	b, _, err := brokertest.StartLogged(t, c, broker.WithTxnVerifier(f.verify))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func createTopic(t *testing.T, r *brokertest.Raw, topic string, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp := r.Roundtrip(req, 1).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create %s: %v", topic, kerr.ErrorForCode(code))
	}
}

// txnBatch is a producer's batch of values: transactional when txn is set.
func txnBatch(pid int64, epoch int16, seq int32, txn bool, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	attrs := int16(0)
	if txn {
		attrs = 0x10
	}
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func produceTxn(t *testing.T, r *brokertest.Raw, version int16, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.TransactionID = kmsg.StringPtr("tx")
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return r.Roundtrip(req, 1).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

func writeMarker(t *testing.T, r *brokertest.Raw, topic string, partition int32, pid int64, epoch int16, commit bool, coordEpoch int32) int16 {
	t.Helper()
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.SetVersion(1)
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = pid, epoch, commit, coordEpoch
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = topic, []int32{partition}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp := r.Roundtrip(req, 2).(*kmsg.WriteTxnMarkersResponse)
	return resp.Markers[0].Topics[0].Partitions[0].ErrorCode
}

// fetchIso fetches partition 0 of topic from offset at an isolation level.
func fetchIso(t *testing.T, r *brokertest.Raw, topic string, offset int64, committed bool) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = offset, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return r.Roundtrip(req, 3).(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

func listLatest(t *testing.T, r *brokertest.Raw, topic string, committed bool) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(5)
	req.ReplicaID = -1
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp, rp.CurrentLeaderEpoch = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p := r.Roundtrip(req, 4).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("list offsets: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	return p.Offset
}

// recordValues decodes the values of every data batch in recs, and the offsets of the
// control batches.
func recordValues(t *testing.T, recs []byte) (values []string, controls []int64) {
	t.Helper()
	for len(recs) >= 61 {
		var b kmsg.RecordBatch
		n := int(binary.BigEndian.Uint32(recs[8:])) + 12
		if err := b.ReadFrom(recs[:n]); err != nil {
			t.Fatal(err)
		}
		recs = recs[n:]
		if b.Attributes&0x20 != 0 {
			controls = append(controls, b.FirstOffset)
			continue
		}
		rs := b.Records
		for range b.NumRecords {
			var r kmsg.Record
			length, k := binary.Varint(rs)
			if err := r.ReadFrom(rs[:k+int(length)]); err != nil {
				t.Fatal(err)
			}
			rs = rs[k+int(length):]
			values = append(values, string(r.Value))
		}
	}
	return values, controls
}

func TestTxnMarkersDecideWhatReadCommittedSees(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "tx", nil)
	const pid = 7000

	// An open transaction holds the LSO at its first offset.
	if p := produceTxn(t, r, 9, "tx", txnBatch(pid, 0, 0, true, "a1", "a2")); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("transactional produce: %v at %d", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	if f.asks() != 1 {
		t.Fatalf("coordinator asked %d times, want 1", f.asks())
	}
	// The next batch of the same transaction needs no verification.
	if p := produceTxn(t, r, 9, "tx", txnBatch(pid, 0, 2, true, "a3")); p.ErrorCode != 0 {
		t.Fatalf("second batch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if f.asks() != 1 {
		t.Fatalf("coordinator asked %d times, want 1", f.asks())
	}
	if p := produce(t, r, "tx", batchOf("n1")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	rc := fetchIso(t, r, "tx", 0, true)
	if rc.LastStableOffset != 0 || rc.HighWatermark != 4 || len(rc.RecordBatches) != 0 {
		t.Fatalf("read_committed before the marker: lso %d hw %d %d bytes", rc.LastStableOffset, rc.HighWatermark, len(rc.RecordBatches))
	}
	if ru := fetchIso(t, r, "tx", 0, false); ru.LastStableOffset != 0 || len(ru.RecordBatches) == 0 {
		t.Fatalf("read_uncommitted: lso %d, %d bytes", ru.LastStableOffset, len(ru.RecordBatches))
	}
	if got := listLatest(t, r, "tx", true); got != 0 {
		t.Fatalf("ListOffsets read_committed latest %d, want the LSO 0", got)
	}
	if got := listLatest(t, r, "tx", false); got != 4 {
		t.Fatalf("ListOffsets read_uncommitted latest %d, want 4", got)
	}

	// Commit: everything is stable, the marker included.
	if code := writeMarker(t, r, "tx", 0, pid, 0, true, 5); code != 0 {
		t.Fatalf("commit marker: %v", kerr.ErrorForCode(code))
	}
	rc = fetchIso(t, r, "tx", 0, true)
	values, controls := recordValues(t, rc.RecordBatches)
	if rc.LastStableOffset != 5 || !slices.Equal(values, []string{"a1", "a2", "a3", "n1"}) || !slices.Equal(controls, []int64{4}) {
		t.Fatalf("after commit: lso %d values %v controls %v", rc.LastStableOffset, values, controls)
	}
	if len(rc.AbortedTransactions) != 0 {
		t.Fatalf("aborted after a commit: %v", rc.AbortedTransactions)
	}

	// An aborted transaction is listed for read_committed readers.
	if p := produceTxn(t, r, 9, "tx", txnBatch(pid, 0, 3, true, "b1")); p.ErrorCode != 0 || p.BaseOffset != 5 {
		t.Fatalf("second transaction: %v at %d", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	if f.asks() != 2 {
		t.Fatalf("a new transaction is verified again: %d asks", f.asks())
	}
	if code := writeMarker(t, r, "tx", 0, pid, 0, false, 5); code != 0 {
		t.Fatalf("abort marker: %v", kerr.ErrorForCode(code))
	}
	if p := produce(t, r, "tx", batchOf("n2")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	rc = fetchIso(t, r, "tx", 0, true)
	if rc.LastStableOffset != 8 || len(rc.AbortedTransactions) != 1 ||
		rc.AbortedTransactions[0].ProducerID != pid || rc.AbortedTransactions[0].FirstOffset != 5 {
		t.Fatalf("after abort: lso %d aborted %+v", rc.LastStableOffset, rc.AbortedTransactions)
	}
	if got := listLatest(t, r, "tx", true); got != 8 {
		t.Fatalf("ListOffsets read_committed latest %d, want 8", got)
	}

	// A real read_committed consumer sees the committed records only.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("tx"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for len(got) < 5 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v (got %v)", err, got)
		}
		fs.EachRecord(func(rec *kgo.Record) { got = append(got, string(rec.Value)) })
	}
	if want := []string{"a1", "a2", "a3", "n1", "n2"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed consumer got %v, want %v", got, want)
	}
}

func TestTxnMarkerCodes(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "codes", nil)
	const pid = 42
	if p := produceTxn(t, r, 9, "codes", txnBatch(pid, 3, 0, true, "x")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	if code := writeMarker(t, r, "codes", 0, pid, 2, true, 1); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old producer epoch: %v", kerr.ErrorForCode(code))
	}
	if code := writeMarker(t, r, "codes", 0, pid, 3, false, 4); code != 0 {
		t.Fatalf("abort: %v", kerr.ErrorForCode(code))
	}
	if code := writeMarker(t, r, "codes", 0, pid, 3, false, 3); code != kerr.TransactionCoordinatorFenced.Code {
		t.Fatalf("old coordinator epoch: %v", kerr.ErrorForCode(code))
	}
	// A retry of the marker: nothing open, nothing written, answered 0.
	end := fetchIso(t, r, "codes", 0, false).HighWatermark
	if code := writeMarker(t, r, "codes", 0, pid, 3, false, 4); code != 0 {
		t.Fatalf("retried marker: %v", kerr.ErrorForCode(code))
	}
	if again := fetchIso(t, r, "codes", 0, false).HighWatermark; again != end {
		t.Fatalf("a retried marker wrote: end %d → %d", end, again)
	}
	if code := writeMarker(t, r, "nosuch", 0, pid, 3, false, 4); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(code))
	}
	if code := writeMarker(t, r, "codes", 9, pid, 3, false, 4); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition: %v", kerr.ErrorForCode(code))
	}
	// A marker with a bumped epoch (KIP-890 part 2) fences the old epoch's late batch.
	if code := writeMarker(t, r, "codes", 0, pid, 4, true, 4); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	if p := produceTxn(t, r, 9, "codes", txnBatch(pid, 3, 1, true, "late")); p.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("late batch of the old epoch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	// The new epoch starts at sequence 0.
	if p := produceTxn(t, r, 9, "codes", txnBatch(pid, 4, 5, true, "y")); p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("new epoch at sequence 5: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceTxn(t, r, 9, "codes", txnBatch(pid, 4, 0, true, "y")); p.ErrorCode != 0 {
		t.Fatalf("new epoch at sequence 0: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

// A marker that lands between the verification and the append refuses the append
// (KAFKA-14884): the transaction the batch was verified for may be over.
func TestTxnVerificationRace(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "race", nil)
	const pid = 99
	other := brokertest.Dial(t, b.Addr())
	f.before = func(_ int, v *conn.TxnVerify) {
		// The coordinator aborts the transaction meanwhile (its timeout).
		if code := writeMarker(t, other, "race", 0, v.ProducerID, v.ProducerEpoch, false, 1); code != 0 {
			t.Errorf("abort marker: %v", kerr.ErrorForCode(code))
		}
	}
	if p := produceTxn(t, r, 9, "race", txnBatch(pid, 0, 0, true, "zombie")); p.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("v9 produce after a marker in between: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceTxn(t, r, 11, "race", txnBatch(pid, 0, 0, true, "zombie")); p.ErrorCode != kerr.TransactionAbortable.Code {
		t.Fatalf("v11 produce after a marker in between: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if hw := fetchIso(t, r, "race", 0, false).HighWatermark; hw != 0 {
		t.Fatalf("a refused batch was written: high watermark %d", hw)
	}
	f.mu.Lock()
	f.before = nil
	f.mu.Unlock()
	if p := produceTxn(t, r, 11, "race", txnBatch(pid, 0, 0, true, "ok")); p.ErrorCode != 0 {
		t.Fatalf("verified without a marker in between: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

// A broker alone has its transaction coordinator (actors/txn): a transactional batch of
// a producer it does not know is refused. (Without a coordinator, in a cluster this
// round, conn's tests check the refusal.)
func TestTxnBatchRefusedForAnUnknownProducer(t *testing.T) {
	b, _, err := brokertest.StartLogged(t, brokertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "nocoord", nil)
	if p := produceTxn(t, r, 9, "nocoord", txnBatch(5, 0, 0, true, "x")); p.ErrorCode != kerr.InvalidProducerIDMapping.Code {
		t.Fatalf("unknown producer: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

func describeProducers(t *testing.T, r *brokertest.Raw, topic string) []kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
	t.Helper()
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	p := r.Roundtrip(req, 5).(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("describe producers: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	return p.ActiveProducers
}

func TestDescribeProducers(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "dp", nil)
	if p := produce(t, r, "dp", txnBatch(10, 2, 0, false, "i1", "i2")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	if p := produceTxn(t, r, 9, "dp", txnBatch(11, 1, 0, true, "t1")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	got := describeProducers(t, r, "dp")
	if len(got) != 2 {
		t.Fatalf("producers: %+v", got)
	}
	idem, txn := got[0], got[1]
	if idem.ProducerID != 10 || idem.ProducerEpoch != 2 || idem.LastSequence != 1 || idem.CurrentTxnStartOffset != -1 ||
		idem.CoordinatorEpoch != -1 || idem.LastTimestamp <= 0 {
		t.Fatalf("idempotent producer: %+v", idem)
	}
	if txn.ProducerID != 11 || txn.ProducerEpoch != 1 || txn.LastSequence != 0 || txn.CurrentTxnStartOffset != 2 {
		t.Fatalf("transactional producer: %+v", txn)
	}
	if code := writeMarker(t, r, "dp", 0, 11, 1, true, 6); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	got = describeProducers(t, r, "dp")
	if txn := got[1]; txn.CurrentTxnStartOffset != -1 || txn.CoordinatorEpoch != 6 {
		t.Fatalf("after the commit: %+v", txn)
	}
}

// Aborted transactions across several segments come back sorted by first offset, and
// after a restart recovery rebuilds them and the open transaction from the log.
func TestTxnAbortedIndexAcrossSegmentsAndRestart(t *testing.T) {
	f := &fakeCoordinator{}
	c := brokertest.Config(t)
	b := startTxnBroker(t, c, f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "segs", map[string]string{"segment.bytes": "300"})
	// Two producers interleave; the one that starts later aborts first.
	seq := map[int64]int32{}
	put := func(pid int64, v string) {
		t.Helper()
		if p := produceTxn(t, r, 9, "segs", txnBatch(pid, 0, seq[pid], true, v)); p.ErrorCode != 0 {
			t.Fatalf("produce %s: %v", v, kerr.ErrorForCode(p.ErrorCode))
		}
		seq[pid]++
	}
	end := func(pid int64, commit bool) {
		t.Helper()
		if code := writeMarker(t, r, "segs", 0, pid, 0, commit, 1); code != 0 {
			t.Fatalf("marker: %v", kerr.ErrorForCode(code))
		}
	}
	put(1, "p1-a") // 0
	put(2, "p2-a") // 1
	put(2, "p2-b") // 2
	end(2, false)  // 3: aborts [1,3]
	put(1, "p1-b") // 4
	end(1, false)  // 5: aborts [0,5]
	put(3, "p3-a") // 6
	end(3, true)   // 7
	put(2, "p2-c") // 8
	put(2, "p2-d") // 9
	end(2, false)  // 10: aborts [8,10]
	put(1, "p1-c") // 11: stays open
	type aborted struct{ pid, first int64 }
	want := []aborted{{1, 0}, {2, 1}, {2, 8}}
	check := func(when string) {
		t.Helper()
		rc := fetchIso(t, r, "segs", 0, true)
		if rc.LastStableOffset != 11 {
			t.Fatalf("%s: lso %d, want 11 (the open transaction's first offset)", when, rc.LastStableOffset)
		}
		var got []aborted
		for _, a := range rc.AbortedTransactions {
			got = append(got, aborted{a.ProducerID, a.FirstOffset})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: aborted %+v, want %+v", when, got, want)
		}
		// From an offset past the first abort, only what overlaps the range.
		rc = fetchIso(t, r, "segs", 6, true)
		if len(rc.AbortedTransactions) != 1 || rc.AbortedTransactions[0].FirstOffset != 8 {
			t.Fatalf("%s: aborted from 6: %+v", when, rc.AbortedTransactions)
		}
		if got := listLatest(t, r, "segs", true); got != 11 {
			t.Fatalf("%s: ListOffsets read_committed %d", when, got)
		}
	}
	check("before the restart")
	if segs, _ := filepath.Glob(filepath.Join(c.DataDir, "topics", "segs", "0", "*.log")); len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	if n := len(describeProducers(t, r, "segs")); n != 3 {
		t.Fatalf("%d producers", n)
	}
	dir := filepath.Join(c.DataDir, "topics", "segs", "0")
	type entry struct{ pid, first, last int64 }
	wantIndex := []entry{{2, 1, 3}, {1, 0, 5}, {2, 8, 10}}
	readIndexes := func() (all []entry, files []string) {
		t.Helper()
		files, _ = filepath.Glob(filepath.Join(dir, "*.txnindex"))
		for _, name := range files {
			raw, err := os.ReadFile(name)
			if err != nil || len(raw)%34 != 0 {
				t.Fatalf("%s: %d bytes, %v", name, len(raw), err)
			}
			for ; len(raw) > 0; raw = raw[34:] {
				be := binary.BigEndian
				all = append(all, entry{int64(be.Uint64(raw[2:])), int64(be.Uint64(raw[10:])), int64(be.Uint64(raw[18:]))})
			}
		}
		return all, files
	}
	stopBroker(t, b)
	got, files := readIndexes()
	if !slices.Equal(got, wantIndex) {
		t.Fatalf(".txnindex entries %+v, want %+v", got, wantIndex)
	}
	// Recovery writes the index again when a file is missing or behind, and deletes
	// one whose segment is gone.
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	if len(files) > 1 {
		if err := os.Truncate(files[len(files)-1], 0); err != nil {
			t.Fatal(err)
		}
	}
	stray := filepath.Join(dir, "00000000000099999999.txnindex")
	if err := os.WriteFile(stray, make([]byte, 34), 0o600); err != nil {
		t.Fatal(err)
	}
	b, sink, err := brokertest.StartLogged(t, c, broker.WithTxnVerifier(f.verify))
	if err != nil {
		t.Fatal(err)
	}
	r = brokertest.Dial(t, b.Addr())
	check("after the restart")
	if got, _ := readIndexes(); !slices.Equal(got, wantIndex) {
		t.Fatalf("rebuilt .txnindex entries %+v, want %+v", got, wantIndex)
	}
	if len(sink.Events("partition_txn_index_rebuilt")) == 0 || len(sink.Events("partition_stray_txn_index_deleted")) != 1 {
		t.Fatal("no partition_txn_index_rebuilt or partition_stray_txn_index_deleted event")
	}
	// The open transaction survived: its next batch needs no verification, and its
	// commit makes everything stable.
	asks := f.asks()
	put(1, "p1-d")
	if f.asks() != asks {
		t.Fatal("the open transaction was verified again after the restart")
	}
	end(1, true)
	if rc := fetchIso(t, r, "segs", 0, true); rc.LastStableOffset != rc.HighWatermark {
		t.Fatalf("after the commit: lso %d hw %d", rc.LastStableOffset, rc.HighWatermark)
	}
}

// A read_committed long poll wakes when the LSO moves (a marker), not before.
func TestTxnReadCommittedLongPollWakesOnMarker(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "poll", nil)
	if p := produceTxn(t, r, 9, "poll", txnBatch(3, 0, 0, true, "v")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	poller := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID, req.MaxBytes, req.MinBytes, req.MaxWaitMillis, req.SessionEpoch, req.IsolationLevel = -1, 1<<20, 1, 20000, -1, 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "poll"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	poller.Send(req, 9)
	// Parked: nothing answers while the transaction is open.
	if _, err := poller.ReadFrame(300 * time.Millisecond); err == nil {
		t.Fatal("a read_committed fetch answered while the transaction was open")
	}
	start := time.Now()
	if code := writeMarker(t, r, "poll", 0, 3, 0, true, 0); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	var resp kmsg.FetchResponse
	resp.SetVersion(11)
	poller.Recv(&resp)
	if p := resp.Topics[0].Partitions[0]; p.LastStableOffset != 2 || len(p.RecordBatches) == 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("woken fetch: lso %d, %d bytes", p.LastStableOffset, len(p.RecordBatches))
	}
}

// Pipelined transactional produces whose verifications are answered out of order are
// still appended in request order: the producer's sequence holds.
func TestTxnPipelinedProducesKeepTheirOrder(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "pipe", nil)
	// A partition that never held a record takes only sequence 0 from a producer it
	// does not know (KAFKA-15591): the second batch would be refused before verifying.
	if p := produce(t, r, "pipe", batchOf("plain")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	second := make(chan struct{})
	f.before = func(call int, _ *conn.TxnVerify) {
		if call == 1 {
			<-second // the first verification is answered after the second
		}
	}
	f.after = func(call int, _ *conn.TxnVerify) {
		if call == 2 {
			close(second)
		}
	}
	send := func(seq int32, v string, corr int32) { sendTxnProduce(r, 9, seq, v, corr) }
	send(0, "first", 1)
	send(1, "second", 2)
	for want := int32(1); want <= 2; want++ {
		var resp kmsg.ProduceResponse
		resp.SetVersion(9)
		if corr := r.Recv(&resp); corr != want {
			t.Fatalf("response %d, want %d", corr, want)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != int64(want) {
			t.Fatalf("produce %d: %v at %d", want, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		}
	}
	if f.asks() != 2 {
		t.Fatalf("%d verifications, want 2", f.asks())
	}
}

// A pipelined produce that reaches the partition after the first batch of the
// transaction is appended, while the batch between them is still held by the
// connection for its verification, is not refused OUT_OF_ORDER_SEQUENCE_NUMBER (which
// fails the producer): it is verified too and appended after that batch.
func TestTxnPipelinedProduceBehindAVerificationAfterTheFirstAppend(t *testing.T) {
	f := &fakeCoordinator{}
	b := startTxnBroker(t, brokertest.Config(t), f)
	r := brokertest.Dial(t, b.Addr())
	createTopic(t, r, "pipe", nil)
	if p := produce(t, r, "pipe", batchOf("plain")); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	third := make(chan struct{})
	f.before = func(call int, _ *conn.TxnVerify) {
		switch call {
		case 2: // the second batch's verification waits for the third batch's
			select {
			case <-third:
			case <-time.After(5 * time.Second):
			}
		case 3:
			close(third)
		}
	}
	send := func(seq int32, v string, corr int32) { sendTxnProduce(r, 12, seq, v, corr) }
	recv := func(want int32) {
		t.Helper()
		var resp kmsg.ProduceResponse
		resp.SetVersion(12)
		if corr := r.Recv(&resp); corr != want {
			t.Fatalf("response %d, want %d", corr, want)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != int64(want) {
			t.Fatalf("produce %d: %v at %d", want, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		}
	}
	send(0, "first", 1)
	send(1, "second", 2)
	recv(1) // the first batch is appended; the second is held for its verification
	send(2, "third", 3)
	recv(2)
	recv(3)
}

// KIP-890 part 2 (Produce v12): the producer's next transaction may reach a partition
// before the marker of its previous one. The coordinator answers its verification
// once that marker is written; the batch, of the bumped epoch, is then appended: the
// marker's epoch, not the token, fences what it must. Produce v11 in the same race is
// refused (the token: without epoch bumps a marker in between may have ended the very
// transaction the batch was verified for).
func TestTxnV12NextTransactionRacesThePreviousMarker(t *testing.T) {
	for _, c := range []struct {
		version int16
		want    int16
	}{{12, 0}, {11, kerr.TransactionAbortable.Code}} {
		f := &fakeCoordinator{}
		b := startTxnBroker(t, brokertest.Config(t), f)
		r := brokertest.Dial(t, b.Addr())
		createTopic(t, r, "tv2", nil)
		const pid = 55
		if p := produceTxn(t, r, c.version, "tv2", txnBatch(pid, 0, 0, true, "t1")); p.ErrorCode != 0 {
			t.Fatalf("v%d first transaction: %v", c.version, kerr.ErrorForCode(p.ErrorCode))
		}
		other := brokertest.Dial(t, b.Addr())
		f.before = func(_ int, v *conn.TxnVerify) {
			// The previous transaction's marker, with the bumped epoch, lands while
			// the next one is verified.
			if code := writeMarker(t, other, "tv2", 0, pid, 1, true, 1); code != 0 {
				t.Errorf("marker: %v", kerr.ErrorForCode(code))
			}
		}
		p := produceTxn(t, r, c.version, "tv2", txnBatch(pid, 1, 0, true, "t2"))
		if p.ErrorCode != c.want {
			t.Fatalf("v%d next transaction's batch: %v, want %v", c.version, kerr.ErrorForCode(p.ErrorCode), kerr.ErrorForCode(c.want))
		}
		if c.want != 0 {
			continue
		}
		// The new transaction is open and holds the LSO; the first one is committed.
		rc := fetchIso(t, r, "tv2", 0, true)
		if p.BaseOffset != 2 || rc.LastStableOffset != 2 {
			t.Fatalf("v%d: new transaction at %d, lso %d", c.version, p.BaseOffset, rc.LastStableOffset)
		}
		// A late batch of the first transaction's epoch is fenced by the marker's epoch.
		if p := produceTxn(t, r, c.version, "tv2", txnBatch(pid, 0, 1, true, "late")); p.ErrorCode != kerr.InvalidProducerEpoch.Code {
			t.Fatalf("v%d late batch: %v", c.version, kerr.ErrorForCode(p.ErrorCode))
		}
	}
}

// sendTxnProduce sends, without waiting for the answer, a Produce of version v for
// transactional id "tx" holding producer 21's batch of one record v at sequence seq to
// topic "pipe".
func sendTxnProduce(r *brokertest.Raw, v int16, seq int32, value string, corr int32) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(v)
	req.TransactionID = kmsg.StringPtr("tx")
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "pipe"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = txnBatch(21, 0, seq, true, value)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r.Send(req, corr)
}
