package databench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"kaas/broker"
	"kaas/broker/brokertest"
)

const (
	topic       = "bench"
	partitions  = 3
	recordBytes = 1024
	records     = 30000
	latencyRecs = 2000
	// rounds is how many times each broker produces records (into the same topic) and
	// how many times each consumes the whole topic, kaas and kfake taking turns; the
	// figures are the rounds' medians. One more consume pass each goes first, uncounted.
	rounds = 5
)

type figures struct {
	produceMBps, consumeMBps float64
	p50, p99                 time.Duration
}

// BenchmarkDataPath runs the same load against kaas (durable: every acknowledged produce
// is fsynced first) and against kfake (in memory), and reports both and their ratios.
//
// The two brokers take turns, round by round, in one process, so that both see the same
// machine: each round produces 30,000 records of 1 KiB to each (kaas first in even
// rounds, kfake first in odd ones); then each round consumes the whole topic (150,000
// records) from each with a new consumer, in the same alternating order, after one
// uncounted pass each (the first reads of a process: connections, buffers, the heap
// growing). The collector runs before every timed phase, so neither broker's garbage is
// collected on the other's clock. Every figure is the median of the rounds, and each
// ratio the median of the rounds' ratios (a round's two phases ran a moment apart, under
// the same load); the log gives every round. A consume pass of one broker lasted a tenth
// of a second when this read the topic once, and one figure could swing threefold on
// shared cores.
//
// consume_cpu_ms is the process's CPU time (user and system) during one consume pass:
// the broker's and the consumer's, which is the same client code on both sides, so the
// difference is the broker's. It moves less with the machine's load than MB/s.
func BenchmarkDataPath(b *testing.B) {
	for i := 0; i < b.N; i++ {
		brokers := [2]string{startKaas(b), startKfake(b)}
		var prod, cons, cpu [2][]float64
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		for _, addr := range brokers {
			createTopics(b, ctx, addr)
		}
		values := make([]byte, records*recordBytes)
		rand.Read(values)
		for r := range rounds {
			for _, k := range order(r) {
				prod[k] = append(prod[k], produce(b, ctx, brokers[k], values))
			}
		}
		for k := range brokers {
			consume(b, ctx, brokers[k]) // warm-up, uncounted
		}
		for r := range rounds {
			for _, k := range order(r) {
				mbps, used := consume(b, ctx, brokers[k])
				cons[k] = append(cons[k], mbps)
				cpu[k] = append(cpu[k], float64(used.Microseconds())/1000)
			}
			b.Logf("round %d: produce kaas %.1f kfake %.1f MB/s; consume kaas %.1f kfake %.1f MB/s, CPU kaas %.0f kfake %.0f ms",
				r, prod[0][r], prod[1][r], cons[0][r], cons[1][r], cpu[0][r], cpu[1][r])
		}
		var kaas, fake figures
		kaas.p50, kaas.p99 = latency(b, ctx, brokers[0])
		fake.p50, fake.p99 = latency(b, ctx, brokers[1])
		cancel()
		kaas.produceMBps, fake.produceMBps = median(prod[0]), median(prod[1])
		kaas.consumeMBps, fake.consumeMBps = median(cons[0]), median(cons[1])
		b.ReportMetric(kaas.produceMBps, "kaas_produce_MB/s")
		b.ReportMetric(fake.produceMBps, "kfake_produce_MB/s")
		b.ReportMetric(medianRatio(prod[0], prod[1]), "produce_ratio")
		b.ReportMetric(kaas.consumeMBps, "kaas_consume_MB/s")
		b.ReportMetric(fake.consumeMBps, "kfake_consume_MB/s")
		b.ReportMetric(medianRatio(cons[0], cons[1]), "consume_ratio")
		b.ReportMetric(median(cpu[0]), "kaas_consume_cpu_ms")
		b.ReportMetric(median(cpu[1]), "kfake_consume_cpu_ms")
		b.ReportMetric(medianRatio(cpu[0], cpu[1]), "consume_cpu_ratio")
		b.ReportMetric(float64(kaas.p99.Microseconds())/1000, "kaas_e2e_p99_ms")
		b.ReportMetric(float64(fake.p99.Microseconds())/1000, "kfake_e2e_p99_ms")
		b.ReportMetric(float64(kaas.p99)/float64(fake.p99), "e2e_p99_ratio")
		b.Logf("kaas:  produce %.1f MB/s (%s), consume %.1f MB/s (%s), e2e p50 %v p99 %v",
			kaas.produceMBps, spread(prod[0]), kaas.consumeMBps, spread(cons[0]), kaas.p50, kaas.p99)
		b.Logf("kfake: produce %.1f MB/s (%s), consume %.1f MB/s (%s), e2e p50 %v p99 %v",
			fake.produceMBps, spread(prod[1]), fake.consumeMBps, spread(cons[1]), fake.p50, fake.p99)
	}
}

// order is the turn of round r: kaas (0) first in even rounds, kfake (1) in odd ones.
func order(r int) [2]int {
	if r%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// medianRatio is the median of a[i]/b[i].
func medianRatio(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return median(r)
}

func spread(v []float64) string {
	return fmt.Sprintf("%.1f-%.1f", slices.Min(v), slices.Max(v))
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

func createTopics(b *testing.B, ctx context.Context, addr string) {
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
}

// produce sends records records of values (every one differs and is random: kgo
// compresses with snappy by default, and repeated values would measure the compressor,
// not the broker) with acks=all from a new producer, and returns its MB/s.
func produce(b *testing.B, ctx context.Context, addr string, values []byte) float64 {
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(benchCompression(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	runtime.GC()
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
	return float64(records*recordBytes) / 1e6 / time.Since(start).Seconds()
}

// consume reads the whole topic (rounds × records records) from offset 0 with a new
// consumer, and returns its MB/s and the process's CPU time meanwhile.
func consume(b *testing.B, ctx context.Context, addr string) (float64, time.Duration) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	want := rounds * records
	runtime.GC()
	cpu0 := cpuTime(b)
	start := time.Now()
	for n := 0; n < want; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
	}
	took := time.Since(start)
	return float64(want*recordBytes) / 1e6 / took.Seconds(), cpuTime(b) - cpu0
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
