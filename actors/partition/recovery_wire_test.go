package partition_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// lockedBuffer collects a broker's JSON log lines so a test can look for an event.
type lockedBuffer struct {
	mu sync.Mutex
	t  *testing.T // nil once the test ended
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return w.b.Write(p)
}

// events are the log lines whose message is msg.
func (w *lockedBuffer) events(msg string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, line := range strings.Split(w.b.String(), "\n") {
		if strings.Contains(line, `"message":"`+msg+`"`) {
			out = append(out, line)
		}
	}
	return out
}

// startLogged starts a broker on c whose log goes to the test log and to the returned
// buffer.
func startLogged(t *testing.T, c config.Config) (*broker.Broker, *lockedBuffer) {
	t.Helper()
	buf := &lockedBuffer{t: t}
	t.Cleanup(func() { buf.mu.Lock(); buf.t = nil; buf.mu.Unlock() })
	log := zerolog.New(buf).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	b, err := broker.Start(c, log)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { stopBroker(t, b) })
	return b, buf
}

func stopBroker(t *testing.T, b *broker.Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.Stop(ctx)
}

// batchOf is an uncompressed RecordBatch v2 as a producer sends it.
func batchOf(values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(values)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func produce(t *testing.T, c *brokertest.Raw, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return c.Roundtrip(req, 1).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// fetchAt fetches partition 0 of topic from offset without waiting and checks the CRC of
// every batch served: a broker must never hand out a batch that fails it.
func fetchAt(t *testing.T, c *brokertest.Raw, topic string, offset int64) (kmsg.FetchResponseTopicPartition, []int64) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = offset, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	p := c.Roundtrip(req, 2).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	var offsets []int64
	for b := p.RecordBatches; len(b) > 0; {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatalf("fetch at %d: undecodable batch: %v", offset, err)
		}
		if crc32.Checksum(b[21:12+int(rb.Length)], castagnoli) != uint32(rb.CRC) {
			t.Fatalf("fetch at %d: served batch at offset %d fails its CRC", offset, rb.FirstOffset)
		}
		for i := int64(0); i <= int64(rb.LastOffsetDelta); i++ {
			offsets = append(offsets, rb.FirstOffset+i)
		}
		b = b[12+int(rb.Length):]
	}
	return p, offsets
}

func corruptCount(t *testing.T, b *broker.Broker) float64 {
	t.Helper()
	mfs, err := b.Env().Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kaas_log_corrupt_batches_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// segments lists the partition's segment files, oldest first.
func segments(t *testing.T, dir, topic string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "topics", topic, "0", "*.log"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	sort.Strings(m)
	return m
}

// writeThirty creates topic and writes ten acknowledged batches of three records
// (offsets 0-29), every one the same size; it returns the size of one batch.
func writeThirty(t *testing.T, b *broker.Broker, topic string) int64 {
	t.Helper()
	c := brokertest.Dial(t, b.Addr())
	create := kmsg.NewPtrCreateTopicsRequest()
	create.SetVersion(5)
	create.TimeoutMillis = 5000
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 1, 1
	create.Topics = append(create.Topics, ct)
	if r := c.Roundtrip(create, 9).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %+v", topic, r.Topics[0])
	}
	var one int64
	for i := 0; i < 10; i++ {
		batch := batchOf("value-a", "value-b", "value-c")
		one = int64(len(batch))
		if r := produce(t, c, topic, batch); r.ErrorCode != 0 || r.BaseOffset != int64(3*i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	return one
}

func flipBit(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x04
	if _, err := f.WriteAt(b[:], pos); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptBatchIsQuarantined writes 30 acknowledged records, stops the broker, flips
// one bit in one batch (in its record data, or in its length field so that walking by
// lengths goes astray) of the newest or of an older segment, and starts again: nothing
// acknowledged silently disappears, a new produce takes a fresh offset, the corrupt
// range answers KAFKA_STORAGE_ERROR (retriable) while the records before and after it
// are served, and the corruption is logged at Error and counted.
func TestCorruptBatchIsQuarantined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older bool
		at    func(one int64) int64 // where in the batch the bit flips
	}{
		{"newest/data", false, func(one int64) int64 { return one - 3 }},
		{"newest/length", false, func(int64) int64 { return 11 }},
		{"older/data", true, func(one int64) int64 { return one - 3 }},
		{"older/length", true, func(int64) int64 { return 11 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := brokertest.Config(t)
			one := int64(len(batchOf("value-a", "value-b", "value-c")))
			if tc.older {
				c.LogSegmentBytes = 3 * one // three batches a segment: 0-8, 9-17, 18-26, 27-29
			}
			b, _ := startLogged(t, c)
			writeThirty(t, b, "t")
			stopBroker(t, b)

			segs := segments(t, c.DataDir, "t")
			// The batch holding offsets 3-5: the second of the newest segment's ten, or
			// the second of the oldest segment.
			path := segs[len(segs)-1]
			if tc.older {
				if len(segs) != 4 {
					t.Fatalf("%d segments", len(segs))
				}
				path = segs[0]
			}
			flipBit(t, path, one+tc.at(one))

			b, logs := startLogged(t, c)
			cl := brokertest.Dial(t, b.Addr())
			if r := produce(t, cl, "t", batchOf("new")); r.ErrorCode != 0 || r.BaseOffset != 30 {
				t.Fatalf("produce after restart: %+v (an offset of the 30 acknowledged is reused)", r)
			}
			for _, off := range []int64{3, 4, 5} {
				if p, got := fetchAt(t, cl, "t", off); p.ErrorCode != kerr.KafkaStorageError.Code {
					t.Fatalf("fetch in the corrupt range at %d: error %d, offsets %v", off, p.ErrorCode, got)
				}
			}
			if p, got := fetchAt(t, cl, "t", 0); p.ErrorCode != 0 || len(got) != 3 || got[0] != 0 {
				t.Fatalf("fetch before the corrupt range: error %d, offsets %v", p.ErrorCode, got)
			}
			var after []int64
			for off := int64(6); off < 31; {
				p, got := fetchAt(t, cl, "t", off)
				if p.ErrorCode != 0 || len(got) == 0 || got[0] != off {
					t.Fatalf("fetch after the corrupt range at %d: error %d, offsets %v", off, p.ErrorCode, got)
				}
				after = append(after, got...)
				off = got[len(got)-1] + 1
			}
			if len(after) != 25 {
				t.Fatalf("after the corrupt range: %v", after)
			}
			ev := logs.events("partition_corrupt_batch")
			if len(ev) != 1 || !strings.Contains(ev[0], `"level":"error"`) || !strings.Contains(ev[0], `"from_offset":3`) {
				t.Fatalf("corrupt batch logs: %q", ev)
			}
			if n := corruptCount(t, b); n != 1 {
				t.Fatalf("kaas_log_corrupt_batches_total %v", n)
			}
		})
	}
}

// TestTornTailPastRecoveryPointIsCut leaves half a batch after the 30 acknowledged
// records, as a write cut short by a crash does: it is past the recovery point and
// followed by nothing valid, so it is cut with a Warn and the partition serves.
func TestTornTailPastRecoveryPointIsCut(t *testing.T) {
	c := brokertest.Config(t)
	b, _ := startLogged(t, c)
	one := writeThirty(t, b, "t")
	stopBroker(t, b)
	path := segments(t, c.DataDir, "t")[0]
	half := batchOf("value-a", "value-b", "value-c")
	binary.BigEndian.PutUint64(half, 30)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(half[:one/2]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	b, logs := startLogged(t, c)
	cl := brokertest.Dial(t, b.Addr())
	// The produce is answered after the partition opened (and recovered) its log.
	if r := produce(t, cl, "t", batchOf("new")); r.ErrorCode != 0 || r.BaseOffset != 30 {
		t.Fatalf("produce after restart: %+v", r)
	}
	if ev := logs.events("partition_torn_tail_truncated"); len(ev) != 1 || !strings.Contains(ev[0], `"level":"warn"`) {
		t.Fatalf("torn tail logs: %q", ev)
	}
	if st, _ := os.Stat(path); st.Size() != 10*one+int64(len(batchOf("new"))) {
		t.Fatalf("segment %d bytes, want the 10 batches and the new one", st.Size())
	}
	if p, got := fetchAt(t, cl, "t", 0); p.ErrorCode != 0 || len(got) != 31 {
		t.Fatalf("fetch: error %d, offsets %v", p.ErrorCode, got)
	}
	if ev := logs.events("partition_corrupt_batch"); len(ev) != 0 || corruptCount(t, b) != 0 {
		t.Fatalf("a torn tail reported as corruption: %q", ev)
	}
}

// TestCrashImageKeepsAcknowledgedTail takes the data dir of a running broker after 30
// acknowledged records (no clean stop, so no recovery point written at close) and cuts
// its newest segment inside the last batch. That batch was acknowledged, so it was
// fsynced and the recovery point written after the fsync covers it: it is not a torn
// tail. Its offsets are not reused and answer KAFKA_STORAGE_ERROR.
func TestCrashImageKeepsAcknowledgedTail(t *testing.T) {
	c := brokertest.Config(t)
	b, _ := startLogged(t, c)
	one := writeThirty(t, b, "t")
	image := brokertest.Config(t)
	brokertest.CopyTree(t, c.DataDir, image.DataDir)
	stopBroker(t, b)
	path := segments(t, image.DataDir, "t")[0]
	if err := os.Truncate(path, 10*one-7); err != nil {
		t.Fatal(err)
	}

	b, logs := startLogged(t, image)
	cl := brokertest.Dial(t, b.Addr())
	if r := produce(t, cl, "t", batchOf("new")); r.ErrorCode != 0 || r.BaseOffset != 30 {
		t.Fatalf("produce on the crash image: %+v (an acknowledged offset is reused)", r)
	}
	if p, got := fetchAt(t, cl, "t", 28); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("fetch of the lost batch: error %d, offsets %v", p.ErrorCode, got)
	}
	if p, got := fetchAt(t, cl, "t", 30); p.ErrorCode != 0 || len(got) != 1 || got[0] != 30 {
		t.Fatalf("fetch after the lost batch: error %d, offsets %v", p.ErrorCode, got)
	}
	if ev := logs.events("partition_corrupt_batch"); len(ev) != 1 || !strings.Contains(ev[0], `"to_offset":30`) {
		t.Fatalf("corrupt batch logs: %q", ev)
	}
	if ev := logs.events("partition_torn_tail_truncated"); len(ev) != 0 {
		t.Fatalf("acknowledged tail cut: %q", ev)
	}
}

// TestAcceptedLossReadsAsGap quarantines a corrupt batch, then has the operator accept
// its loss in the partition's accepted-loss file: after a restart a fetch in the range
// gets the records after it, as after a gap, and nothing is counted as corrupt.
func TestAcceptedLossReadsAsGap(t *testing.T) {
	c := brokertest.Config(t)
	b, _ := startLogged(t, c)
	one := writeThirty(t, b, "t")
	stopBroker(t, b)
	path := segments(t, c.DataDir, "t")[0]
	flipBit(t, path, 2*one-3)
	accepted := filepath.Join(filepath.Dir(path), "accepted-loss")
	if err := os.WriteFile(accepted, []byte("# restored nothing: lost on purpose\n3 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	b, logs := startLogged(t, c)
	cl := brokertest.Dial(t, b.Addr())
	if p, got := fetchAt(t, cl, "t", 3); p.ErrorCode != 0 || len(got) != 24 || got[0] != 6 {
		t.Fatalf("fetch in the accepted range: error %d, offsets %v", p.ErrorCode, got)
	}
	if p, got := fetchAt(t, cl, "t", 0); p.ErrorCode != 0 || len(got) != 3 {
		t.Fatalf("fetch before the accepted range: error %d, offsets %v", p.ErrorCode, got)
	}
	if ev := logs.events("partition_corrupt_batch_loss_accepted"); len(ev) != 1 || !strings.Contains(ev[0], `"level":"warn"`) {
		t.Fatalf("accepted loss logs: %q", ev)
	}
	if ev := logs.events("partition_corrupt_batch"); len(ev) != 0 || corruptCount(t, b) != 0 {
		t.Fatalf("an accepted loss reported as corruption: %q", ev)
	}
}
