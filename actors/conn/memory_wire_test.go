package conn_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// fillTopic writes about total bytes of 64 KiB records to a one-partition topic.
func fillTopic(t *testing.T, addr, topic string, total int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 64<<10)
	for range total / len(val) {
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func bigFetch(topic string, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = maxBytes
	rp.LogStartOffset = -1
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

func gauge(g prometheus.Gauge) int64 { return int64(value(g)) }

// checkFetch reads one Fetch response and checks it carries records of the partition.
func checkFetch(t *testing.T, r *brokertest.Raw, corr int32) {
	t.Helper()
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(11)
	b, err := r.ReadFrame(10 * time.Second)
	if err != nil {
		t.Fatalf("fetch %d: read response: %v", corr, err)
	}
	got, err := brokertest.Decode(b, resp)
	if err != nil {
		t.Fatalf("fetch %d: decode: %v", corr, err)
	}
	if got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch %d: %d topics in the response", corr, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if resp.ErrorCode != 0 || p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch %d: error %d/%d, %d bytes of records", corr, resp.ErrorCode, p.ErrorCode, len(p.RecordBatches))
	}
}

// A client that pipelines 64 Fetches of 16 MiB and does not read pins at most its
// connection's budget (plus one batch, the KIP-74 rule); the broker holds its further
// requests, serves other connections meanwhile, and answers every Fetch in order once
// the client reads.
func TestNonReadingFetcherPinsOnlyItsBudget(t *testing.T) {
	const budget = 1 << 20
	b := brokertest.Start(t, func(c *config.Config) { c.ConnMaxQueuedResponseBytes = budget })
	fillTopic(t, b.Addr(), "pin", 6<<20)
	met := b.Env().Metrics

	r := brokertest.Dial(t, b.Addr())
	var batch []byte
	for corr := range int32(64) {
		batch = append(batch, r.Encode(bigFetch("pin", 16<<20), corr)...)
	}
	r.Write(batch)

	// A batch is at most 1 MiB (franz-go's default), and a response adds a few headers.
	const bound = budget + 1<<20 + 64<<10
	testwait.For(t, 20*time.Second, 5*time.Millisecond, func() error {
		if gauge(met.RequestsHeld) != 0 {
			return nil
		}
		if u := gauge(met.ResponseBytesUnwritten); u > bound {
			t.Fatalf("%d bytes of responses built and unwritten for a client that does not read; bound %d", u, bound)
		}
		return fmt.Errorf("no request held; %d bytes unwritten", gauge(met.ResponseBytesUnwritten))
	})
	if u := gauge(met.ResponseBytesUnwritten); u > bound {
		t.Fatalf("%d bytes unwritten, bound %d", u, bound)
	}

	other := brokertest.Dial(t, b.Addr())
	other.Send(bigFetch("pin", 64<<10), 7)
	checkFetch(t, other, 7)

	for corr := range int32(64) {
		checkFetch(t, r, corr)
	}
	if n := gauge(met.RequestsHeld); n != 0 {
		t.Fatalf("%d requests still held after the client read everything", n)
	}
}

// dribble announces a frame of size bytes, sends body of it, then one more byte every
// tick until stop closes.
func dribble(t *testing.T, addr string, size uint32, body int, tick time.Duration, stop <-chan struct{}) *brokertest.Raw {
	r := brokertest.Dial(t, addr)
	b := make([]byte, 4+body)
	binary.BigEndian.PutUint32(b, size)
	r.Write(b)
	if tick > 0 {
		go func() {
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					_ = r.C.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := r.C.Write([]byte{0}); err != nil {
						return
					}
				}
			}
		}()
	}
	return r
}

// A frame announced at 100 MB that arrives a byte at a time is closed once it has not
// arrived whole within socket.request.read.timeout.ms, though bytes keep coming.
func TestDribbledFrameIsClosedAtItsDeadline(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.SocketRequestReadTimeout = 300 * time.Millisecond })
	stop := make(chan struct{})
	defer close(stop)
	r := dribble(t, b.Addr(), 100_000_000, 10, 20*time.Millisecond, stop)
	if !r.Closed(10 * time.Second) {
		t.Fatal("a connection dribbling a 100 MB frame is still open 10 s later")
	}
	if n := value(b.Env().Metrics.ClosedBadInput.WithLabelValues("frame_timeout")); n != 1 {
		t.Fatalf("%v connections closed for frame_timeout, want 1", n)
	}
}

// Many connections each announcing a 100 MB frame reserve no more than
// queued.max.request.bytes between them, and a reader that cannot get budget waits.
// Small requests on other connections are still served, and everything is given back
// when the clients go.
func TestPartlyReadFramesAreBoundedBrokerWide(t *testing.T) {
	const limit = 250_000_000
	b := brokertest.Start(t, func(c *config.Config) { c.QueuedMaxRequestBytes = limit })
	met := b.Env().Metrics
	var conns []*brokertest.Raw
	for range 20 {
		conns = append(conns, dribble(t, b.Addr(), 100_000_000, 256<<10, 0, nil))
	}
	testwait.For(t, 20*time.Second, 5*time.Millisecond, func() error {
		if gauge(met.RequestReadsWaiting) != 0 {
			return nil
		}
		if q := gauge(met.RequestBytesQueued); q > limit {
			t.Fatalf("partly read frames reserve %d bytes, over queued.max.request.bytes %d", q, limit)
		}
		return fmt.Errorf("no reader waiting; %d bytes reserved", gauge(met.RequestBytesQueued))
	})
	if q := gauge(met.RequestBytesQueued); q > limit {
		t.Fatalf("partly read frames reserve %d bytes, over %d", q, limit)
	}
	servedOK(t, b)
	for _, c := range conns {
		c.C.Close()
	}
	testwait.For(t, 10*time.Second, 5*time.Millisecond, func() error {
		if q, w := gauge(met.RequestBytesQueued), gauge(met.RequestReadsWaiting); q != 0 || w != 0 {
			return fmt.Errorf("after the clients closed: %d bytes reserved, %d readers waiting", q, w)
		}
		return nil
	})
}

func servedOK(t *testing.T, b *broker.Broker) {
	t.Helper()
	r := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kaas-test", "1"
	resp := r.Roundtrip(req, 1).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions error %d", resp.ErrorCode)
	}
}
