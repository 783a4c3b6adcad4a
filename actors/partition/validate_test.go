package partition

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	mrand "math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testRecords encodes records with the given offset deltas and values, as kgo does.
func testRecords(deltas []int32, values ...[]byte) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: deltas[i], TimestampDelta: int32(i), Key: []byte("k"), Value: v,
			Headers: []kmsg.Header{{Key: "h", Value: []byte("v")}}}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	return recs
}

func seqDeltas(n int) []int32 {
	d := make([]int32, n)
	for i := range d {
		d[i] = int32(i)
	}
	return d
}

// wrapRecords puts recs (already compressed when attrs says so) in a batch header
// claiming count records, with a correct length and CRC-32C.
func wrapRecords(attrs int16, count int32, recs []byte) []byte {
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: count - 1,
		FirstTimestamp: 1000, MaxTimestamp: 1000 + int64(count), ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: count, Records: recs,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(len(out)-logOverhead))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], crc32c))
	return out
}

func compressWith(t testing.TB, codec kgo.CompressionCodec, raw []byte) ([]byte, int16) {
	t.Helper()
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	out, typ := c.Compress(new(bytes.Buffer), raw)
	if typ == 0 {
		t.Fatalf("codec %v did not compress", codec)
	}
	return append([]byte(nil), out...), int16(typ)
}

// xerialFrame frames raw as snappy-java does (the Java producer's snappy).
func xerialFrame(raw []byte, block int) []byte {
	out := append([]byte(nil), xerialHeader...)
	out = append(out, 0, 0, 0, 1, 0, 0, 0, 1)
	for len(raw) > 0 {
		n := min(block, len(raw))
		enc := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(enc)))
		out = append(out, enc...)
		raw = raw[n:]
	}
	return out
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

func TestValidateRecords(t *testing.T) {
	three := testRecords(seqDeltas(3), []byte("a"), []byte("bb"), []byte("ccc"))
	type tc struct {
		name  string
		batch []byte
		max   int32
		code  int16
	}
	cases := []tc{
		{"uncompressed", wrapRecords(0, 3, three), 1 << 20, 0},
		{"xerial snappy", wrapRecords(codecSnappy, 3, xerialFrame(three, 7)), 1 << 20, 0},
		{"garbage length varint", wrapRecords(0, 1, bytes.Repeat([]byte{0xff}, 12)), 1 << 20, kerr.InvalidRecord.Code},
		{"negative length", wrapRecords(0, 1, append([]byte{0x01}, three[1:]...)), 1 << 20, kerr.InvalidRecord.Code},
		{"length past end", wrapRecords(0, 3, three[:len(three)-1]), 1 << 20, kerr.InvalidRecord.Code},
		{"count above records", wrapRecords(0, 4, three), 1 << 20, kerr.InvalidRecord.Code},
		{"count below records", wrapRecords(0, 2, three), 1 << 20, kerr.InvalidRecord.Code},
		{"offset deltas with a gap", wrapRecords(0, 3, testRecords([]int32{0, 2, 3}, []byte("a"), []byte("b"), []byte("c"))), 1 << 20, kerr.InvalidRecord.Code},
		{"offset deltas reversed", wrapRecords(0, 2, testRecords([]int32{1, 0}, []byte("a"), []byte("b"))), 1 << 20, kerr.InvalidRecord.Code},
		{"empty records", wrapRecords(0, 1, nil), 1 << 20, kerr.InvalidRecord.Code},
		{"xerial torn", wrapRecords(codecSnappy, 3, xerialFrame(three, 7)[:30]), 1 << 20, kerr.CorruptMessage.Code},
	}
	// A record whose header count is negative, then one claiming more headers than bytes.
	for name, hc := range map[string]byte{"negative header count": 0x01, "header count past end": 0x7e} {
		r := kmsg.Record{Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rec := r.AppendTo(nil)
		rec[len(rec)-1] = hc
		cases = append(cases, tc{name, wrapRecords(0, 1, rec), 1 << 20, kerr.InvalidRecord.Code})
	}
	// Apache reads any negative key or value length as null, and refuses a negative
	// header key length.
	{
		r := kmsg.Record{Key: []byte("k"), Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rec := r.AppendTo(nil)
		// Bytes: length, attributes, timestamp delta, offset delta, key length, "k", ...
		// Rewrite the key length to -2 (zigzag 3) and drop "k"; the record is one byte
		// shorter (zigzag: two less).
		nullKey := append([]byte{rec[0] - 2}, rec[1:4]...)
		nullKey = append(append(nullKey, 0x03), rec[6:]...)
		cases = append(cases, tc{"negative key length is null", wrapRecords(0, 1, nullKey), 1 << 20, 0})
		h := kmsg.Record{Value: []byte("v"), Headers: []kmsg.Header{{Key: "", Value: nil}}}
		h.Length = int32(len(h.AppendTo(nil)) - 1)
		hrec := h.AppendTo(nil)
		hrec[len(hrec)-2] = 0x01 // header key length -1
		cases = append(cases, tc{"negative header key length", wrapRecords(0, 1, hrec), 1 << 20, kerr.InvalidRecord.Code})
	}
	// A record whose length counts one byte more than its fields.
	{
		r := kmsg.Record{Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)))
		rec := append(r.AppendTo(nil), 0)
		cases = append(cases, tc{"length beyond fields", wrapRecords(0, 1, rec), 1 << 20, kerr.InvalidRecord.Code})
	}
	bomb := testRecords(seqDeltas(1), make([]byte, 200<<10))
	garbage := bytes.Repeat([]byte("not compressed data, "), 8)
	for _, c := range codecs {
		ok, attrs := compressWith(t, c.codec, three)
		cases = append(cases,
			tc{c.name, wrapRecords(attrs, 3, ok), 1 << 20, 0},
			tc{c.name + " garbage", wrapRecords(attrs, 3, garbage), 1 << 20, kerr.CorruptMessage.Code},
			tc{c.name + " truncated", wrapRecords(attrs, 3, ok[:len(ok)*2/3]), 1 << 20, kerr.CorruptMessage.Code},
			tc{c.name + " wrong count", wrapRecords(attrs, 2, ok), 1 << 20, kerr.InvalidRecord.Code},
		)
		small, attrs := compressWith(t, c.codec, bomb)
		b := wrapRecords(attrs, 1, small)
		if len(b) > 20<<10 {
			t.Fatalf("%s bomb is %d bytes", c.name, len(b))
		}
		cases = append(cases,
			tc{c.name + " decompresses past max (held as sent)", b, 100 << 10, 0},
			tc{c.name + " decompresses within max", b, 1 << 20, 0})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, perr := validateProduced(c.batch, c.max)
			var got int16
			if perr != nil {
				got = perr.code
			}
			if got != c.code {
				t.Fatalf("code %d, want %d (%v)", got, c.code, perr)
			}
			if perr != nil && perr.msg == "" {
				t.Fatal("no message")
			}
		})
	}
}

// TestValidateZstdLargeWindow: a streaming zstd producer (the Java client's zstd-jni at
// level 3 declares a 2 MiB window) may declare a window larger than max.message.bytes
// for a small batch; only the decompressed size counts.
func TestValidateZstdLargeWindow(t *testing.T) {
	raw := testRecords(seqDeltas(3), []byte("a"), []byte("bb"), []byte("ccc"))
	// One frame, no content size, window descriptor 4 MiB (exponent 12), one raw last
	// block (RFC 8878 3.1.1): what a stream encoder writes.
	comp := bytes.NewBuffer([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 12 << 3})
	bh := uint32(len(raw))<<3 | 1
	comp.Write([]byte{byte(bh), byte(bh >> 8), byte(bh >> 16)})
	comp.Write(raw)
	var h zstd.Header
	if err := h.Decode(comp.Bytes()); err != nil || h.WindowSize != 4<<20 {
		t.Fatalf("frame header: %+v %v", h, err)
	}
	if _, perr := validateProduced(wrapRecords(codecZstd, 3, comp.Bytes()), 1<<20); perr != nil {
		t.Fatalf("small batch with a 4 MiB window: %v", perr)
	}
}

func TestValidateNegativeSequence(t *testing.T) {
	b := testBatch(7, 0, -1, 1, 1000, []byte("v"))
	if _, perr := validateProduced(b, 1<<20); perr == nil || perr.code != kerr.InvalidRecord.Code {
		t.Fatalf("idempotent batch with sequence -1: %v", perr)
	}
}

// TestValidateUncompressedAllocs keeps the common case free of allocations.
func TestValidateUncompressedAllocs(t *testing.T) {
	b := testBatch(-1, -1, -1, 100, 1000, make([]byte, 100))
	if n := testing.AllocsPerRun(100, func() {
		if _, perr := validateProduced(b, 1<<20); perr != nil {
			t.Fatal(perr)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per uncompressed batch", n)
	}
}

// BenchmarkValidateProduced measures validation of a 16 KiB batch of 1 KiB records,
// compressible (text-like) and random (what e2e/databench produces). MB/s counts the
// uncompressed records.
func BenchmarkValidateProduced(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		b.Run(data, func(b *testing.B) { benchValidate(b, data == "random") })
	}
}

func benchValidate(b *testing.B, random bool) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	vals := make([][]byte, 16)
	for i := range vals {
		vals[i] = bytes.Repeat([]byte{byte(i), 'x', 'y', 'z'}, 256)
		if random {
			for j := range vals[i] {
				vals[i][j] = byte(rng.Uint32())
			}
		}
	}
	raw := testRecords(seqDeltas(len(vals)), vals...)
	run := func(b *testing.B, batch []byte) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, perr := validateProduced(batch, 1<<20); perr != nil {
				b.Fatal(perr)
			}
		}
	}
	b.Run("none", func(b *testing.B) { run(b, wrapRecords(0, int32(len(vals)), raw)) })
	for _, c := range codecs {
		comp, attrs := compressWith(b, c.codec, raw)
		b.Run(c.name, func(b *testing.B) { run(b, wrapRecords(attrs, int32(len(vals)), comp)) })
	}
}

// FuzzValidateRecords wraps arbitrary record bytes in a batch with a correct CRC under
// each codec: validation must not panic, and a batch it accepts must be readable the way
// a franz-go consumer reads it (kgo's decompressor, then kmsg.Record, offset deltas in
// order, nothing left over).
func FuzzValidateRecords(f *testing.F) {
	three := testRecords(seqDeltas(3), []byte("a"), []byte("bb"), []byte("ccc"))
	f.Add(uint8(0), uint16(3), three)
	f.Add(uint8(0), uint16(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(codecSnappy), uint16(3), xerialFrame(three, 5))
	for _, c := range codecs {
		comp, attrs := compressWith(f, c.codec, three)
		f.Add(uint8(attrs), uint16(3), comp)
		f.Add(uint8(attrs), uint16(2), comp)
	}
	dec := kgo.DefaultDecompressor()
	f.Fuzz(func(t *testing.T, codec uint8, count uint16, recs []byte) {
		codec %= 5
		n := int32(count % 512)
		if n == 0 {
			return
		}
		b := wrapRecords(int16(codec), n, recs)
		if _, perr := validateProduced(b, 1<<16); perr != nil {
			return
		}
		raw, err := dec.Decompress(recs, kgo.CompressionCodecType(codec))
		if err != nil {
			t.Fatalf("accepted a batch kgo cannot decompress: %v", err)
		}
		for i := int32(0); i < n; i++ {
			l, k := binary.Varint(raw)
			if k <= 0 || l < 0 || int64(len(raw)-k) < l {
				t.Fatalf("record %d: bad length accepted", i)
			}
			var r kmsg.Record
			if err := r.ReadFrom(raw[:k+int(l)]); err != nil {
				t.Fatalf("record %d: kmsg cannot read it: %v", i, err)
			}
			if r.OffsetDelta != i {
				t.Fatalf("record %d has offset delta %d", i, r.OffsetDelta)
			}
			raw = raw[k+int(l):]
		}
		if len(raw) != 0 {
			t.Fatalf("%d bytes after the last record accepted", len(raw))
		}
	})
}

// highlyCompressible are the records of a batch that decompresses to about 3 MiB: one
// record of 3 MiB of zeros, and 3072 records of 1 KiB of zeros.
func highlyCompressible() map[string]struct {
	count int32
	raw   []byte
} {
	many := make([][]byte, 3072)
	for i := range many {
		many[i] = make([]byte, 1<<10)
	}
	return map[string]struct {
		count int32
		raw   []byte
	}{
		"one 3 MiB record": {1, testRecords(seqDeltas(1), make([]byte, 3<<20))},
		"3072 records":     {3072, testRecords(seqDeltas(3072), many...)},
	}
}

// TestValidateCompressibleBeyondMaxBytes: Apache holds max.message.bytes against the
// batch as sent, so a few KiB that decompress to 3 MiB are accepted under the default
// 1 MiB limit (franz-go's TestConsumeMaxDecompressBatchBytes produces one).
func TestValidateCompressibleBeyondMaxBytes(t *testing.T) {
	const maxBytes = 1048588 // the default max.message.bytes
	for name, in := range highlyCompressible() {
		for _, c := range codecs {
			comp, attrs := compressWith(t, c.codec, in.raw)
			b := wrapRecords(attrs, in.count, comp)
			if len(b) > maxBytes/4 {
				t.Fatalf("%s %s: %d bytes compressed", c.name, name, len(b))
			}
			if _, perr := validateProduced(b, maxBytes); perr != nil {
				t.Errorf("%s, %s: %d bytes sent, %d decompressed: refused %d (%s)",
					c.name, name, len(b), len(in.raw), perr.code, perr.msg)
			}
		}
		b := wrapRecords(codecSnappy, in.count, xerialFrame(in.raw, 32<<10))
		if _, perr := validateProduced(b, maxBytes); perr != nil {
			t.Errorf("xerial snappy, %s: refused %d (%s)", name, perr.code, perr.msg)
		}
	}
}

// TestValidateDecompressLimit: records that decompress past the bound on validation work
// are refused with MESSAGE_TOO_LARGE, each codec, one record or many.
func TestValidateDecompressLimit(t *testing.T) {
	for name, in := range highlyCompressible() {
		for _, c := range codecs {
			comp, attrs := compressWith(t, c.codec, in.raw)
			h := parseHeader(wrapRecords(attrs, in.count, comp))
			b := wrapRecords(attrs, in.count, comp)
			if perr := validateRecordsWithin(&h, b, 1<<20); perr == nil || perr.code != kerr.MessageTooLarge.Code {
				t.Errorf("%s, %s past a 1 MiB bound: %v", c.name, name, perr)
			}
			if perr := validateRecordsWithin(&h, b, 4<<20); perr != nil {
				t.Errorf("%s, %s within a 4 MiB bound: %v", c.name, name, perr)
			}
		}
	}
}

// TestValidateMemoryIndependentOfSize: validating a compressed batch streams its records
// through the decoder, so what it allocates does not grow with what the batch
// decompresses to (64 MiB here). A raw snappy block (franz-go's snappy) cannot be
// decoded in pieces, so it is decoded whole; its size is bounded by the batch's, which
// TestValidateSnappyRatio checks.
func TestValidateMemoryIndependentOfSize(t *testing.T) {
	if testing.Short() {
		t.Skip("decompresses 32 MiB per codec")
	}
	// More than three times the window below: a validation whose memory grew with the
	// batch's decompressed size could not stay inside it.
	const decompressed = 32 << 20
	// The most any codec's decoder needs at once: an lz4 frame's blocks are up to 4 MiB
	// and its reader holds one as sent and one decoded. Those buffers come from pools,
	// which the race detector empties at random, so a run may pay for both.
	const window = 2*4<<20 + 1<<20
	many := make([][]byte, decompressed>>20)
	for i := range many {
		many[i] = make([]byte, 1<<20)
	}
	inputs := map[string]struct {
		count int32
		raw   []byte
	}{
		"one record":   {1, testRecords(seqDeltas(1), make([]byte, decompressed))},
		"many records": {int32(len(many)), testRecords(seqDeltas(len(many)), many...)},
	}
	for name, in := range inputs {
		batches := map[string][]byte{"xerial snappy": wrapRecords(codecSnappy, in.count, xerialFrame(in.raw, 32<<10))}
		for _, c := range codecs {
			if c.name == "snappy" {
				continue
			}
			comp, attrs := compressWith(t, c.codec, in.raw)
			batches[c.name] = wrapRecords(attrs, in.count, comp)
		}
		for codec, b := range batches {
			if _, perr := validateProduced(b, 16<<20); perr != nil { // warms the pools
				t.Fatalf("%s, %s: %v", codec, name, perr)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, perr := validateProduced(b, 16<<20)
			runtime.ReadMemStats(&after)
			if perr != nil {
				t.Fatalf("%s, %s: %v", codec, name, perr)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s, %s: %d bytes sent, %d allocated", codec, name, len(b), alloc)
			if alloc > window {
				t.Errorf("%s, %s: %d bytes allocated to validate %d decompressed", codec, name, alloc, decompressed)
			}
		}
	}
}

// TestValidateSnappyRatio: a snappy block expands at most 64 bytes for every 3 it holds,
// so one that claims more is no snappy block (it would take S2's extensions, which no
// Java consumer reads) and is refused before anything is allocated for it.
func TestValidateSnappyRatio(t *testing.T) {
	claim := binary.AppendUvarint(nil, 100<<20)
	b := wrapRecords(codecSnappy, 1, append(claim, bytes.Repeat([]byte{0xfe, 0x01, 0x00}, 30)...))
	if _, perr := validateProduced(b, 1<<20); perr == nil || perr.code != kerr.CorruptMessage.Code {
		t.Fatalf("a 100-byte snappy block claiming 100 MiB: %v", perr)
	}
}
