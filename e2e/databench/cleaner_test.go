package databench

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	dirtyTopic   = "dirty"
	dirtyBytes   = 128 << 20 // keyed records preloaded, every key written many times
	dirtyKeys    = 2000
	dirtySegment = 8 << 20
	idleSamples  = 1000
	latPace      = time.Millisecond
)

// cleanFigures is one broker's run of BenchmarkCleanerProduce.
type cleanFigures struct {
	idleP99, cleanP99 time.Duration
	cleanSamples      int
	cleanedMBps       float64
}

// BenchmarkCleanerProduce measures what log compaction costs the producers of the same
// broker, against kfake's compaction in the same run: a compacted-to-be partition is
// preloaded with dirtyBytes of keyed records (each of dirtyKeys keys overwritten many
// times), then one producer sends paced single-record batches (acks=all) to another
// topic; its p99 is taken while the preloaded partition is cleaned (kaas: from the change of its cleanup.policy to compact, which
// plans a pass at once, until kaas_log_cleaner_passes_total counts it; kfake: the
// Cluster.Compact call that cleans it), and again once it is done (idle, over as many
// samples). Figures: the two p99s, their ratio (the goal:
// at most 1.2) and the MB/s of dirty log cleaned.
func BenchmarkCleanerProduce(b *testing.B) {
	for i := 0; i < b.N; i++ {
		kaas := runClean(b, startCleanKaas(b))
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		fake := runClean(b, fakeCleaner{c})
		c.Close()
		for _, f := range []struct {
			name string
			f    cleanFigures
		}{{"kaas", kaas}, {"kfake", fake}} {
			b.ReportMetric(ms(f.f.idleP99), f.name+"_idle_p99_ms")
			b.ReportMetric(ms(f.f.cleanP99), f.name+"_cleaning_p99_ms")
			b.ReportMetric(float64(f.f.cleanP99)/float64(f.f.idleP99), f.name+"_cleaning_p99_rise")
			b.ReportMetric(f.f.cleanedMBps, f.name+"_cleaned_MB/s")
			b.Logf("%s: produce p99 idle %v, while cleaning %v (%d samples); cleaned %.1f MB/s",
				f.name, f.f.idleP99, f.f.cleanP99, f.f.cleanSamples, f.f.cleanedMBps)
		}
	}
}

// cleanerUnderTest is a broker whose compaction the benchmark starts and waits for.
type cleanerUnderTest interface {
	addr() string
	// clean cleans dirtyTopic (its cleanup.policy is already compact) and returns once
	// done, with the bytes the pass read.
	clean(ctx context.Context, adm *kadm.Client) (int64, error)
}

type kaasCleaner struct{ kafka, http, dir string }

func (k kaasCleaner) addr() string { return k.kafka }

// clean waits for the pass by the partition's files, not by asking the broker (a
// scrape of /metrics every few milliseconds costs the producers more than the pass):
// the pass is swapped in once the segments hold less than half their bytes. Then one
// scrape checks it was counted and says what it cleaned.
func (k kaasCleaner) clean(ctx context.Context, _ *kadm.Client) (int64, error) {
	dirty := k.logBytes()
	for k.logBytes() > dirty/2 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	for {
		m, err := scrapeCleaner(k.http)
		if err != nil {
			return 0, err
		}
		if m["kaas_log_cleaner_passes_total"] >= 1 {
			return int64(m["kaas_log_cleaner_cleaned_bytes_total"]), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logBytes is the size of the dirty partition's segment files.
func (k kaasCleaner) logBytes() int64 {
	files, _ := filepath.Glob(filepath.Join(k.dir, "topics", dirtyTopic, "0", "*.log"))
	var n int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

type fakeCleaner struct{ c *kfake.Cluster }

func (f fakeCleaner) addr() string { return f.c.ListenAddrs()[0] }

func (f fakeCleaner) clean(context.Context, *kadm.Client) (int64, error) {
	f.c.Compact()
	return dirtyBytes, nil
}

func startCleanKaas(b *testing.B) kaasCleaner {
	c := brokertest.Config(b)
	c.HTTPListen = "127.0.0.1:0"
	c.LogRetentionCheck = time.Hour // the only pass is the one the config change plans
	if os.Getenv("KAAS_BENCH_NOSYNC") != "" {
		c.LogFlushIntervalMessages = 1 << 40 // as BenchmarkDataPath: no fsync per produce
	}
	if v := os.Getenv("KAAS_BENCH_CLEANER_RATE"); v != "" {
		// log.cleaner.io.max.bytes.per.second, to see what the throttle buys.
		rate, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatal(err)
		}
		c.LogCleanerIOMaxBytesPerSecond = rate
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
	return kaasCleaner{br.Addr(), br.HTTPAddr(), c.DataDir}
}

// scrapeCleaner reads the log cleaner's counters from /metrics (the sum over labels).
func scrapeCleaner(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kaas_log_cleaner_") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

func runClean(b *testing.B, u cleanerUnderTest) cleanFigures {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(u.addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	seg := strconv.Itoa(dirtySegment)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": &seg}, dirtyTopic); err != nil {
		b.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "lat"); err != nil {
		b.Fatal(err)
	}
	preload(b, ctx, u.addr())

	lat, err := kgo.NewClient(kgo.SeedBrokers(u.addr()), kgo.DefaultProduceTopic("lat"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer lat.Close()
	var f cleanFigures
	sampleLatency(b, ctx, lat, func(n int) bool { return n >= 100 }) // connections made, warm

	// Compacted from now on: kaas plans its pass at once; kfake cleans in Compact.
	policy, ratio := "compact", "0.01"
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &policy}, {Name: "min.cleanable.dirty.ratio", Value: &ratio}}, dirtyTopic)
	if err != nil || res[0].Err != nil {
		b.Fatalf("alter: %v %+v", err, res)
	}
	start := time.Now()
	done := make(chan struct{})
	var cleaned int64
	var cleanErr error
	go func() {
		defer close(done)
		cleaned, cleanErr = u.clean(ctx, adm)
	}()
	during := sampleLatency(b, ctx, lat, func(int) bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	<-done
	took := time.Since(start)
	if cleanErr != nil {
		b.Fatal(cleanErr)
	}
	f.cleanSamples = len(during)
	if len(during) > 0 {
		f.cleanP99 = p99(during)
	}
	f.cleanedMBps = float64(cleaned) / 1e6 / took.Seconds()
	// The idle p99 over as many samples as were taken while cleaning (at least
	// idleSamples), once the pass is done: a p99 over a longer window catches more of a
	// shared disk's stalls, so the two are compared over windows of one size.
	idle := sampleLatency(b, ctx, lat, func(n int) bool { return n >= max(idleSamples, len(during)) })
	f.idleP99 = p99(idle)
	return f
}

// preload writes dirtyBytes of 1 KiB records over dirtyKeys keys into dirtyTopic.
func preload(b *testing.B, ctx context.Context, addr string) {
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(dirtyTopic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	values := make([]byte, 1<<20)
	rand.Read(values)
	for i := 0; i < dirtyBytes/recordBytes; i++ {
		off := (i * recordBytes) % (len(values) - recordBytes)
		rec := &kgo.Record{Key: []byte(fmt.Sprintf("key-%05d", i%dirtyKeys)), Value: values[off : off+recordBytes]}
		prod.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("preload: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// sampleLatency produces paced records one at a time until enough says stop, and
// returns how long each took to be acknowledged.
func sampleLatency(b *testing.B, ctx context.Context, cl *kgo.Client, enough func(n int) bool) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for n := 0; !enough(n); n++ {
		wg.Add(1)
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: randomValue()}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				b.Errorf("produce: %v", err)
			}
			mu.Lock()
			lat = append(lat, time.Since(sent))
			mu.Unlock()
		})
		time.Sleep(latPace)
	}
	wg.Wait()
	return lat
}

func p99(lat []time.Duration) time.Duration {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)*99/100]
}
