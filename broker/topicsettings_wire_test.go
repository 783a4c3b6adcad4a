package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// tsBatch is an uncompressed batch of one record per timestamp, with attrs.
func tsBatch(attrs int16, stamps ...int64) []byte {
	base, maxTS := stamps[0], stamps[0]
	var recs []byte
	for i, ts := range stamps {
		maxTS = max(maxTS, ts)
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: ts - base, Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(stamps) - 1),
		FirstTimestamp: base, MaxTimestamp: maxTS, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(stamps)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// message.timestamp.type and the before/after/difference bounds, changed on a running
// partition: each change applies to the next produce, the bounds refuse a batch with
// INVALID_TIMESTAMP and Apache's message (uncompressed and compressed alike),
// LogAppendTime stamps the batch with the broker's time (in the produce response and
// for consumers), and CreateTime again keeps the producer's.
func TestTimestampSettingsOnRunningPartition(t *testing.T) {
	b := brokertest.Start(t, nil)
	addr := b.Addr()
	createTopic(t, addr, "ts", 1)
	raw := brokertest.Dial(t, addr)
	topic, set, del := kmsg.ConfigResourceTypeTopic, kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete
	alter := func(ops ...incOp) {
		t.Helper()
		r := incAlter(t, addr, 1, false, incResource(topic, "ts", ops...))
		wantCode(t, "alter", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	}
	produce := func(what string, batch []byte, code int16, msg string) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		r := produceCode(t, raw, produceReq("ts", 0, -1, batch))
		wantCode(t, what, r.ErrorCode, r.ErrorMessage, code, msg)
		return r
	}
	hour := time.Hour.Milliseconds()
	old := time.Now().UnixMilli() - 2*hour

	if r := produce("old, unbounded", tsBatch(0, old), 0, ""); r.LogAppendTime != -1 {
		t.Fatalf("CreateTime topic answered log_append_time %d", r.LogAppendTime)
	}
	alter(incOp{"message.timestamp.before.max.ms", set, sp("3600000")}, incOp{"message.timestamp.after.max.ms", set, sp("3600000")})
	produce("old, before.max.ms=1h", tsBatch(0, time.Now().UnixMilli(), old), kerr.InvalidTimestamp.Code, "record 1: Timestamp ")
	produce("future, after.max.ms=1h", tsBatch(0, time.Now().UnixMilli()+2*hour), kerr.InvalidTimestamp.Code, "is out of range")
	produce("now, bounded", tsBatch(0, time.Now().UnixMilli()), 0, "")
	produce("no timestamp, bounded", tsBatch(0, -1), 0, "")

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: "ts", Value: []byte(strings.Repeat("z", 500)), Timestamp: time.UnixMilli(old)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); !errors.Is(err, kerr.InvalidTimestamp) {
		t.Fatalf("lz4 batch with an old record: %v, want INVALID_TIMESTAMP", err)
	}

	// The deprecated difference bound stands in for a bound left at its default.
	alter(incOp{"message.timestamp.before.max.ms", del, nil}, incOp{"message.timestamp.after.max.ms", del, nil},
		incOp{"message.timestamp.difference.max.ms", set, sp("3600000")})
	produce("old, difference.max.ms=1h", tsBatch(0, old), kerr.InvalidTimestamp.Code, "is out of range")

	alter(incOp{"message.timestamp.difference.max.ms", del, nil}, incOp{"message.timestamp.type", set, sp("LogAppendTime")})
	produce("claims LogAppendTime", tsBatch(0x08, old), kerr.InvalidTimestamp.Code, "Producer should not set timestamp type to LogAppendTime")
	before := time.Now().UnixMilli()
	r := produce("LogAppendTime", tsBatch(0, old, old+1), 0, "")
	after := time.Now().UnixMilli()
	if r.LogAppendTime < before || r.LogAppendTime > after {
		t.Fatalf("log_append_time %d outside [%d, %d]", r.LogAppendTime, before, after)
	}
	stamped := r.BaseOffset

	alter(incOp{"message.timestamp.type", set, sp("CreateTime")})
	last := produce("CreateTime again", tsBatch(0, old), 0, "")

	recs, err := consumeAll(ctx, addr, "ts", last.BaseOffset+1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int64{}
	for _, r := range recs {
		got[r.Offset] = r.Timestamp.UnixMilli()
	}
	if got[0] != old || got[last.BaseOffset] != old {
		t.Fatalf("CreateTime records read %d and %d, want %d", got[0], got[last.BaseOffset], old)
	}
	for _, o := range []int64{stamped, stamped + 1} {
		if got[o] != r.LogAppendTime {
			t.Fatalf("offset %d read at %d, want the broker's %d", o, got[o], r.LogAppendTime)
		}
	}
}

// Each refused topic config, at CreateTopics and at IncrementalAlterConfigs and
// AlterConfigs alike: INVALID_CONFIG with a message that says why; the defaults and the
// settings kaas accepts with no effect are taken, as kafka-configs and the tools send
// them.
func TestTopicConfigsRefusedOrAccepted(t *testing.T) {
	b := brokertest.Start(t, nil)
	addr := b.Addr()
	createTopic(t, addr, "cfg", 1)
	for _, tc := range []struct {
		name, value string
		msg         string // "": accepted
	}{
		{"compression.type", "gzip", ""},
		{"compression.type", "uncompressed", ""},
		{"compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"},
		{"compression.type", "producer", ""},
		{"min.insync.replicas", "2", "only 1 can be met"},
		{"min.insync.replicas", "0", "Value must be at least 1"},
		{"min.insync.replicas", "1", ""},
		{"remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"},
		{"remote.storage.enable", "false", ""},
		{"message.timestamp.type", "BrokerTime", "String must be one of: CreateTime, LogAppendTime"},
		{"message.timestamp.before.max.ms", "-1", "Value must be at least 0"},
		{"segment.ms", "0", "Value must be at least 1"},
		{"segment.jitter.ms", "-5", "Value must be at least 0"},
		{"flush.ms", "-1", "Value must be at least 0"},
		{"retention.ms", "-2", "Value must be at least -1"},
		{"local.retention.ms", "-3", "Value must be at least -2"},
		{"leader.replication.throttled.replicas", "0-1", "[PartitionId]:[BrokerId]"},
		{"message.format.version", "next", "is not a valid version"},
		// Accepted with no effect on one copy of the log (README, Limitations).
		{"leader.replication.throttled.replicas", "*", ""},
		{"follower.replication.throttled.replicas", "0:1,0:2", ""},
		{"unclean.leader.election.enable", "true", ""},
		{"preallocate", "true", ""},
		{"segment.index.bytes", "1048576", ""},
		{"index.interval.bytes", "8192", ""},
		{"file.delete.delay.ms", "1000", ""},
		{"message.downconversion.enable", "false", ""},
		{"message.format.version", "2.8-IV1", ""},
		{"local.retention.ms", "3600000", ""},
		{"local.retention.bytes", "1048576", ""},
	} {
		what := tc.name + "=" + tc.value
		want := int16(0)
		if tc.msg != "" {
			want = kerr.InvalidConfig.Code
		}
		r := incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "cfg", incOp{tc.name, kmsg.IncrementalAlterConfigOpSet, sp(tc.value)}))
		wantCode(t, "incremental "+what, r[0].ErrorCode, r[0].ErrorMessage, want, tc.msg)
		l := legacyAlter(t, addr, 1, true, kmsg.ConfigResourceTypeTopic, "cfg", tc.name, tc.value)
		wantCode(t, "legacy "+what, l.ErrorCode, l.ErrorMessage, want, tc.msg)

		req := kmsg.NewPtrCreateTopicsRequest()
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "made", 1, 1
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = tc.name, sp(tc.value)
		ct.Configs = append(ct.Configs, c)
		req.Topics = append(req.Topics, ct)
		req.ValidateOnly = true
		resp := request[*kmsg.CreateTopicsResponse](t, addr, req, 5)
		wantCode(t, "create "+what, resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage, want, tc.msg)
	}
}

// segment.ms on a running partition rolls by the records' time as Apache's
// LogSegment.shouldRoll does: a batch more than segment.ms past the active segment's
// first batch starts a new segment; a shorter segment.ms set while it runs applies to
// the next batch.
func TestSegmentMSRollsARunningPartition(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "age", 1)
	raw := brokertest.Dial(t, addr)
	set := kmsg.IncrementalAlterConfigOpSet
	r := incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "age", incOp{"segment.ms", set, sp("60000")}))
	wantCode(t, "segment.ms=60000", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	t0 := time.Now().UnixMilli() - time.Hour.Milliseconds()
	produce := func(ts int64) {
		t.Helper()
		if r := produceCode(t, raw, produceReq("age", 0, -1, tsBatch(0, ts))); r.ErrorCode != 0 {
			t.Fatalf("produce at %d: %+v", ts, r)
		}
	}
	produce(t0)
	produce(t0 + 30_000)
	if segs := segmentBases(t, c.DataDir, "age"); len(segs) != 1 {
		t.Fatalf("rolled within segment.ms: %v", segs)
	}
	produce(t0 + 61_000) // 61 s past the segment's first batch
	if segs := segmentBases(t, c.DataDir, "age"); len(segs) != 2 || segs[1] != "2" {
		t.Fatalf("not rolled past segment.ms: %v", segs)
	}
	r = incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "age", incOp{"segment.ms", set, sp("5000")}))
	wantCode(t, "segment.ms=5000", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	produce(t0 + 64_000)
	if segs := segmentBases(t, c.DataDir, "age"); len(segs) != 2 {
		t.Fatalf("rolled within the new segment.ms: %v", segs)
	}
	produce(t0 + 67_000) // 6 s past offset 2's batch
	if segs := segmentBases(t, c.DataDir, "age"); len(segs) != 3 || segs[2] != "4" {
		t.Fatalf("segment.ms=5000 not applied to the running partition: %v", segs)
	}
}

// flush.ms with flush.messages far off: a batch acknowledged before its fsync is
// fsynced once flush.ms has passed, without another append; without flush.ms nothing
// is (the fsync count stays).
func TestFlushMSFsyncsARunningPartition(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" })
	addr, http := b.Addr(), b.HTTPAddr()
	createTopic(t, addr, "fl", 1)
	raw := brokertest.Dial(t, addr)
	set := kmsg.IncrementalAlterConfigOpSet
	r := incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "fl", incOp{"flush.messages", set, sp("1000000")}))
	wantCode(t, "flush.messages", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	fsyncs := func() float64 { return sample(scrape(t, http), "kaas_log_fsync_batches") }
	if r := produceCode(t, raw, produceReq("fl", 0, -1, tsBatch(0, time.Now().UnixMilli()))); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	before := fsyncs()
	r = incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "fl", incOp{"flush.ms", set, sp("20")}))
	wantCode(t, "flush.ms", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if got := fsyncs(); got != before {
		t.Fatalf("fsyncs went from %v to %v with no flush due", before, got)
	}
	if r := produceCode(t, raw, produceReq("fl", 0, -1, tsBatch(0, time.Now().UnixMilli()))); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	waitMetric(t, http, "an fsync flush.ms after the append", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_log_fsync_batches") > before
	})
}

// storedCodecs is the codec of every batch in a partition's segments, in order.
func storedCodecs(t *testing.T, dataDir, topic string) []int16 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "topics", topic, "0", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []int16
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for len(data) >= 61 {
			n := 12 + int(binary.BigEndian.Uint32(data[8:]))
			out = append(out, int16(binary.BigEndian.Uint16(data[21:]))&7)
			data = data[n:]
		}
	}
	return out
}

// compression.type on a running partition: "producer" stores each batch as sent; a
// codec recompresses the batches in another codec (from lz4 and from none to zstd, from
// lz4 to none) and keeps one already in it; a consumer reads every record back.
func TestCompressionTypeRecompresses(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "cmp", 1)
	set := kmsg.IncrementalAlterConfigOpSet
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := 0
	produce := func(codec kgo.CompressionCodec) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("cmp"), kgo.ProducerBatchCompression(codec))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var recs []*kgo.Record
		for i := 0; i < 5; i++ {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("value-%03d-%s", n, strings.Repeat("x", 200)))})
			n++
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	alter := func(v string) {
		t.Helper()
		r := incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "cmp", incOp{"compression.type", set, sp(v)}))
		wantCode(t, "compression.type="+v, r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	}
	produce(kgo.Lz4Compression())
	alter("zstd")
	produce(kgo.Lz4Compression())
	produce(kgo.NoCompression())
	produce(kgo.ZstdCompression())
	alter("uncompressed")
	produce(kgo.Lz4Compression())
	alter("gzip")
	produce(kgo.SnappyCompression())
	alter("snappy")
	produce(kgo.GzipCompression())
	want := []int16{3, 4, 4, 4, 0, 1, 2}
	if got := storedCodecs(t, c.DataDir, "cmp"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored codecs %v, want %v (lz4, zstd x3, none, gzip, snappy)", got, want)
	}
	recs, err := consumeAll(ctx, addr, "cmp", int64(n))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if want := fmt.Sprintf("value-%03d-", i); r.Offset != int64(i) || !strings.HasPrefix(string(r.Value), want) {
			t.Fatalf("record %d: offset %d value %.12q", i, r.Offset, r.Value)
		}
	}
	if len(recs) != n {
		t.Fatalf("%d records read back, %d produced", len(recs), n)
	}
}
