package partition_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// compressedBatch is a RecordBatch v2 of count records whose bytes raw holds, compressed
// with codec, with a correct length and CRC-32C.
func compressedBatch(t *testing.T, codec kgo.CompressionCodec, count int32, raw []byte) []byte {
	t.Helper()
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	comp, typ := c.Compress(new(bytes.Buffer), raw)
	if typ == 0 {
		t.Fatalf("%v: not compressed", codec)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(typ), LastOffsetDelta: count - 1,
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: count, Records: append([]byte(nil), comp...)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func zeroRecords(n, size int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: make([]byte, size)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	return recs
}

// TestProduceHighlyCompressible: a batch of a few KiB that decompresses to 3 MiB is
// within the default max.message.bytes (Apache holds it against the batch as sent), with
// every codec, one record or many; it is stored as sent and fetched back byte for byte.
// A truncated one is refused with CORRUPT_MESSAGE and stores nothing.
func TestProduceHighlyCompressible(t *testing.T) {
	b := brokertest.Start(t, nil) // message.max.bytes is 1048588
	c := brokertest.Dial(t, b.Addr())
	create := kmsg.NewPtrCreateTopicsRequest()
	create.SetVersion(5)
	create.TimeoutMillis = 5000
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "zeros", 1, 1
	create.Topics = append(create.Topics, ct)
	if r := c.Roundtrip(create, 9).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %+v", r.Topics[0])
	}
	inputs := []struct {
		name  string
		count int32
		raw   []byte
	}{
		{"one 3 MiB record", 1, zeroRecords(1, 3<<20)},
		{"3072 records of 1 KiB", 3072, zeroRecords(3072, 1<<10)},
	}
	var next int64
	for _, in := range inputs {
		for _, cd := range []struct {
			name  string
			codec kgo.CompressionCodec
		}{{"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
			sent := compressedBatch(t, cd.codec, in.count, in.raw)
			if len(sent) > 1<<20 {
				t.Fatalf("%s, %s: %d bytes", cd.name, in.name, len(sent))
			}
			torn := append([]byte(nil), sent[:len(sent)-len(sent)/3]...)
			binary.BigEndian.PutUint32(torn[8:], uint32(len(torn)-12))
			binary.BigEndian.PutUint32(torn[17:], crc32.Checksum(torn[21:], castagnoli))
			if r := produce(t, c, "zeros", torn); r.ErrorCode != kerr.CorruptMessage.Code {
				t.Errorf("%s, %s truncated: code %d, want CORRUPT_MESSAGE", cd.name, in.name, r.ErrorCode)
			}
			r := produce(t, c, "zeros", sent)
			if r.ErrorCode != 0 || r.BaseOffset != next {
				msg := ""
				if r.ErrorMessage != nil {
					msg = *r.ErrorMessage
				}
				t.Fatalf("%s, %s: %d bytes sent, %d decompressed: code %d (%s), base %d, want %d",
					cd.name, in.name, len(sent), len(in.raw), r.ErrorCode, msg, r.BaseOffset, next)
			}
			p, _ := fetchAt(t, c, "zeros", next)
			got := p.RecordBatches
			if p.ErrorCode != 0 || len(got) < len(sent) {
				t.Fatalf("%s, %s: fetched code %d, %d bytes", cd.name, in.name, p.ErrorCode, len(got))
			}
			got = got[:len(sent)]
			// The broker owns the base offset and the partition leader epoch; all else
			// is as sent.
			if int64(binary.BigEndian.Uint64(got)) != next || !bytes.Equal(got[12:16], []byte{0, 0, 0, 0}) ||
				!bytes.Equal(got[16:], sent[16:]) || !bytes.Equal(got[8:12], sent[8:12]) {
				t.Fatalf("%s, %s: the batch fetched is not the batch sent", cd.name, in.name)
			}
			next += int64(in.count)
		}
	}

	// franz-go's TestConsumeMaxDecompressBatchBytes produces this batch: three 1 MiB
	// records of zeros, gzipped to a few KiB.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("zeros"),
		kgo.ProducerBatchMaxBytes(4<<20), kgo.ProducerBatchCompression(kgo.GzipCompression()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"zeros": {0: kgo.NewOffset().At(next)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	big := make([]byte, 1<<20)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: big}, &kgo.Record{Value: big}, &kgo.Record{Value: big}).FirstErr(); err != nil {
		t.Fatalf("franz-go produce of 3 MiB of zeros: %v", err)
	}
	var got int
	for got < 3 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil && ctx.Err() == nil {
			t.Fatalf("fetch: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !bytes.Equal(r.Value, big) {
				t.Fatalf("record at %d is not 1 MiB of zeros", r.Offset)
			}
			got++
		})
	}
	if got != 3 {
		t.Fatalf("fetched %d of the 3 records", got)
	}
}
