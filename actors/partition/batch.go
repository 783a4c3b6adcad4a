package partition

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
)

// RecordBatch v2 header layout (KIP-98). The CRC (CRC-32C) covers everything from the
// attributes to the end of the batch, so the broker may rewrite the base offset and the
// partition leader epoch without recomputing it, as Apache does.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	batchHeaderSize    = 61

	// logOverhead is the base offset and length that precede what the length counts.
	logOverhead = 12

	attrCompression   = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// header is the decoded fixed part of a batch.
type header struct {
	BaseOffset      int64
	Length          int32 // bytes after the length field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// Size is the whole batch on disk.
func (h *header) Size() int64 { return int64(h.Length) + logOverhead }

// LastOffset is the offset of the batch's last record.
func (h *header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// LastSequence is the sequence of the batch's last record (sequences wrap at MaxInt32, as
// DefaultRecordBatch.incrementSequence does).
func (h *header) LastSequence() int32 { return incSeq(h.BaseSequence, h.LastOffsetDelta) }

func incSeq(seq, by int32) int32 {
	if seq > 0x7fffffff-by {
		return by - (0x7fffffff - seq) - 1
	}
	return seq + by
}

func parseHeader(b []byte) header {
	be := binary.BigEndian
	return header{
		BaseOffset:      int64(be.Uint64(b[offBaseOffset:])),
		Length:          int32(be.Uint32(b[offBatchLength:])),
		LeaderEpoch:     int32(be.Uint32(b[offLeaderEpoch:])),
		Magic:           int8(b[offMagic]),
		CRC:             be.Uint32(b[offCRC:]),
		Attributes:      int16(be.Uint16(b[offAttributes:])),
		LastOffsetDelta: int32(be.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:   int64(be.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:    int64(be.Uint64(b[offMaxTimestamp:])),
		ProducerID:      int64(be.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(be.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(be.Uint32(b[offBaseSequence:])),
		RecordCount:     int32(be.Uint32(b[offRecordCount:])),
	}
}

// stamp rewrites the broker-owned fields of a batch about to be appended: its base offset
// and the partition leader epoch (neither is under the CRC).
func stamp(b []byte, baseOffset int64, leaderEpoch int32) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(baseOffset))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(leaderEpoch))
}

// produceError is a rejected produce: a Kafka error code with Apache's message.
type produceError struct {
	code int16
	msg  string
}

// validateProduced checks what a producer sent for one partition as Apache's
// ProduceRequest.validateRecords and LogValidator do: exactly one RecordBatch v2, its
// length and CRC-32C intact, within max.message.bytes, no control batch, counts that
// agree, and every record readable (validateRecords: a compressed batch is streamed
// through its decoder to check it, and stored as sent).
func validateProduced(records []byte, maxBytes int32) (header, *produceError) {
	if len(records) < batchHeaderSize {
		if len(records) >= offMagic+1 && records[offMagic] != 2 {
			return header{}, &produceError{kerr.InvalidRecord.Code, "Produce requests with version 3 and above must use the v2 record batch format"}
		}
		// Apache's record iterator finds no batch in fewer bytes than a header:
		// ProduceRequest.validateRecords refuses that as INVALID_RECORD.
		return header{}, &produceError{kerr.InvalidRecord.Code, "Produce requests with version 3 and above must have at least one record batch per partition"}
	}
	h := parseHeader(records)
	switch {
	case h.Magic != 2:
		return h, &produceError{kerr.InvalidRecord.Code, "Produce requests with version 3 and above must use the v2 record batch format"}
	case h.Length < batchHeaderSize-logOverhead || h.Size() > int64(len(records)):
		return h, &produceError{kerr.CorruptMessage.Code, "record batch length does not match the bytes sent"}
	case h.Size() < int64(len(records)):
		return h, &produceError{kerr.InvalidRecord.Code, "Produce requests with version 3 and above must contain exactly one record batch per partition"}
	case crc32.Checksum(records[offAttributes:], crc32c) != h.CRC:
		return h, &produceError{kerr.CorruptMessage.Code, "record batch CRC does not match its contents"}
	case h.Size() > int64(maxBytes):
		return h, &produceError{kerr.MessageTooLarge.Code, "record batch is larger than max.message.bytes"}
	case h.Attributes&attrControl != 0:
		return h, &produceError{kerr.InvalidRecord.Code, "clients may not send control batches"}
	case h.Attributes&attrCompression > 4:
		return h, &produceError{kerr.CorruptMessage.Code, "unknown compression codec"}
	case h.RecordCount <= 0 || h.LastOffsetDelta != h.RecordCount-1:
		return h, &produceError{kerr.InvalidRecord.Code, "record count does not match the last offset delta"}
	case h.ProducerID >= 0 && h.BaseSequence < 0:
		return h, &produceError{kerr.InvalidRecord.Code, "idempotent record batch has a negative base sequence"}
	}
	if perr := validateRecords(&h, records, maxBytes); perr != nil {
		return h, perr
	}
	if h.Attributes&attrTransactional != 0 && h.ProducerID < 0 {
		return h, &produceError{kerr.InvalidRecord.Code, "transactional record batch has no producer id"}
	}
	// A transactional batch is checked against the producer's transaction by the
	// partition (txn.go), after its sender verified it with the coordinator.
	return h, nil
}

// checkStored validates one batch read back from a segment during recovery: a sane
// length, magic 2 and a matching CRC. b holds the whole batch.
func checkStored(b []byte) bool {
	if len(b) < batchHeaderSize {
		return false
	}
	h := parseHeader(b)
	return h.Magic == 2 && h.Size() == int64(len(b)) &&
		crc32.Checksum(b[offAttributes:], crc32c) == h.CRC
}

// firstRecordAt finds, in an uncompressed batch, the first record whose timestamp is at
// least ts and returns its offset and timestamp (Apache answers ListOffsets with the exact
// record). A compressed batch is not opened: its base offset and max timestamp stand in.
func firstRecordAt(b []byte, ts int64) (int64, int64) {
	h := parseHeader(b)
	if h.Attributes&attrCompression != 0 || h.Attributes&0x08 != 0 {
		return h.BaseOffset, h.MaxTimestamp
	}
	recs := b[batchHeaderSize:]
	for i := int32(0); i < h.RecordCount && len(recs) > 0; i++ {
		length, n := binary.Varint(recs)
		if n <= 0 || length < 0 || int64(len(recs)-n) < length {
			break
		}
		body := recs[n : n+int(length)]
		recs = recs[n+int(length):]
		if len(body) < 1 {
			break
		}
		tsDelta, m := binary.Varint(body[1:])
		if m <= 0 {
			break
		}
		offDelta, k := binary.Varint(body[1+m:])
		if k <= 0 {
			break
		}
		if t := h.BaseTimestamp + tsDelta; t >= ts {
			return h.BaseOffset + offDelta, t
		}
	}
	return h.BaseOffset, h.MaxTimestamp
}
