package partition

import "github.com/twmb/franz-go/pkg/kerr"

// maxProducerBatches is how many recent batches per producer Apache keeps for duplicate
// detection (ProducerStateEntry.NUM_BATCHES_TO_RETAIN): the idempotent producer has at
// most five requests in flight per partition.
const maxProducerBatches = 5

type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

type producerEntry struct {
	epoch   int16
	batches []producerBatch // oldest first
	// lastTS is the max timestamp of the producer's last batch (DescribeProducers).
	lastTS int64
	// Transactions (KIP-98; txn.go). coordEpoch is the newest coordinator epoch a marker
	// for the producer carried (-1: none yet); txnFirst the first offset of its open
	// transaction on this partition (-1: none); markers counts the markers the partition
	// took for it, the token a verified transactional batch must still match
	// (KAFKA-14884); seqZero says a marker bumped the epoch (KIP-890 part 2), so the
	// producer's next batch starts at sequence 0.
	coordEpoch int32
	txnFirst   int64
	markers    uint32
	seqZero    bool
	// seenMS is when the producer last wrote here, on the broker's clock (recovery: its
	// batch's timestamp, no later than the recovery): producer.id.expiration.ms counts
	// from it (producerstate.go). suspect marks an open transaction recovery found that
	// the coordinator has not yet confirmed (orphans.go).
	seenMS  int64
	suspect bool
}

func newProducerEntry(epoch int16) *producerEntry {
	return &producerEntry{epoch: epoch, lastTS: -1, coordEpoch: -1, txnFirst: -1}
}

// producers is one partition's producer state (Apache's ProducerStateManager): the
// idempotent producers' recent batches and the open transactions. It is rebuilt after a
// restart from the batches and markers in the log.
type producers map[int64]*producerEntry

// check decides what to do with an idempotent batch before it is appended, following
// Apache's UnifiedLog.analyzeAndValidateProducerState and ProducerAppendInfo:
//   - a batch equal (same epoch, first and last sequence) to one of the last five is a
//     duplicate, acknowledged with the offset it was first written at;
//   - an older epoch is fenced (INVALID_PRODUCER_EPOCH);
//   - a newer epoch must start at sequence 0;
//   - within an epoch the first sequence must follow the last one
//     (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise);
//   - a producer the partition knows nothing of may start at any sequence (KIP-360),
//     except on a partition that never held a record, where only 0 is accepted
//     (KAFKA-15591: two in-flight batches could otherwise land out of order).
func (ps producers) check(h *header, neverWritten bool) (dup int64, isDup bool, code int16) {
	if h.ProducerID < 0 {
		return 0, false, 0
	}
	e := ps[h.ProducerID]
	if e == nil {
		if neverWritten && h.BaseSequence != 0 {
			return 0, false, kerr.OutOfOrderSequenceNumber.Code
		}
		return 0, false, 0
	}
	switch {
	case h.ProducerEpoch < e.epoch:
		return 0, false, kerr.InvalidProducerEpoch.Code
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return 0, false, kerr.OutOfOrderSequenceNumber.Code
		}
		return 0, false, 0
	}
	if len(e.batches) == 0 && e.seqZero && h.BaseSequence != 0 {
		return 0, false, kerr.OutOfOrderSequenceNumber.Code
	}
	last := h.LastSequence()
	for _, b := range e.batches {
		if b.firstSeq == h.BaseSequence && b.lastSeq == last {
			return b.firstOffset, true, 0
		}
	}
	if n := len(e.batches); n > 0 && h.BaseSequence != incSeq(e.batches[n-1].lastSeq, 1) {
		return 0, false, kerr.OutOfOrderSequenceNumber.Code
	}
	return 0, false, 0
}

// record remembers an appended batch (h carries its assigned base offset).
func (ps producers) record(h *header) {
	if h.ProducerID < 0 {
		return
	}
	e := ps[h.ProducerID]
	if e == nil {
		e = newProducerEntry(h.ProducerEpoch)
		ps[h.ProducerID] = e
	}
	if h.Attributes&attrControl != 0 {
		return // a marker: txn.go
	}
	if h.ProducerEpoch != e.epoch {
		e.epoch, e.batches = h.ProducerEpoch, e.batches[:0]
	}
	e.seqZero = false
	e.lastTS = h.MaxTimestamp
	if h.Attributes&attrTransactional != 0 && e.txnFirst < 0 {
		e.txnFirst = h.BaseOffset
	}
	if len(e.batches) == maxProducerBatches {
		e.batches = append(e.batches[:0], e.batches[1:]...)
	}
	e.batches = append(e.batches, producerBatch{
		firstSeq: h.BaseSequence, lastSeq: h.LastSequence(),
		firstOffset: h.BaseOffset, lastOffset: h.LastOffset(),
	})
}
