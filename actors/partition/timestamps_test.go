package partition

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The timestamp policy on batches: LogAppendTime stamps the header (bit 3, max
// timestamp, a CRC that holds) and refuses a producer's claim of it; CreateTime takes
// a claim of LogAppendTime back to CreateTime, as Apache's setMaxTimestamp does; the
// bounds check each record's time (base + delta) and skip a record without one.
func TestTimestampPolicyApply(t *testing.T) {
	const now = 1_000_000_000
	batch := func(ts int64, attrs int16) *Batch {
		raw := testBatch(-1, -1, -1, 3, ts, []byte("v")) // records at ts, ts+1, ts+2
		binary.BigEndian.PutUint16(raw[offAttributes:], uint16(attrs))
		binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], crc32c))
		b, perr := validateBatch(raw, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		return b
	}
	logAppend := timestampPolicy{logAppend: true, beforeMS: math.MaxInt64, afterMS: math.MaxInt64}
	b := batch(5, 0)
	if perr := logAppend.apply(b, now); perr != nil {
		t.Fatal(perr.msg)
	}
	if h := parseHeader(b.records); h.Attributes&attrLogAppendTime == 0 || h.MaxTimestamp != now || b.appendTime != now || !checkStored(b.records) {
		t.Fatalf("stamped header %+v, append time %d, CRC holds %v", h, b.appendTime, checkStored(b.records))
	}
	if perr := logAppend.apply(batch(5, attrLogAppendTime), now); perr == nil || perr.code != kerr.InvalidTimestamp.Code {
		t.Fatalf("a claim of LogAppendTime on a LogAppendTime topic: %+v", perr)
	}
	b = batch(5, attrLogAppendTime)
	if perr := (timestampPolicy{}).apply(b, now); perr != nil || parseHeader(b.records).Attributes&attrLogAppendTime != 0 || !checkStored(b.records) {
		t.Fatalf("a claim of LogAppendTime on a CreateTime topic: %+v %+v", perr, parseHeader(b.records))
	}
	bounded := timestampPolicy{bounded: true, beforeMS: 10, afterMS: math.MaxInt64}
	if perr := bounded.apply(batch(now-12, 0), now); perr == nil || perr.code != kerr.InvalidTimestamp.Code || perr.msg[:9] != "record 0:" {
		t.Fatalf("records 12, 11 and 10 ms old, 10 allowed: %+v", perr)
	}
	if perr := bounded.apply(batch(now-10, 0), now); perr != nil {
		t.Fatalf("records 10 ms old and younger: %+v", perr)
	}
	if perr := bounded.apply(batch(-1, 0), now); perr == nil || perr.msg[:9] != "record 1:" {
		t.Fatalf("no timestamp, then 0 and 1: %+v", perr)
	}
	if perr := (timestampPolicy{}).apply(batch(0, 0), now); perr != nil {
		t.Fatalf("the zero policy refused: %+v", perr)
	}
}
