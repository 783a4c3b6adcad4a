package databench

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"kaas/broker"
	"kaas/broker/brokertest"
)

const (
	coldTopic     = "cold"
	coldPreload   = 96 << 20 // bytes of records the readers start from
	coldSegment   = 8 << 20  // segment.bytes (kaas): the preload spans sealed segments
	coldReaders   = 8
	coldLatRecs   = 1500
	coldLatPace   = time.Millisecond
	coldBurstRecs = 16384 // 16 MiB of 1 KiB records, produced flat out
)

// coldFigures is one broker's run of BenchmarkColdReadProduce.
type coldFigures struct {
	idleP99, p50, p99 time.Duration
	produceMBps       float64
	readMBps          float64
}

// BenchmarkColdReadProduce measures produce latency and throughput on one partition
// while eight consumers read it from offset 0, against kaas and kfake in the same run.
// The partition first holds coldPreload bytes; on kaas, its sealed segments are dropped
// from the page cache every few milliseconds (posix_fadvise DONTNEED), so the readers
// read from the disk as much as a test can make them. A partition actor that reads for
// its fetches in its own turn makes the producers wait behind them: kaas_p99_ms against
// kaas_idle_p99_ms shows how tied the two are.
func BenchmarkColdReadProduce(b *testing.B) {
	for i := 0; i < b.N; i++ {
		kaasAddr, dir := startColdKaas(b)
		kaas := runCold(b, kaasAddr, dir)
		fake := runCold(b, startKfake(b), "")
		b.ReportMetric(ms(kaas.idleP99), "kaas_idle_p99_ms")
		b.ReportMetric(ms(kaas.p99), "kaas_p99_ms")
		b.ReportMetric(ms(fake.idleP99), "kfake_idle_p99_ms")
		b.ReportMetric(ms(fake.p99), "kfake_p99_ms")
		b.ReportMetric(float64(kaas.p99)/float64(fake.p99), "p99_ratio")
		b.ReportMetric(kaas.produceMBps, "kaas_produce_MB/s")
		b.ReportMetric(fake.produceMBps, "kfake_produce_MB/s")
		b.ReportMetric(kaas.produceMBps/fake.produceMBps, "produce_ratio")
		b.ReportMetric(kaas.readMBps, "kaas_read_MB/s")
		b.ReportMetric(fake.readMBps, "kfake_read_MB/s")
		b.Logf("kaas:  produce p99 idle %v, with %d cold readers p50 %v p99 %v; produce %.1f MB/s; readers %.1f MB/s",
			kaas.idleP99, coldReaders, kaas.p50, kaas.p99, kaas.produceMBps, kaas.readMBps)
		b.Logf("kfake: produce p99 idle %v, with %d readers p50 %v p99 %v; produce %.1f MB/s; readers %.1f MB/s",
			fake.idleP99, coldReaders, fake.p50, fake.p99, fake.produceMBps, fake.readMBps)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func startColdKaas(b *testing.B) (string, string) {
	c := brokertest.Config(b)
	br, err := broker.Start(c, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		br.Stop(ctx)
	})
	return br.Addr(), filepath.Join(c.DataDir, "topics", coldTopic, "0")
}

// runCold preloads the partition, then measures produce latency alone, then produce
// latency and throughput while the readers read from offset 0 over and over. dir, when
// set, is the partition's directory on disk (kaas), whose sealed segments are kept cold.
func runCold(b *testing.B, addr, dir string) coldFigures {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	var configs map[string]*string
	if dir != "" {
		seg := "8388608"
		configs = map[string]*string{"segment.bytes": &seg}
	}
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, configs, coldTopic); err != nil {
		b.Fatal(err)
	}
	values := make([]byte, coldPreload)
	rand.Read(values)
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(coldTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(benchCompression(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	preloaded := int64(coldPreload / recordBytes)
	for i := int64(0); i < preloaded; i++ {
		prod.Produce(ctx, &kgo.Record{Value: values[i*recordBytes : (i+1)*recordBytes]}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("preload: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	lat, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(coldTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer lat.Close()
	var f coldFigures
	_, f.idleP99 = produceLatency(b, ctx, lat, coldLatRecs/3)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	if dir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keepCold(stop, dir)
		}()
	}
	var read atomic.Int64
	readers := make([]*kgo.Client, coldReaders)
	for r := range readers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{coldTopic: {0: kgo.NewOffset().At(0)}}))
		if err != nil {
			b.Fatal(err)
		}
		readers[r] = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			readFromStart(ctx, stop, cl, preloaded, &read)
		}()
	}
	// Let every reader have a fetch in flight before measuring.
	for deadline := time.Now().Add(10 * time.Second); read.Load() < coldReaders*recordBytes && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	readStart, readBase := time.Now(), read.Load()
	f.p50, f.p99 = produceLatency(b, ctx, lat, coldLatRecs)
	start := time.Now()
	for i := 0; i < coldBurstRecs; i++ {
		v := values[(i%int(preloaded))*recordBytes : (i%int(preloaded)+1)*recordBytes]
		prod.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	f.produceMBps = float64(coldBurstRecs*recordBytes) / 1e6 / time.Since(start).Seconds()
	f.readMBps = float64(read.Load()-readBase) / 1e6 / time.Since(readStart).Seconds()
	close(stop)
	for _, cl := range readers {
		cl.Close() // ends a poll in progress
	}
	wg.Wait()
	return f
}

// produceLatency produces n paced records one at a time (no linger) and returns the
// median and 99th percentile of the time each took to be acknowledged.
func produceLatency(b *testing.B, ctx context.Context, cl *kgo.Client, n int) (time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: randomValue()}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				b.Errorf("produce: %v", err)
			}
			lat[i] = time.Since(sent)
		})
		time.Sleep(coldLatPace)
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[n/2], lat[n*99/100]
}

// readFromStart reads the partition from offset 0 to the end of the preload, and again,
// until stop, counting the record bytes it gets.
func readFromStart(ctx context.Context, stop <-chan struct{}, cl *kgo.Client, upTo int64, read *atomic.Int64) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		fs := cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		last := int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			read.Add(int64(len(r.Value)))
			last = r.Offset
		})
		if last >= upTo-1 {
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{coldTopic: {0: {Epoch: -1, Offset: 0}}})
		}
	}
}

// keepCold drops the partition's sealed segments from the page cache every few
// milliseconds until stop (the newest segment, still written, is left alone).
func keepCold(stop <-chan struct{}, dir string) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var segs []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".log") {
				segs = append(segs, e.Name())
			}
		}
		sort.Strings(segs)
		for _, name := range segs[:max(0, len(segs)-1)] {
			if f, err := os.Open(filepath.Join(dir, name)); err == nil {
				_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				f.Close()
			}
		}
	}
}
