package partition

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testBatch builds an uncompressed RecordBatch v2 of n records as a producer sends it.
func testBatch(pid int64, epoch int16, seq int32, n int, ts int64, value []byte) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta: int32(i), Value: value}
		// AppendTo writes Length first: measure with a zero (one-byte) length, then set it.
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2,
		LastOffsetDelta: int32(n - 1), FirstTimestamp: ts, MaxTimestamp: ts + int64(n-1),
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(n), Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(len(out)-logOverhead))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], crc32c))
	return out
}

func TestValidateProduced(t *testing.T) {
	good := testBatch(-1, -1, -1, 3, 1000, []byte("v"))
	mut := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	cases := []struct {
		name string
		b    []byte
		max  int32
		code int16
	}{
		{"good", good, 1 << 20, 0},
		{"short", good[:20], 1 << 20, kerr.InvalidRecord.Code},
		{"empty", nil, 1 << 20, kerr.InvalidRecord.Code},
		{"crc", mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), 1 << 20, kerr.CorruptMessage.Code},
		{"length", mut(func(b []byte) []byte { return b[:len(b)-1] }), 1 << 20, kerr.CorruptMessage.Code},
		{"two batches", append(append([]byte(nil), good...), good...), 1 << 20, kerr.InvalidRecord.Code},
		{"magic", mut(func(b []byte) []byte { b[offMagic] = 1; return b }), 1 << 20, kerr.InvalidRecord.Code},
		{"too large", good, int32(len(good) - 1), kerr.MessageTooLarge.Code},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, perr := validateProduced(c.b, c.max)
			var got int16
			if perr != nil {
				got = perr.code
			}
			if got != c.code {
				t.Fatalf("code %d, want %d (%v)", got, c.code, perr)
			}
		})
	}
}

func TestProducersCheck(t *testing.T) {
	ps := producers{}
	h := func(epoch int16, seq int32, n int32, base int64) header {
		return header{ProducerID: 7, ProducerEpoch: epoch, BaseSequence: seq, LastOffsetDelta: n - 1, RecordCount: n, BaseOffset: base}
	}
	first := h(0, 5, 1, 0)
	if _, _, code := ps.check(&first, true); code != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("never-written partition accepted seq 5: %d", code)
	}
	if _, _, code := ps.check(&first, false); code != 0 {
		t.Fatalf("unknown producer rejected: %d", code)
	}
	b0 := h(0, 0, 3, 10)
	ps.record(&b0)
	dup := h(0, 0, 3, 0)
	if off, isDup, _ := ps.check(&dup, false); !isDup || off != 10 {
		t.Fatalf("duplicate not found: %v %d", isDup, off)
	}
	gap := h(0, 4, 1, 0)
	if _, _, code := ps.check(&gap, false); code != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap accepted: %d", code)
	}
	next := h(0, 3, 1, 0)
	if _, _, code := ps.check(&next, false); code != 0 {
		t.Fatalf("next rejected: %d", code)
	}
	old := h(-1+0, 3, 1, 0)
	old.ProducerEpoch = -1
	ps[7].epoch = 1
	if _, _, code := ps.check(&old, false); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old epoch accepted: %d", code)
	}
	bump := h(2, 1, 1, 0)
	if _, _, code := ps.check(&bump, false); code != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("new epoch not at 0 accepted: %d", code)
	}
	if got := incSeq(0x7fffffff, 1); got != 0 {
		t.Fatalf("sequence wrap: %d", got)
	}
}
