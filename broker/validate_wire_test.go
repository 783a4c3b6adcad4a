package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// batchOf wraps recs (compressed when attrs says so) in a RecordBatch v2 header that
// claims count records, with a correct length and CRC-32C: only validating the records
// themselves can tell it is bad.
func batchOf(attrs int16, count int32, recs []byte) []byte {
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: count - 1,
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: count, Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// recordsOf encodes one record per value with the given offset deltas.
func recordsOf(deltas []int32, values ...[]byte) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: deltas[i], Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	return recs
}

func compressed(t *testing.T, codec kgo.CompressionCodec, raw []byte) ([]byte, int16) {
	t.Helper()
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	out, typ := c.Compress(new(bytes.Buffer), raw)
	if typ == 0 {
		t.Fatalf("%v: not compressed", codec)
	}
	return append([]byte(nil), out...), int16(typ)
}

// TestProduceValidatesRecords sends batches with a correct CRC whose records a consumer
// could not read: each is refused with its code and a message, nothing is stored, and a
// franz-go consumer then reads the valid batches around them without stalling.
func TestProduceValidatesRecords(t *testing.T) {
	const maxBytes = 64 << 10
	b := brokertest.Start(t, func(c *config.Config) { c.MessageMaxBytes = maxBytes })
	createTopic(t, b.Addr(), "val", 2)
	c := brokertest.Dial(t, b.Addr())

	if r := produceCode(t, c, produceReq("val", 0, -1, rawBatch(-1, -1, -1, "first"))); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("first batch: %+v", r)
	}
	garbage := bytes.Repeat([]byte("these bytes are no codec's data "), 4)
	bomb := recordsOf([]int32{0}, make([]byte, 4*maxBytes))
	type bad struct {
		name  string
		batch []byte
		code  int16
	}
	cases := []bad{
		{"uncompressed garbage length varints", batchOf(0, 2, bytes.Repeat([]byte{0xff}, 20)), kerr.InvalidRecord.Code},
		{"count above records", batchOf(0, 3, recordsOf([]int32{0, 1}, []byte("a"), []byte("b"))), kerr.InvalidRecord.Code},
		{"count below records", batchOf(0, 1, recordsOf([]int32{0, 1}, []byte("a"), []byte("b"))), kerr.InvalidRecord.Code},
		{"offset deltas with a gap", batchOf(0, 2, recordsOf([]int32{0, 5}, []byte("a"), []byte("b"))), kerr.InvalidRecord.Code},
	}
	for _, cd := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		_, attrs := compressed(t, cd.codec, []byte("x"))
		small, _ := compressed(t, cd.codec, bomb)
		if len(small) > maxBytes/4 {
			t.Fatalf("%s bomb is %d bytes compressed", cd.name, len(small))
		}
		cases = append(cases,
			bad{cd.name + " flag over garbage", batchOf(attrs, 1, garbage), kerr.CorruptMessage.Code},
			bad{cd.name + " truncated", batchOf(attrs, 1, small[:len(small)/2]), kerr.CorruptMessage.Code})
		// message.max.bytes holds the batch as sent, as in Apache: the whole of small is
		// accepted (actors/partition's TestProduceHighlyCompressible).
	}
	for _, bc := range cases {
		// Two partitions in one request: the bad batch is refused on its own partition only.
		req := produceReq("val", 0, -1, bc.batch)
		p1 := kmsg.NewProduceRequestTopicPartition()
		p1.Partition, p1.Records = 1, rawBatch(-1, -1, -1, "ok")
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, p1)
		resp := c.Roundtrip(req, 1).(*kmsg.ProduceResponse)
		r0, r1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if r0.ErrorCode != bc.code || r0.ErrorMessage == nil || *r0.ErrorMessage == "" || r0.BaseOffset != -1 {
			t.Errorf("%s: got %d %v, want code %d with a message", bc.name, r0.ErrorCode, r0.ErrorMessage, bc.code)
		}
		if r1.ErrorCode != 0 {
			t.Errorf("%s: the other partition got %d", bc.name, r1.ErrorCode)
		}
	}
	f := c.Roundtrip(fetchReq(11, "val", [16]byte{}, 0, 0, 0), 2).(*kmsg.FetchResponse)
	if p := f.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.HighWatermark != 1 {
		t.Errorf("after the refused batches: code %d, log end %d, want 0 and 1", p.ErrorCode, p.HighWatermark)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("val"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "val", Partition: 0, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("valid produce after the refused ones: %v", err)
	}
	var got []string
	var fetchErr error // a consumer behind an unreadable batch loops on this one
	for !slices.Contains(got, "after") && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if fetchErr == nil && ctx.Err() == nil {
				fetchErr = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Partition == 0 {
				got = append(got, string(r.Value))
			}
		})
	}
	if fetchErr != nil {
		t.Error(fetchErr)
	}
	if len(got) != 2 || got[0] != "first" || got[1] != "after" {
		t.Fatalf("consumer read %q from partition 0, want [first after]", got)
	}
}
