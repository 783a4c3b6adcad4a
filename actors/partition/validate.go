package partition

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
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

// validateRecords walks every record of a batch whose header already passed
// validateProduced, as Apache's LogValidator does by iterating the batch
// (DefaultRecordBatch's iterators and DefaultRecord.readFrom). A compressed batch is
// streamed through its codec's decoder and its records parsed as they come out
// (validateMessagesAndAssignOffsetsCompressed's streaming iterator): what it allocates
// does not grow with what it decompresses to, and max.message.bytes holds the batch
// as sent, not decompressed, as in Apache. Records are stored as sent, so whatever a
// consumer would fail to read is refused here instead of stalling every consumer of
// the partition behind it.
//
// Codes: data the codec cannot decode is CORRUPT_MESSAGE (Apache's decompression
// stream fails with a KafkaException, which it answers as UNKNOWN_SERVER_ERROR; the
// batch is corrupt, and a client treats that code as such); records that decompress
// past decompressLimit are MESSAGE_TOO_LARGE; a record whose structure is broken is
// INVALID_RECORD, Apache's InvalidRecordException.
func validateRecords(h *header, batch []byte, maxBytes int32) *produceError {
	return validateRecordsWithin(h, batch, decompressLimit(maxBytes))
}

// minDecompressLimit and decompressFactor bound the work of validating one compressed
// batch: its records may decompress to max(256 MiB, 32 × max.message.bytes). Apache
// has no bound; this one is far above what clients send (a batch is at most
// max.message.bytes compressed, and real data compresses tenfold or less), and keeps
// a zip bomb of a few KiB from costing seconds of a partition's time.
const (
	minDecompressLimit = 256 << 20
	decompressFactor   = 32
)

func decompressLimit(maxBytes int32) int64 {
	return max(minDecompressLimit, decompressFactor*int64(maxBytes))
}

// validateRecordsWithin is validateRecords with the decompressed bound given.
func validateRecordsWithin(h *header, batch []byte, limit int64) *produceError {
	codec := h.Attributes & attrCompression
	recs := batch[batchHeaderSize:]
	if codec == codecNone {
		return walkRecords(recs, h.RecordCount)
	}
	s := streamPool.Get().(*recordStream)
	defer s.release()
	if err := s.open(codec, recs, limit); err != nil {
		if errors.Is(err, errTooLarge) {
			return tooLarge(limit)
		}
		return &produceError{kerr.CorruptMessage.Code, codecName(codec) + " record batch does not decompress"}
	}
	index, why := walkStream(&s.rr, h.RecordCount)
	switch {
	case s.lim.over:
		return tooLarge(limit)
	case s.lim.err != nil:
		return &produceError{kerr.CorruptMessage.Code, codecName(codec) + " record batch does not decompress"}
	case why == "":
		return nil
	case index < 0:
		return &produceError{kerr.InvalidRecord.Code, why}
	}
	return invalidRecord(index, why)
}

func tooLarge(limit int64) *produceError {
	return &produceError{kerr.MessageTooLarge.Code, fmt.Sprintf("record batch decompresses to more than %d bytes", limit)}
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

// walkStream is walkRecords over decompressed records read from rr: exactly count
// records whose offset deltas run 0, 1, ... count-1, and nothing after them. Keys,
// values and headers are skipped, never held. It answers the index of the record at
// fault (-1 for the batch as a whole) and why, or "" when the records are sound; a
// read that failed (the decoder's error, the bound) shows in rr's source.
func walkStream(rr *recReader, count int32) (int32, string) {
	for i := int32(0); i < count; i++ {
		rr.rem = math.MaxInt64
		if _, err := rr.br.Peek(1); err != nil {
			return -1, "the batch holds fewer records than its count"
		}
		length, ok := rr.varint32()
		if !ok || length < 0 {
			return i, "bad record length"
		}
		rr.rem = int64(length)
		if why := rr.record(i); why != "" {
			if rr.failed {
				return i, "record length past the end of the batch"
			}
			return i, why
		}
		if rr.rem != 0 {
			return i, "record length does not match its fields"
		}
	}
	if _, err := rr.br.ReadByte(); err != io.EOF {
		if err != nil {
			return -1, "the batch does not decompress" // the source's error says which
		}
		return -1, "the batch holds more bytes than its records"
	}
	return 0, ""
}

// recReader reads the fields of one record, never past rem bytes.
type recReader struct {
	br     *bufio.Reader
	rem    int64 // bytes left in the current record
	failed bool  // a read from br failed: the batch ended, or its decoder or bound did
}

// record parses one record body of rr.rem bytes as checkRecord does.
func (rr *recReader) record(index int32) string {
	if _, ok := rr.byte(); !ok {
		return "record has no attributes"
	}
	if _, ok := rr.uvarint(binary.MaxVarintLen64); !ok {
		return "bad timestamp delta"
	}
	delta, ok := rr.varint32()
	if !ok {
		return "bad offset delta"
	}
	if delta != index {
		return "offset deltas are not consecutive from 0"
	}
	if !rr.skipBytes(true) {
		return "bad key length"
	}
	if !rr.skipBytes(true) {
		return "bad value length"
	}
	headers, ok := rr.varint32()
	if !ok || headers < 0 || int64(headers) > rr.rem {
		return "bad header count"
	}
	for j := int32(0); j < headers; j++ {
		if !rr.skipBytes(false) {
			return "bad header key length"
		}
		if !rr.skipBytes(true) {
			return "bad header value length"
		}
	}
	return ""
}

func (rr *recReader) byte() (byte, bool) {
	if rr.rem <= 0 {
		return 0, false
	}
	b, err := rr.br.ReadByte()
	if err != nil {
		rr.failed = true
		return 0, false
	}
	rr.rem--
	return b, true
}

// uvarint reads an unsigned varint of at most n bytes, refusing one that overflows 64
// bits as binary.Uvarint does.
func (rr *recReader) uvarint(n int) (uint64, bool) {
	var x uint64
	for i, s := 0, uint(0); i < n; i, s = i+1, s+7 {
		b, ok := rr.byte()
		if !ok {
			return 0, false
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, false
			}
			return x | uint64(b)<<s, true
		}
		x |= uint64(b&0x7f) << s
	}
	return 0, false
}

// varint32 reads a zigzag varint of at most five bytes that fits an int32 (varint32).
func (rr *recReader) varint32() (int32, bool) {
	u, ok := rr.uvarint(5)
	if !ok || u > 0xffffffff {
		return 0, false
	}
	return int32(uint32(u)>>1) ^ -int32(uint32(u)&1), true
}

// skipBytes skips a varint-length-prefixed field without holding it (skipBytes).
func (rr *recReader) skipBytes(nullable bool) bool {
	l, ok := rr.varint32()
	switch {
	case !ok:
		return false
	case l < 0:
		return nullable
	case int64(l) > rr.rem:
		return false
	}
	n, err := rr.br.Discard(int(l))
	rr.rem -= int64(n)
	if err != nil {
		rr.failed = true
		return false
	}
	return true
}

// recordStream is one pooled decompression pipeline: the compressed bytes, the codec's
// decoder (each keeps a window bounded by its format, not by the output), a bound on
// what comes out, and a small buffer the records are parsed from.
type recordStream struct {
	src    onlyReader
	gz     gzip.Reader
	lz4    *lz4.Reader
	zstd   *zstd.Decoder
	xerial xerialReader
	snappy []byte // a raw snappy block, decoded whole
	raw    bytes.Reader
	lim    boundedReader
	rr     recReader
}

// streamBuffer is the buffer records are parsed from; values are skipped through it.
const streamBuffer = 32 << 10

var streamPool = sync.Pool{New: func() any {
	return &recordStream{lz4: lz4.NewReader(nil), rr: recReader{br: bufio.NewReaderSize(nil, streamBuffer)}}
}}

// open readies s to read the records of src, compressed with codec, up to limit bytes.
func (s *recordStream) open(codec int16, src []byte, limit int64) error {
	s.src.r.Reset(src)
	var r io.Reader
	switch codec {
	case codecGzip:
		if err := s.gz.Reset(&s.src); err != nil {
			return fmt.Errorf("gzip header: %w", err)
		}
		r = &s.gz
	case codecLz4:
		s.lz4.Reset(&s.src)
		r = s.lz4
	case codecZstd:
		if s.zstd == nil {
			// Concurrency 1: the stream is decoded on the caller's goroutine, none is
			// started.
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
			if err != nil {
				return fmt.Errorf("zstd decoder: %w", err)
			}
			s.zstd = d
		}
		// A frame may declare a window up to the bound before anything is allocated for
		// it. A stream encoder declares its level's window without knowing the content
		// size (the Java client's zstd-jni: 2 MiB at level 3, 8 MiB at 19), so the bound
		// is at least zstdMaxWindow.
		window := max(limit/decompressFactor, zstdMaxWindow)
		if err := s.zstd.ResetWithOptions(&s.src, zstd.WithDecoderMaxMemory(uint64(window))); err != nil {
			return fmt.Errorf("zstd: %w", err)
		}
		r = s.zstd
	case codecSnappy:
		if len(src) >= 16 && bytes.HasPrefix(src, xerialHeader) {
			s.xerial.reset(src[16:], limit)
			r = &s.xerial
			break
		}
		out, err := decodeSnappyBlock(s.snappy[:0], src, limit)
		if err != nil {
			return err
		}
		s.snappy = out
		s.raw.Reset(out)
		r = &s.raw
	default:
		return errors.New("unknown compression codec")
	}
	s.lim = boundedReader{r: r, limit: limit}
	s.rr.br.Reset(&s.lim)
	return nil
}

// release drops every reference to the batch and pools s, unless a raw snappy block
// grew it past maxPooledBuffer.
func (s *recordStream) release() {
	s.src.r.Reset(nil)
	s.lim = boundedReader{}
	s.rr.br.Reset(nil)
	s.rr.failed = false
	s.raw.Reset(nil)
	s.xerial.reset(nil, 0)
	if s.zstd != nil {
		_ = s.zstd.Reset(nil)
	}
	if cap(s.snappy) > maxPooledBuffer || cap(s.xerial.buf) > maxPooledBuffer {
		if s.zstd != nil {
			s.zstd.Close()
		}
		return
	}
	streamPool.Put(s)
}

// onlyReader hides bytes.Reader's other methods from the decoders: the zstd decoder
// decodes a source it can see whole in one piece, holding all of its output.
type onlyReader struct{ r bytes.Reader }

func (o *onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// boundedReader passes at most limit bytes; past them it fails with errTooLarge. It
// keeps the decoder's first error other than io.EOF.
type boundedReader struct {
	r     io.Reader
	n     int64
	limit int64
	over  bool
	err   error
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.over {
		return 0, errTooLarge
	}
	if room := b.limit + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	if b.n += int64(n); b.n > b.limit {
		b.over = true
		return 0, errTooLarge
	}
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// snappyMaxRatio is the most a snappy block expands: a three-byte copy yields at most 64
// bytes. A block that claims more uses S2's extensions (or lies), and no Java consumer
// reads it.
const snappyMaxRatio = 22

// decodeSnappyBlock decodes one raw snappy block (franz-go sends one, unframed) into
// dst. A block cannot be decoded in pieces (a copy may reach back to its start), so it
// is decoded whole; snappyMaxRatio keeps that to a bounded multiple of the batch as
// sent.
func decodeSnappyBlock(dst, src []byte, limit int64) ([]byte, error) {
	l, err := s2.DecodedLen(src)
	switch {
	case err != nil:
		return nil, fmt.Errorf("snappy: %w", err)
	case int64(l) > snappyMaxRatio*int64(len(src)):
		return nil, fmt.Errorf("snappy: a %d-byte block claims %d bytes", len(src), l)
	case int64(l) > limit:
		return nil, errTooLarge
	}
	if cap(dst) < l {
		dst = make([]byte, l)
	}
	out, err := s2.Decode(dst[:l], src)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	return out, nil
}

// xerialHeader opens snappy-java's framed stream (the Java producer's snappy):
// a magic, then version and minimum compatible version; then blocks, each a big-endian
// length and one raw snappy block.
var xerialHeader = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// xerialReader decodes snappy-java's blocks one at a time.
type xerialReader struct {
	src   []byte // the blocks not yet decoded
	buf   []byte // the block decoded last
	out   []byte // what of it is unread
	limit int64
	err   error
}

func (x *xerialReader) reset(src []byte, limit int64) {
	*x = xerialReader{src: src, buf: x.buf[:0], limit: limit}
}

func (x *xerialReader) Read(p []byte) (int, error) {
	for len(x.out) == 0 {
		if x.err != nil {
			return 0, x.err
		}
		if len(x.src) == 0 {
			return 0, io.EOF
		}
		x.out, x.err = x.next()
	}
	n := copy(p, x.out)
	x.out = x.out[n:]
	return n, nil
}

func (x *xerialReader) next() ([]byte, error) {
	if len(x.src) < 4 {
		return nil, errors.New("snappy: torn xerial block length")
	}
	size := binary.BigEndian.Uint32(x.src)
	if int64(size) > int64(len(x.src)-4) {
		return nil, errors.New("snappy: xerial block past the end")
	}
	block := x.src[4 : 4+size]
	x.src = x.src[4+size:]
	out, err := decodeSnappyBlock(x.buf[:0], block, x.limit)
	if err != nil {
		return nil, err
	}
	x.buf = out
	return out, nil
}

// maxPooledBuffer keeps a buffer grown by one very large snappy block from staying pooled.
const maxPooledBuffer = 4 << 20
