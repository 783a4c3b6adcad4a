package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/logs"
)

// Compression codecs of the batch attributes' low three bits.
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

// zstdMaxWindow is the largest zstd window accepted below max.message.bytes: that of
// every level up to 19 when the encoder does not know the content size.
const zstdMaxWindow = 8 << 20

// errTooLarge is a compressed batch whose records decompress past the size limit.
var errTooLarge = errors.New("records decompress past the size limit")

// rejectedLog keeps refused batches, which a broken producer retries as fast as it is
// answered, to one line a second broker-wide (the metric counts every one).
var rejectedLog = logs.NewLimiter(time.Second)

// logRejected logs a batch refused by validateProduced. The reason is one of ours,
// never client text.
func (p *partitionActor) logRejected(perr *produceError, size int) {
	rejectedLog.Event(p.log.Warn()).Int16("error_code", perr.code).Str("reason", perr.msg).
		Int("batch_bytes", size).Msg("partition_produce_rejected")
}

// validateRecords walks every record of a batch whose header already passed
// validateProduced, as Apache's LogValidator does by iterating the batch
// (DefaultRecordBatch's iterators and DefaultRecord.readFrom): a compressed batch is
// decompressed first, its output bounded by maxBytes. Records are stored as sent, so
// whatever a consumer would fail to read is refused here instead of stalling every
// consumer of the partition behind it.
//
// Codes: data the codec cannot decode is CORRUPT_MESSAGE (Apache's decompression
// stream fails with a KafkaException, which it answers as UNKNOWN_SERVER_ERROR; the
// batch is corrupt, and a client treats that code as such); records that decompress
// past maxBytes are MESSAGE_TOO_LARGE; a record whose structure is broken is
// INVALID_RECORD, Apache's InvalidRecordException.
func validateRecords(h *header, batch []byte, maxBytes int32) *produceError {
	codec := h.Attributes & attrCompression
	recs := batch[batchHeaderSize:]
	if codec == codecNone {
		return walkRecords(recs, h.RecordCount)
	}
	buf := getBuffer()
	defer putBuffer(buf)
	out, err := decompress(buf, recs, codec, int64(maxBytes))
	switch {
	case errors.Is(err, errTooLarge):
		return &produceError{kerr.MessageTooLarge.Code, "record batch decompresses to more than max.message.bytes"}
	case err != nil:
		return &produceError{kerr.CorruptMessage.Code, codecName(codec) + " record batch does not decompress"}
	}
	return walkRecords(out, h.RecordCount)
}

// walkRecords checks that recs holds exactly count v2 records (DefaultRecord: length,
// attributes, timestamp delta, offset delta, key, value, headers) whose offset deltas
// run 0, 1, ... count-1. It allocates nothing unless it fails.
//
// Apache rewrites a compressed batch whose inner offsets are not consecutive and stores
// an uncompressed one as sent; kaas stores every batch as sent and serves offsets
// from the deltas, so it refuses such a batch with INVALID_RECORD.
func walkRecords(recs []byte, count int32) *produceError {
	for i := int32(0); i < count; i++ {
		if len(recs) == 0 {
			return invalidRecord(i, "the batch holds fewer records than its count")
		}
		length, n := varint32(recs)
		if n <= 0 {
			return invalidRecord(i, "bad record length")
		}
		recs = recs[n:]
		if length < 0 || int64(length) > int64(len(recs)) {
			return invalidRecord(i, "record length past the end of the batch")
		}
		if msg := checkRecord(recs[:length], i); msg != "" {
			return invalidRecord(i, msg)
		}
		recs = recs[length:]
	}
	if len(recs) != 0 {
		return &produceError{kerr.InvalidRecord.Code, "the batch holds more bytes than its records"}
	}
	return nil
}

// checkRecord parses one record body (what its length counts); "" when it is sound.
func checkRecord(b []byte, index int32) string {
	if len(b) < 1 {
		return "record has no attributes"
	}
	b = b[1:] // attributes: unused in v2
	if _, n := binary.Varint(b); n <= 0 {
		return "bad timestamp delta"
	} else {
		b = b[n:]
	}
	delta, n := varint32(b)
	if n <= 0 {
		return "bad offset delta"
	}
	if delta != index {
		return "offset deltas are not consecutive from 0"
	}
	b = b[n:]
	var ok bool
	if b, ok = skipBytes(b, true); !ok {
		return "bad key length"
	}
	if b, ok = skipBytes(b, true); !ok {
		return "bad value length"
	}
	headers, n := varint32(b)
	if n <= 0 || headers < 0 || int(headers) > len(b)-n {
		return "bad header count"
	}
	b = b[n:]
	for j := int32(0); j < headers; j++ {
		if b, ok = skipBytes(b, false); !ok {
			return "bad header key length"
		}
		if b, ok = skipBytes(b, true); !ok {
			return "bad header value length"
		}
	}
	if len(b) != 0 {
		return "record length does not match its fields"
	}
	return ""
}

func invalidRecord(index int32, why string) *produceError {
	return &produceError{kerr.InvalidRecord.Code, fmt.Sprintf("record %d: %s", index, why)}
}

// skipBytes skips a varint-length-prefixed field. A negative length is null where the
// field is nullable (key, value, header value), as Utils.readBytes reads it; a header
// key may not be null.
func skipBytes(b []byte, nullable bool) ([]byte, bool) {
	l, n := varint32(b)
	switch {
	case n <= 0:
		return b, false
	case l < 0 && nullable:
		return b[n:], true
	case l < 0 || int(l) > len(b)-n:
		return b, false
	}
	return b[n+int(l):], true
}

// varint32 reads a zigzag varint of at most five bytes that fits an int32, as
// ByteUtils.readVarint does; n <= 0 if it does not.
func varint32(b []byte) (int32, int) {
	if len(b) > 0 && b[0] < 0x80 { // the common one-byte case
		u := uint32(b[0])
		return int32(u>>1) ^ -int32(u&1), 1
	}
	u, n := binary.Uvarint(b)
	if n <= 0 || n > 5 || u > 0xffffffff {
		return 0, -1
	}
	return int32(uint32(u)>>1) ^ -int32(uint32(u)&1), n
}

func codecName(codec int16) string {
	switch codec {
	case codecGzip:
		return "gzip"
	case codecSnappy:
		return "snappy"
	case codecLz4:
		return "lz4"
	case codecZstd:
		return "zstd"
	}
	return "uncompressed"
}

// decompress decodes src into buf with the libraries franz-go uses, reading at most
// limit bytes of output: a small batch that would inflate without bound (a zip bomb)
// fails with errTooLarge before it can allocate more.
func decompress(buf *bytes.Buffer, src []byte, codec int16, limit int64) ([]byte, error) {
	switch codec {
	case codecGzip:
		d := gzipPool.Get().(*streamDecoder)
		defer gzipPool.Put(d)
		d.src.Reset(src)
		if err := d.gz.Reset(&d.src); err != nil {
			return nil, fmt.Errorf("gzip header: %w", err)
		}
		return readLimited(buf, &d.gz, limit)
	case codecLz4:
		d := lz4Pool.Get().(*streamDecoder)
		defer lz4Pool.Put(d)
		d.src.Reset(src)
		d.lz4.Reset(&d.src)
		return readLimited(buf, d.lz4, limit)
	case codecSnappy:
		out, err := decodeSnappy(buf.Bytes()[:0], src, limit)
		if err == nil {
			keep(buf, out)
		}
		return out, err
	case codecZstd:
		d := zstdPool.Get().(*zstd.Decoder)
		defer zstdPool.Put(d)
		// The decoder refuses a frame that declares, or grows to, more than the bound
		// (counted over all frames) before allocating for it. The bound is also the
		// largest window a frame may declare, and a stream encoder declares its level's
		// window without knowing the content size (the Java client's zstd-jni: 2 MiB at
		// level 3, 8 MiB at 19), so the bound is at least zstdMaxWindow; DecodeAll keeps
		// its history in the output, so a window costs nothing beyond what is decoded,
		// and the output is held to limit below.
		bound := max(limit, zstdMaxWindow)
		if err := d.ResetWithOptions(nil, zstd.WithDecoderMaxMemory(uint64(bound))); err != nil {
			return nil, fmt.Errorf("zstd reset: %w", err)
		}
		out, err := d.DecodeAll(src, buf.Bytes()[:0])
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, errTooLarge
		}
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		keep(buf, out)
		if int64(len(out)) > limit {
			return nil, errTooLarge
		}
		return out, nil
	}
	return nil, errors.New("unknown compression codec")
}

// readLimited reads r to its end into buf, failing past limit bytes.
func readLimited(buf *bytes.Buffer, r io.Reader, limit int64) ([]byte, error) {
	buf.Reset()
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}

// xerialHeader opens snappy-java's framed stream (the Java producer's snappy):
// a magic, then version and minimum compatible version; then blocks, each a big-endian
// length and one raw snappy block. franz-go sends a raw block without framing.
var xerialHeader = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func decodeSnappy(dst, src []byte, limit int64) ([]byte, error) {
	if len(src) < 16 || !bytes.HasPrefix(src, xerialHeader) {
		if l, err := s2.DecodedLen(src); err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		} else if int64(l) > limit {
			return nil, errTooLarge
		}
		return s2.Decode(dst[:cap(dst)], src)
	}
	src = src[16:]
	var total int64
	for rem := src; len(rem) > 0; {
		if len(rem) < 4 {
			return nil, errors.New("snappy: torn xerial block length")
		}
		size := binary.BigEndian.Uint32(rem)
		rem = rem[4:]
		if int64(size) > int64(len(rem)) {
			return nil, errors.New("snappy: xerial block past the end")
		}
		l, err := s2.DecodedLen(rem[:size])
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		if total += int64(l); total > limit {
			return nil, errTooLarge
		}
		rem = rem[size:]
	}
	if int64(cap(dst)) < total {
		dst = make([]byte, 0, total)
	}
	out := dst[:0]
	for len(src) > 0 {
		size := binary.BigEndian.Uint32(src)
		block := src[4 : 4+size]
		src = src[4+size:]
		l, _ := s2.DecodedLen(block)
		at := len(out)
		d, err := s2.Decode(out[at:at+l], block)
		if err != nil {
			return nil, fmt.Errorf("snappy: %w", err)
		}
		out = out[:at+len(d)]
	}
	return out, nil
}

// streamDecoder is a pooled gzip or lz4 reader with the bytes.Reader it reads from.
type streamDecoder struct {
	src bytes.Reader
	gz  gzip.Reader
	lz4 *lz4.Reader
}

var (
	gzipPool = sync.Pool{New: func() any { return new(streamDecoder) }}
	lz4Pool  = sync.Pool{New: func() any { return &streamDecoder{lz4: lz4.NewReader(nil)} }}
	zstdPool = sync.Pool{New: func() any {
		// Concurrency 1: DecodeAll decodes on the caller's goroutine, and the pool gives
		// each partition actor its own decoder.
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			panic(fmt.Sprintf("zstd decoder: %v", err)) // only for invalid options
		}
		return d
	}}
	bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// maxPooledBuffer keeps a buffer grown by one very large batch from staying pooled.
const maxPooledBuffer = 4 << 20

func getBuffer() *bytes.Buffer { return bufPool.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		b.Reset()
		bufPool.Put(b)
	}
}

// keep makes buf own out when a decoder allocated a larger array, so the pool keeps it.
func keep(buf *bytes.Buffer, out []byte) {
	if cap(out) > buf.Cap() {
		*buf = *bytes.NewBuffer(out[:0])
	}
}
