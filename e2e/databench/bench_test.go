package databench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/broker/brokertest"
)

const (
	topic       = "bench"
	partitions  = 3
	recordBytes = 1024
	records     = 30000
	latencyRecs = 2000
)

type figures struct {
	produceMBps, consumeMBps float64
	p50, p99                 time.Duration
}

// BenchmarkDataPath runs the same load against kaas (durable: every acknowledged produce
// is fsynced first) and against kfake (in memory), and reports both and their ratios.
func BenchmarkDataPath(b *testing.B) {
	for i := 0; i < b.N; i++ {
		kaas := run(b, startKaas(b))
		fake := run(b, startKfake(b))
		b.ReportMetric(kaas.produceMBps, "kaas_produce_MB/s")
		b.ReportMetric(fake.produceMBps, "kfake_produce_MB/s")
		b.ReportMetric(kaas.produceMBps/fake.produceMBps, "produce_ratio")
		b.ReportMetric(kaas.consumeMBps, "kaas_consume_MB/s")
		b.ReportMetric(fake.consumeMBps, "kfake_consume_MB/s")
		b.ReportMetric(kaas.consumeMBps/fake.consumeMBps, "consume_ratio")
		b.ReportMetric(float64(kaas.p99.Microseconds())/1000, "kaas_e2e_p99_ms")
		b.ReportMetric(float64(fake.p99.Microseconds())/1000, "kfake_e2e_p99_ms")
		b.ReportMetric(float64(kaas.p99)/float64(fake.p99), "e2e_p99_ratio")
		b.Logf("kaas:  produce %.1f MB/s, consume %.1f MB/s, e2e p50 %v p99 %v", kaas.produceMBps, kaas.consumeMBps, kaas.p50, kaas.p99)
		b.Logf("kfake: produce %.1f MB/s, consume %.1f MB/s, e2e p50 %v p99 %v", fake.produceMBps, fake.consumeMBps, fake.p50, fake.p99)
	}
}

func startKaas(b *testing.B) string {
	c := brokertest.Config(b)
	if os.Getenv("KAAS_BENCH_NOSYNC") != "" {
		c.LogFlushIntervalMessages = 1 << 40
	}
	br, err := broker.Start(c, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		br.Stop(ctx)
	})
	return br.Addr()
}

func startKfake(b *testing.B) string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func run(b *testing.B, addr string) figures {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	for _, name := range []string{topic, topic + "-lat"} {
		if _, err := adm.CreateTopic(ctx, partitions, 1, nil, name); err != nil {
			b.Fatal(err)
		}
	}
	var f figures
	// Every record differs and is random: kgo compresses with snappy by default, and
	// repeated values would measure the compressor, not the broker.
	values := make([]byte, records*recordBytes)
	rand.Read(values)
	mb := float64(records*recordBytes) / 1e6

	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(benchCompression(b)))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < records; i++ {
		value := values[i*recordBytes : (i+1)*recordBytes]
		prod.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	f.produceMBps = mb / time.Since(start).Seconds()
	prod.Close()

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	for n := 0; n < records; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
	}
	f.consumeMBps = mb / time.Since(start).Seconds()
	cons.Close()

	f.p50, f.p99 = latency(b, ctx, addr)
	return f
}

// latency produces paced records stamped with their send time and measures how long
// each takes to reach a consumer that is already polling.
func latency(b *testing.B, ctx context.Context, addr string) (time.Duration, time.Duration) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic+"-lat"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic+"-lat"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	done := make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		for len(lat) < latencyRecs && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				sent := int64(binary.BigEndian.Uint64(r.Value))
				lat = append(lat, now.Sub(time.Unix(0, sent)))
			})
		}
		done <- lat
	}()
	for i := 0; i < latencyRecs; i++ {
		v := randomValue()
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		prod.Produce(ctx, &kgo.Record{Value: v}, nil)
		time.Sleep(500 * time.Microsecond)
	}
	lat := <-done
	if len(lat) < latencyRecs {
		b.Fatalf("only %d of %d latency records arrived", len(lat), latencyRecs)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// benchCompression is the producer's codec, from KAAS_BENCH_COMPRESSION (none, gzip,
// snappy, lz4, zstd); unset is snappy, kgo's default. Validation on produce decompresses
// every batch, so the codec changes what the broker spends per byte.
func benchCompression(b *testing.B) kgo.CompressionCodec {
	switch c := os.Getenv("KAAS_BENCH_COMPRESSION"); c {
	case "", "snappy":
		return kgo.SnappyCompression()
	case "none":
		return kgo.NoCompression()
	case "gzip":
		return kgo.GzipCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	default:
		b.Fatalf("KAAS_BENCH_COMPRESSION=%q: want none, gzip, snappy, lz4 or zstd", c)
		return kgo.NoCompression()
	}
}

func randomValue() []byte {
	v := make([]byte, recordBytes)
	rand.Read(v)
	return v
}
