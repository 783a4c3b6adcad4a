package partition

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Transactions on a partition (KIP-98, KIP-890 part 1; docs/data-path.md):
//
//   - a transactional batch is appended only inside a transaction the coordinator knows
//     of: the producer has an open transaction here at the batch's epoch, or its sender
//     verified the partition with the coordinator (contract 2 of the transactions design)
//     after this partition handed it a token, the count of the producer's markers, that
//     still holds when the batch arrives (KAFKA-14884: a marker in between refuses it);
//   - WriteTxnMarker appends a control batch ending the producer's transaction, fsynced
//     before the answer; an abort adds an entry to its segment's aborted-transaction index;
//   - the last stable offset (LSO) is the smaller of the first offset of a transaction
//     not yet decided durably and the high watermark: a transaction's records become
//     readable at read_committed only once its marker is on disk (KAFKA-5121).
//
// All of it is rebuilt at open from the log itself (visitBatch), as the rest of the
// producer state is: nothing of it is kept in a file of its own.

// Control record types (Apache's ControlRecordType) in a marker's key.
const (
	markerAbort  = 0
	markerCommit = 1
)

// abortedTxn is one entry of a segment's aborted-transaction index (Apache's
// TransactionIndex .txnindex entry): the producer, the first offset of its transaction
// on the partition, the offset of the abort marker, and the LSO once the abort was
// decided (a fetch's collection stops at an entry whose lso reaches its upper bound).
type abortedTxn struct {
	producerID  int64
	first, last int64
	lso         int64
}

// AbortedTxn is one aborted transaction a read_committed Fetch returns with its records.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// completingTxn is a transaction whose marker is written but not yet durable: it keeps
// the LSO at its first offset until the marker is on disk.
type completingTxn struct {
	first, marker int64
}

// markerBatch encodes a transaction marker as Apache does (EndTxnMarker): a control
// batch (attributes control|transactional) of the producer's id and epoch holding one
// record whose key is version 0 + type (0 abort, 1 commit) and whose value is version 0
// + the coordinator epoch. Base offset and leader epoch are stamped at append.
func markerBatch(pid int64, epoch int16, commit bool, coordEpoch int32, nowMS int64) []byte {
	typ := int16(markerAbort)
	if commit {
		typ = markerCommit
	}
	var rec []byte
	rec = append(rec, 0)              // record attributes
	rec = binary.AppendVarint(rec, 0) // timestamp delta
	rec = binary.AppendVarint(rec, 0) // offset delta
	rec = binary.AppendVarint(rec, 4) // key length
	rec = binary.BigEndian.AppendUint16(rec, 0)
	rec = binary.BigEndian.AppendUint16(rec, uint16(typ))
	rec = binary.AppendVarint(rec, 6) // value length
	rec = binary.BigEndian.AppendUint16(rec, 0)
	rec = binary.BigEndian.AppendUint32(rec, uint32(coordEpoch))
	rec = binary.AppendVarint(rec, 0) // headers
	b := make([]byte, batchHeaderSize, batchHeaderSize+len(rec)+1)
	b = binary.AppendVarint(b, int64(len(rec)))
	b = append(b, rec...)
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], 0)
	be.PutUint32(b[offBatchLength:], uint32(len(b)-logOverhead))
	be.PutUint32(b[offLeaderEpoch:], 0)
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(attrControl|attrTransactional))
	be.PutUint32(b[offLastOffsetDelta:], 0)
	be.PutUint64(b[offBaseTimestamp:], uint64(nowMS))
	be.PutUint64(b[offMaxTimestamp:], uint64(nowMS))
	be.PutUint64(b[offProducerID:], uint64(pid))
	be.PutUint16(b[offProducerEpoch:], uint16(epoch))
	be.PutUint32(b[offBaseSequence:], 0xffffffff) // -1
	be.PutUint32(b[offRecordCount:], 1)
	be.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], crc32c))
	return b
}

// parseMarker reads a control batch's marker: its type and coordinator epoch. ok is
// false for anything else (another control type, an unreadable record).
func parseMarker(b []byte) (commit bool, coordEpoch int32, ok bool) {
	if len(b) < batchHeaderSize {
		return false, 0, false
	}
	h := parseHeader(b)
	if h.Attributes&attrControl == 0 || h.Attributes&attrCompression != 0 || h.RecordCount < 1 {
		return false, 0, false
	}
	r := b[batchHeaderSize:]
	length, n := binary.Varint(r)
	if n <= 0 || length < 0 || int64(len(r)-n) < length {
		return false, 0, false
	}
	r = r[n : n+int(length)]
	if len(r) < 1 {
		return false, 0, false
	}
	r = r[1:]     // attributes
	for range 2 { // timestamp and offset deltas
		if _, n = binary.Varint(r); n <= 0 {
			return false, 0, false
		}
		r = r[n:]
	}
	klen, n := binary.Varint(r)
	if n <= 0 || klen < 4 || int64(len(r)-n) < klen {
		return false, 0, false
	}
	key := r[n : n+int(klen)]
	r = r[n+int(klen):]
	typ := int16(binary.BigEndian.Uint16(key[2:]))
	if typ != markerAbort && typ != markerCommit {
		return false, 0, false
	}
	coordEpoch = -1
	if vlen, n := binary.Varint(r); n > 0 && vlen >= 6 && int64(len(r)-n) >= vlen {
		coordEpoch = int32(binary.BigEndian.Uint32(r[n+2:]))
	}
	return typ == markerCommit, coordEpoch, true
}

// MarkerMessage is what the topics manager sends a partition for a WriteTxnMarker: the
// marker's control batch, appended like a produced one (parked, queued behind a roll).
func markerMessage(m *WriteTxnMarker, nowMS int64) *appendBatch {
	b := markerBatch(m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch, nowMS)
	return &appendBatch{batch: &Batch{records: b, h: parseHeader(b)}, marker: m, reply: m.Reply}
}

// fail answers an append or a marker that was not written (code: why).
func (m *appendBatch) fail(code int16) {
	if m.marker != nil {
		m.reply.Resolve(&TxnMarkerWritten{ErrorCode: code})
		return
	}
	m.reply.Resolve(&Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1})
}

// txnCheck decides whether a batch may be appended as far as transactions go (after the
// idempotence checks). verify asks the sender to verify the partition with the
// coordinator and send the batch again with token (answered INVALID_TXN_STATE, so a
// sender that does not verify refuses it).
func (p *partitionActor) txnCheck(h *header, m *appendBatch) (code int16, verify bool, token uint32) {
	e := p.producers[h.ProducerID]
	if h.Attributes&attrTransactional == 0 {
		if h.ProducerID >= 0 && e != nil && e.txnFirst >= 0 {
			// Apache's ProducerAppendInfo: a non-transactional batch inside a transaction.
			return kerr.InvalidTxnState.Code, false, 0
		}
		return 0, false, 0
	}
	if e != nil && e.txnFirst >= 0 && e.epoch == h.ProducerEpoch {
		return 0, false, 0 // in the transaction the coordinator verified before
	}
	if e != nil {
		token = e.markers
	}
	switch {
	case !m.verified:
		return kerr.InvalidTxnState.Code, true, token
	case e != nil && e.txnFirst >= 0 && e.epoch < h.ProducerEpoch:
		// The coordinator verified a transaction of a newer epoch while this one's
		// marker has not come yet: it is still completing (retriable).
		return kerr.ConcurrentTransactions.Code, false, 0
	case m.token != token && !m.epochBumps:
		// A marker for the producer came between the verification and this append
		// (KAFKA-14884): the transaction it was verified for may be over. (With
		// KIP-890 part 2 the marker's bumped epoch refuses such a batch, above.)
		return kerr.InvalidTxnState.Code, false, 0
	}
	return 0, false, 0
}

// handleMarker writes a WriteTxnMarker's control batch (the log is open and no roll is
// due): checked as Apache's ProducerStateManager does, appended, and answered once an
// fsync covers it.
func (p *partitionActor) handleMarker(ctx actor.Context, m *appendBatch) {
	mk := m.marker
	if p.fenced() {
		m.fail(kerr.NotLeaderForPartition.Code)
		return
	}
	e := p.producers[mk.ProducerID]
	switch {
	case e != nil && mk.ProducerEpoch < e.epoch:
		m.fail(kerr.InvalidProducerEpoch.Code)
		return
	case e != nil && mk.CoordinatorEpoch < e.coordEpoch:
		m.fail(kerr.TransactionCoordinatorFenced.Code)
		return
	}
	h, records := m.batch.h, m.batch.records
	if e == nil || e.txnFirst < 0 {
		// Nothing open here (a retry after a restart, or a partition the producer never
		// wrote): nothing is written, but the marker still counts, so a batch verified
		// before it is refused, and its epoch still fences older ones. Answered once
		// everything appended so far is durable (a first try may still be syncing).
		p.endTxn(&h, mk.Commit, mk.CoordinatorEpoch)
		p.ackMarker(ctx, p.disk.EndOffset(), m.reply)
		return
	}
	base, err := p.disk.append(records, &h, p.epoch)
	if err != nil {
		p.cfg.Metrics.writeFailed("append")
		p.log.Error().Err(err).Msg("partition_marker_append_failed")
		m.fail(kerr.KafkaStorageError.Code)
		return
	}
	if a, aborted := p.endTxn(&h, mk.Commit, mk.CoordinatorEpoch); aborted {
		seg := p.disk.active()
		seg.aborted = append(seg.aborted, a)
		if err := p.disk.writeAborted(seg); err != nil {
			// The marker is in the log: recovery writes the index again from it.
			p.log.Warn().Err(err).Msg("partition_txn_index_write_failed")
		}
	}
	p.cfg.Metrics.appended(len(records))
	p.unsynced++
	p.log.Debug().Int64("producer_id", mk.ProducerID).Int16("producer_epoch", mk.ProducerEpoch).
		Bool("commit", mk.Commit).Int64("offset", base).Msg("partition_txn_marker_written")
	p.ackMarker(ctx, h.LastOffset()+1, m.reply)
}

// ackMarker answers a marker once an fsync covers end, whatever flush.messages says:
// the coordinator moves on (CompleteCommit/CompleteAbort) on this answer.
func (p *partitionActor) ackMarker(ctx actor.Context, end int64, reply actor.Promise) {
	if end <= p.durable {
		reply.Resolve(&TxnMarkerWritten{})
		return
	}
	p.pending = append(p.pending, pendingAck{end: end, resp: &TxnMarkerWritten{}, reply: reply, marker: true})
	actor.HandedOn(ctx)
	p.requestSync(ctx) // shares the fsync of the produces and markers arriving with it
}

// endTxn applies a marker (h: its header, its base offset assigned) to the producer
// state, at append and at recovery: the epoch moves to the marker's (KIP-890 part 2
// bumps it), the coordinator epoch is remembered, the marker counted, and the open
// transaction closed. It returns the aborted-index entry of an abort that closed one.
func (p *partitionActor) endTxn(h *header, commit bool, coordEpoch int32) (abortedTxn, bool) {
	e := p.producers[h.ProducerID]
	if e == nil {
		e = newProducerEntry(h.ProducerEpoch)
		p.producers[h.ProducerID] = e
	}
	if h.ProducerEpoch > e.epoch {
		e.epoch, e.batches, e.seqZero = h.ProducerEpoch, e.batches[:0], true
	}
	e.coordEpoch = max(e.coordEpoch, coordEpoch)
	e.markers++
	e.seenMS = max(e.seenMS, min(h.MaxTimestamp, p.cfg.Now().UnixMilli()))
	e.suspect = false
	first := e.txnFirst
	if first < 0 {
		return abortedTxn{}, false
	}
	e.txnFirst = -1
	p.openTxns--
	p.completing = append(p.completing, completingTxn{first: first, marker: h.BaseOffset})
	if commit {
		return abortedTxn{}, false
	}
	lso := h.BaseOffset + 1
	if p.openTxns > 0 {
		for _, o := range p.producers {
			if o.txnFirst >= 0 && o.txnFirst < lso {
				lso = o.txnFirst
			}
		}
	}
	return abortedTxn{producerID: h.ProducerID, first: first, last: h.BaseOffset, lso: lso}, true
}

// visitBatch rebuilds the producer state from one batch recovery walked (b: the whole
// batch, read for control batches only); an abort marker returns its index entry.
func (p *partitionActor) visitBatch(h *header, b []byte) (abortedTxn, bool) {
	if h.Attributes&attrControl == 0 {
		opened := h.Attributes&attrTransactional != 0 && (p.producers[h.ProducerID] == nil || p.producers[h.ProducerID].txnFirst < 0)
		p.producers.record(h)
		if h.ProducerID >= 0 {
			e := p.producers[h.ProducerID]
			e.seenMS = max(e.seenMS, min(h.MaxTimestamp, p.cfg.Now().UnixMilli()))
		}
		if opened && h.ProducerID >= 0 {
			p.openTxns++
		}
		return abortedTxn{}, false
	}
	commit, coordEpoch, ok := parseMarker(b)
	if !ok || h.ProducerID < 0 {
		return abortedTxn{}, false
	}
	return p.endTxn(h, commit, coordEpoch)
}

// firstUnstable is the first offset of a transaction not durably decided (-1: none),
// never below the log start (as Apache's updateFirstUnstableOffset: DeleteRecords or
// retention may have taken a transaction's first batches).
func (p *partitionActor) firstUnstable() int64 {
	f := int64(-1)
	keep := p.completing[:0]
	for _, c := range p.completing {
		if c.marker < p.durable {
			continue // its marker is on disk
		}
		keep = append(keep, c)
		if f < 0 || c.first < f {
			f = c.first
		}
	}
	clear(p.completing[len(keep):])
	p.completing = keep
	if p.openTxns > 0 {
		for _, e := range p.producers {
			if e.txnFirst >= 0 && (f < 0 || e.txnFirst < f) {
				f = e.txnFirst
			}
		}
	}
	if f >= 0 && p.disk != nil {
		f = max(f, p.disk.StartOffset())
	}
	return f
}

// lastStable is the LSO: below it every transaction is decided and its marker durable,
// and nothing is past the high watermark. It never goes back: a transaction opens at
// the log end, at or past the high watermark.
func (p *partitionActor) lastStable() int64 {
	hw := p.highWatermark()
	if f := p.firstUnstable(); f >= 0 && f < hw {
		return f
	}
	return hw
}

// countOpen recounts the open transactions (after producers were forgotten).
func (p *partitionActor) countOpen() {
	p.openTxns = 0
	for _, e := range p.producers {
		if e.txnFirst >= 0 {
			p.openTxns++
		}
	}
}

// abortedIn collects the aborted transactions a read_committed fetch from offset up to
// upper needs (Apache's collectAbortedTransactions): every entry of the segments from
// the one holding from whose transaction overlaps [from, upper), until an entry's lso
// reaches upper; sorted by first offset, as clients require (kgo before v1.21.4 showed
// aborted records as committed when it was not).
func (l *segmentLog) abortedIn(from, upper int64) []AbortedTxn {
	var out []AbortedTxn
	for _, s := range l.segs {
		if s.next <= from && s != l.active() {
			continue
		}
		for _, a := range s.aborted {
			if a.last >= from && a.first < upper {
				out = append(out, AbortedTxn{ProducerID: a.producerID, FirstOffset: a.first})
			}
			if a.lso >= upper {
				goto done
			}
		}
	}
done:
	slices.SortStableFunc(out, func(a, b AbortedTxn) int {
		switch {
		case a.FirstOffset < b.FirstOffset:
			return -1
		case a.FirstOffset > b.FirstOffset:
			return 1
		}
		return 0
	})
	return out
}

// describeProducers answers DescribeProducers for the partition (KIP-664): every
// producer of its producer state, idempotent ones included.
func (p *partitionActor) describeProducers() *ProducerStates {
	if p.disk == nil {
		return &ProducerStates{ErrorCode: p.closedCode()}
	}
	out := &ProducerStates{Producers: make([]ProducerState, 0, len(p.producers))}
	for id, e := range p.producers {
		ps := ProducerState{ProducerID: id, ProducerEpoch: e.epoch, LastSequence: -1, LastTimestamp: e.lastTS,
			CoordinatorEpoch: e.coordEpoch, TxnStartOffset: e.txnFirst}
		if n := len(e.batches); n > 0 {
			ps.LastSequence = e.batches[n-1].lastSeq
		}
		out.Producers = append(out.Producers, ps)
	}
	slices.SortFunc(out.Producers, func(a, b ProducerState) int {
		switch {
		case a.ProducerID < b.ProducerID:
			return -1
		case a.ProducerID > b.ProducerID:
			return 1
		}
		return 0
	})
	return out
}

// handleTxnMarker routes a WriteTxnMarker to its partition actor (the topics manager):
// UNKNOWN_TOPIC_OR_PARTITION for what the catalogue does not hold, NOT_LEADER_OR_FOLLOWER
// for a partition led by another broker. The coordinator gives a marker up on
// UNKNOWN_TOPIC_OR_PARTITION, so in a cluster, where another broker may have created
// the topic since this one last read the catalogue, the catalogue is read again first
// (readUnknown) and only a topic it does not hold either is unknown.
func (m *manager) handleTxnMarker(ctx actor.Context, msg *WriteTxnMarker) {
	_, pid, code := m.lookup(msg.Topic, TopicID{}, msg.Partition)
	if code == kerr.UnknownTopicOrPartition.Code && m.cfg.Cluster != nil {
		m.readUnknown(ctx, []PartitionRef{{Topic: msg.Topic, Partition: msg.Partition}})
		_, pid, code = m.lookup(msg.Topic, TopicID{}, msg.Partition)
	}
	if code != 0 {
		msg.Reply.Resolve(&TxnMarkerWritten{ErrorCode: code})
		return
	}
	ctx.Send(pid, markerMessage(msg, m.cfg.Now().UnixMilli()))
	actor.HandedOn(ctx)
}

// AnswerCrash answers a marker whose handler panicked (retriable: the coordinator
// writes it again).
func (m *WriteTxnMarker) AnswerCrash(*actor.Crashed) {
	m.Reply.Resolve(&TxnMarkerWritten{ErrorCode: crashCode})
}
