package broker_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// txnBatch is a transactional RecordBatch v2 of n records from sequence seq.
func txnBatch(pid int64, epoch int16, seq int32, n int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(fmt.Sprintf("v%d", int(seq)+i))}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(n), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// TestTxnPipelinedProduceKeepsSequence: a transactional producer pipelines several
// Produce v12 requests to one partition at the start of a transaction (franz-go does,
// up to five in flight). The first batch of the transaction on the partition waits for
// the coordinator to add the partition (KIP-890 part 2); the ones behind it must wait
// with it and be appended after it, not be refused OUT_OF_ORDER_SEQUENCE_NUMBER for a
// sequence the partition has not seen yet, which fails the producer. Each transaction
// runs at its own epoch (EndTxn v5 bumps it), so every one starts at sequence 0 again.
func TestTxnPipelinedProduceKeepsSequence(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "pipe", 1)
	c := brokertest.Dial(t, b.Addr())
	init := c.Roundtrip(initPID(5, "pipe", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 {
		t.Fatalf("init: %d", init.ErrorCode)
	}
	pid, epoch := init.ProducerID, init.ProducerEpoch
	const inFlight, per = 5, 10
	next := int64(0) // the offset the next record gets
	for txn := 0; txn < 3; txn++ {
		var frames []byte
		for i := 0; i < inFlight; i++ {
			req := produceReq("pipe", 0, -1, txnBatch(pid, epoch, int32(i*per), per))
			req.SetVersion(12)
			req.TransactionID = kmsg.StringPtr("pipe")
			frames = append(frames, c.Encode(req, int32(100+i))...)
		}
		c.Write(frames) // all in flight at once, as a pipelining producer sends them
		for i := 0; i < inFlight; i++ {
			resp := kmsg.NewPtrProduceResponse()
			resp.SetVersion(12)
			if corr := c.Recv(resp); corr != int32(100+i) {
				t.Fatalf("txn %d: response %d has correlation %d", txn, i, corr)
			}
			p := resp.Topics[0].Partitions[0]
			if p.ErrorCode != 0 {
				t.Fatalf("txn %d epoch %d: batch %d (sequence %d): %v", txn, epoch, i, i*per, kerr.ErrorForCode(p.ErrorCode))
			}
			if p.BaseOffset != next {
				t.Fatalf("txn %d: batch %d at offset %d, want %d (in sequence order)", txn, i, p.BaseOffset, next)
			}
			next += per
		}
		end := c.Roundtrip(endTxn(5, "pipe", pid, epoch, true), 1).(*kmsg.EndTxnResponse)
		if end.ErrorCode != 0 {
			t.Fatalf("txn %d: end: %v", txn, kerr.ErrorForCode(end.ErrorCode))
		}
		pid, epoch = end.ProducerID, end.ProducerEpoch
		next++ // the commit marker
		waitTxnState(t, c, "pipe", "CompleteCommit")
	}
}

// TestTxnAbortWhileMarkersAreWritten: a producer whose commit was answered (the
// PrepareCommit is durable) aborts its next, empty transaction at once, as a consumer
// losing its partitions in a rebalance does, while the commit's markers may still be
// written. It must be told to retry (CONCURRENT_TRANSACTIONS) or succeed, never
// INVALID_TXN_STATE, which fails the producer; its retries end in success.
func TestTxnAbortWhileMarkersAreWritten(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "ab", 4)
	c := brokertest.Dial(t, b.Addr())
	init := c.Roundtrip(initPID(5, "ab", 60000, -1, -1), 1).(*kmsg.InitProducerIDResponse)
	pid, epoch := init.ProducerID, init.ProducerEpoch
	for round := 0; round < 20; round++ {
		if r := c.Roundtrip(addParts(3, "ab", pid, epoch, "ab", 0, 1, 2, 3), 1).(*kmsg.AddPartitionsToTxnResponse); r.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("round %d: add: %d", round, r.Topics[0].Partitions[0].ErrorCode)
		}
		// Commit and at once abort at the epoch the commit answered, in one write, so the
		// abort meets the PrepareCommit whenever the markers are not yet all written.
		frames := append(c.Encode(endTxn(5, "ab", pid, epoch, true), 1), c.Encode(endTxn(5, "ab", pid, epoch+1, false), 2)...)
		c.Write(frames)
		commit := kmsg.NewPtrEndTxnResponse()
		commit.SetVersion(5)
		c.Recv(commit)
		if commit.ErrorCode != 0 {
			t.Fatalf("round %d: commit: %v", round, kerr.ErrorForCode(commit.ErrorCode))
		}
		abort := kmsg.NewPtrEndTxnResponse()
		abort.SetVersion(5)
		c.Recv(abort)
		for deadline := time.Now().Add(10 * time.Second); abort.ErrorCode == kerr.ConcurrentTransactions.Code; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the abort is still refused after 10 s", round)
			}
			abort = c.Roundtrip(endTxn(5, "ab", commit.ProducerID, commit.ProducerEpoch, false), 1).(*kmsg.EndTxnResponse)
		}
		if abort.ErrorCode != 0 {
			t.Fatalf("round %d: abort after the commit: %v", round, kerr.ErrorForCode(abort.ErrorCode))
		}
		pid, epoch = abort.ProducerID, abort.ProducerEpoch
		waitTxnState(t, c, "ab", "CompleteAbort")
	}
}
