package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A topic's compression.type other than "producer" is applied as Apache's LogValidator
// applies it (validateMessagesAndAssignOffsetsCompressed, the path that is not in
// place): a batch whose codec differs from the topic's is decompressed and its records
// compressed again with the topic's codec (or stored uncompressed), in a new batch
// with the same base offset, producer fields, timestamps and count, a new length and
// CRC; a batch already in the topic's codec is stored as sent. The connection does it
// in its own turn (Route.ValidateBatch), after the batch's records were validated, and
// the result is held to max.message.bytes again (Apache checks the size once more when
// validation may have changed it). Encoders are the libraries the decoders are from.

// topicCodec is the batch codec of a compression.type value; -1 for "producer".
func topicCodec(v string) int16 {
	switch v {
	case "uncompressed":
		return codecNone
	case "gzip":
		return codecGzip
	case "snappy":
		return codecSnappy
	case "lz4":
		return codecLz4
	case "zstd":
		return codecZstd
	}
	return -1
}

// zstdEncoder is one encoder for every batch: EncodeAll may be called concurrently and
// starts no goroutine.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
})

// recompress rewrites b in codec (-1: keep the producer's), within maxBytes.
func recompress(b *Batch, codec int16, maxBytes int32) *produceError {
	h := &b.h
	from := h.Attributes & attrCompression
	if codec < 0 || from == codec {
		return nil
	}
	recs := b.records[batchHeaderSize:]
	if from != codecNone {
		s := streamPool.Get().(*recordStream)
		defer s.release()
		if err := s.open(from, recs, decompressLimit(maxBytes)); err != nil {
			return &produceError{kerr.CorruptMessage.Code, codecName(from) + " record batch does not decompress"}
		}
		out, err := io.ReadAll(s.rr.br)
		if err != nil {
			return &produceError{kerr.CorruptMessage.Code, codecName(from) + " record batch does not decompress"}
		}
		recs = out
	}
	payload, err := compress(codec, recs)
	if err != nil {
		return &produceError{kerr.UnknownServerError.Code, fmt.Sprintf("records could not be compressed with %s", codecName(codec))}
	}
	out := make([]byte, batchHeaderSize+len(payload))
	copy(out, b.records[:batchHeaderSize])
	copy(out[batchHeaderSize:], payload)
	h.Attributes = h.Attributes&^attrCompression | codec
	h.Length = int32(len(out) - logOverhead)
	binary.BigEndian.PutUint16(out[offAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(h.Length))
	b.records = out
	b.resum()
	if h.Size() > int64(maxBytes) {
		return &produceError{kerr.MessageTooLarge.Code, fmt.Sprintf("record batch is larger than max.message.bytes once compressed with the topic's %s", codecName(codec))}
	}
	return nil
}

// compress is recs in codec: snappy as one raw block (what franz-go sends, and what
// snappy-java's reader takes without its framing), lz4 as a frame, gzip and zstd as
// streams.
func compress(codec int16, recs []byte) ([]byte, error) {
	switch codec {
	case codecNone:
		return bytes.Clone(recs), nil
	case codecSnappy:
		return s2.EncodeSnappy(nil, recs), nil
	case codecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, err
		}
		return enc.EncodeAll(recs, nil), nil
	}
	var buf bytes.Buffer
	var w io.WriteCloser
	if codec == codecGzip {
		w = gzip.NewWriter(&buf)
	} else {
		w = lz4.NewWriter(&buf)
	}
	if _, err := w.Write(recs); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
