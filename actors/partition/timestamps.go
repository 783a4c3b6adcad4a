package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A topic's timestamp settings, applied to every produced batch in the connection's
// turn (Route.ValidateBatch) as Apache's LogValidator applies them:
//
//   - message.timestamp.type=LogAppendTime: the batch is stamped with the broker's time,
//     its attributes' timestamp-type bit set and its max timestamp the broker's clock,
//     the CRC computed again (setMaxTimestamp); consumers then read that time for every
//     record of the batch, and the produce response carries it (log_append_time_ms). A
//     producer may not send a batch that claims LogAppendTime on such a topic
//     (INVALID_TIMESTAMP).
//   - CreateTime with message.timestamp.before.max.ms or .after.max.ms (KIP-937, Apache
//     3.6+; message.timestamp.difference.max.ms stands in for either left at its
//     default): a record whose timestamp is more than that before or after the broker's
//     clock fails its batch with INVALID_TIMESTAMP. A record without a timestamp (-1)
//     is not checked.

// attrLogAppendTime is the batch attributes' timestamp-type bit.
const attrLogAppendTime = 0x08

// timestampPolicy is a topic's message.timestamp.* settings, as a Route carries them.
type timestampPolicy struct {
	logAppend bool
	// bounded: a bound is set (the zero policy is CreateTime, unbounded);
	// beforeMS and afterMS are then the bounds, math.MaxInt64 for none.
	bounded           bool
	beforeMS, afterMS int64
}

// timestampPolicyOf is the policy of a topic's configs (their defaults where not set).
func timestampPolicyOf(c defaults, overrides map[string]string) timestampPolicy {
	get := func(name string) string { return c.of(overrides, name) }
	num := func(name string) int64 {
		n, err := strconv.ParseInt(get(name), 10, 64)
		if err != nil {
			return math.MaxInt64
		}
		return n
	}
	diff := num("message.timestamp.difference.max.ms")
	pol := timestampPolicy{logAppend: get("message.timestamp.type") == "LogAppendTime",
		beforeMS: num("message.timestamp.before.max.ms"), afterMS: num("message.timestamp.after.max.ms")}
	// LogConfig.getMessageTimestampBeforeMaxMs / AfterMaxMs: the deprecated difference
	// applies to a bound left at its default.
	if pol.beforeMS == math.MaxInt64 {
		pol.beforeMS = diff
	}
	if pol.afterMS == math.MaxInt64 {
		pol.afterMS = diff
	}
	pol.bounded = pol.beforeMS != math.MaxInt64 || pol.afterMS != math.MaxInt64
	return pol
}

// apply checks and stamps a validated batch b by the policy at the broker's time now
// (milliseconds). It rewrites b's bytes in place (they are the request's, the
// connection's own) and its header.
func (pol timestampPolicy) apply(b *Batch, now int64) *produceError {
	h := &b.h
	claims := h.Attributes&attrLogAppendTime != 0
	switch {
	case pol.logAppend && claims:
		return &produceError{kerr.InvalidTimestamp.Code, "record 0: Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."}
	case pol.logAppend:
		h.Attributes |= attrLogAppendTime
		h.MaxTimestamp = now
		binary.BigEndian.PutUint16(b.records[offAttributes:], uint16(h.Attributes))
		binary.BigEndian.PutUint64(b.records[offMaxTimestamp:], uint64(now))
		b.resum()
		b.appendTime = now
		return nil
	case claims && pol.bounded:
		// CreateTime: Apache reads every record's time as the batch's max timestamp, checks
		// it, and writes the batch back as CreateTime (setMaxTimestamp).
		if perr := pol.check(0, h.MaxTimestamp, now); perr != nil {
			return perr
		}
		fallthrough
	case claims:
		h.Attributes &^= attrLogAppendTime
		binary.BigEndian.PutUint16(b.records[offAttributes:], uint16(h.Attributes))
		b.resum()
		return nil
	case !pol.bounded:
		return nil
	}
	var perr *produceError
	err := eachTimestamp(h, b.records, func(i int32, ts int64) bool {
		perr = pol.check(i, ts, now)
		return perr == nil
	})
	if err != nil {
		// Validated already (validateRecords): a batch that reads differently now is a bug.
		return &produceError{kerr.CorruptMessage.Code, "record batch could not be read again: " + err.Error()}
	}
	return perr
}

// check is LogValidator.validateTimestamp of one record's timestamp ts.
func (pol timestampPolicy) check(i int32, ts, now int64) *produceError {
	if ts == -1 {
		return nil // no timestamp
	}
	diff := now - ts
	if diff > pol.beforeMS || -diff > pol.afterMS {
		return &produceError{kerr.InvalidTimestamp.Code, fmt.Sprintf(
			"record %d: Timestamp %d of message with offset %d is out of range. The timestamp should be within [%d, %d]",
			i, ts, i, satSub(now, pol.beforeMS), satAdd(now, pol.afterMS))}
	}
	return nil
}

func satSub(a, b int64) int64 {
	if b > 0 && a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// resum computes the batch's CRC-32C again after its attributes or timestamps changed.
func (b *Batch) resum() {
	b.h.CRC = crc32.Checksum(b.records[offAttributes:], crc32c)
	binary.BigEndian.PutUint32(b.records[offCRC:], b.h.CRC)
}

// eachTimestamp calls fn with each record's index and timestamp (the base timestamp plus
// its delta) until fn answers false. The batch passed validateRecords: a compressed one
// is streamed through its decoder again.
func eachTimestamp(h *header, batch []byte, fn func(i int32, ts int64) bool) error {
	codec := h.Attributes & attrCompression
	recs := batch[batchHeaderSize:]
	if codec == codecNone {
		for i := int32(0); i < h.RecordCount; i++ {
			length, n := varint32(recs)
			if n <= 0 || length < 1 || int(length) > len(recs)-n {
				return fmt.Errorf("record %d: bad length", i)
			}
			body := recs[n : n+int(length)]
			recs = recs[n+int(length):]
			d, m := binary.Varint(body[1:])
			if m <= 0 {
				return fmt.Errorf("record %d: bad timestamp delta", i)
			}
			if !fn(i, h.BaseTimestamp+d) {
				return nil
			}
		}
		return nil
	}
	s := streamPool.Get().(*recordStream)
	defer s.release()
	if err := s.open(codec, recs, 1<<62); err != nil { // bounded once already (validateRecords)
		return err
	}
	rr := &s.rr
	for i := int32(0); i < h.RecordCount; i++ {
		rr.rem = math.MaxInt64
		length, ok := rr.varint32()
		if !ok || length < 1 {
			return fmt.Errorf("record %d: bad length", i)
		}
		rr.rem = int64(length)
		if _, ok := rr.byte(); !ok {
			return fmt.Errorf("record %d: no attributes", i)
		}
		u, ok := rr.uvarint(binary.MaxVarintLen64)
		if !ok {
			return fmt.Errorf("record %d: bad timestamp delta", i)
		}
		d := int64(u>>1) ^ -int64(u&1)
		if !fn(i, h.BaseTimestamp+d) {
			return nil
		}
		if n, err := rr.br.Discard(int(rr.rem)); err != nil || int64(n) != rr.rem {
			return fmt.Errorf("record %d: torn", i)
		}
	}
	return nil
}
