package pinbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/e2e/proc"
)

const (
	topic       = "pin"
	topicBytes  = 20 << 20
	recordBytes = 64 << 10
	fetchers    = 4
	pipelined   = 64
	fetchMax    = 16 << 20
	dribblers   = 60
	frameSize   = 100 << 20
)

// BenchmarkNonReadingFetchers reports the kaas process's peak RSS while four connections
// each pipeline 64 Fetches of 16 MiB on a 20 MB topic and never read their sockets.
func BenchmarkNonReadingFetchers(b *testing.B) {
	for i := 0; i < b.N; i++ {
		bin := proc.Build(b)
		dir := b.TempDir()
		br := proc.Start(b, bin, filepath.Join(dir, "data"), proc.FreePort(b))
		fill(b, br.Addr)
		base := rss(b, br.Pid(), "VmRSS")
		for range fetchers {
			r := brokertest.Dial(b, br.Addr)
			for corr := range int32(pipelined) {
				r.Send(fetchReq(), corr)
			}
		}
		peak := settle(b, br.Pid())
		b.ReportMetric(float64(base)/(1<<20), "idle_rss_MiB")
		b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MiB")
		b.Logf("kaas process: RSS %d MiB before the fetchers, peak %d MiB with %d non-reading fetchers",
			base>>20, peak>>20, fetchers)
		_, _ = br.Term(10 * time.Second)
	}
}

// BenchmarkDribblingFrames reports an in-process broker's Go heap in use while 60
// connections each announce a 100 MB frame and then send one byte a second.
func BenchmarkDribblingFrames(b *testing.B) {
	for i := 0; i < b.N; i++ {
		br := brokertest.Start(b, nil)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		conns := make([]*brokertest.Raw, dribblers)
		for j := range conns {
			conns[j] = brokertest.Dial(b, br.Addr())
			var size [4]byte
			binary.BigEndian.PutUint32(size[:], frameSize)
			conns[j].Write(size[:])
		}
		var peak uint64
		for s := 0; s < 5; s++ {
			for _, c := range conns {
				c.Write([]byte{0})
			}
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			time.Sleep(time.Second) // the dribble's pace, not an ordering wait
		}
		b.ReportMetric(float64(base)/(1<<20), "idle_heap_MiB")
		b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MiB")
		b.Logf("in-process broker: heap in use %d MiB before, peak %d MiB with %d dribbling %d MiB frames",
			base>>20, peak>>20, dribblers, frameSize>>20)
		for _, c := range conns {
			c.C.Close()
		}
	}
}

func fetchReq() *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.ReplicaID = -1
	req.MaxBytes = fetchMax
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = topic
	p := kmsg.NewFetchRequestTopicPartition()
	p.PartitionMaxBytes = fetchMax
	p.LogStartOffset = -1
	p.CurrentLeaderEpoch = -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

// fill writes topicBytes of records to a one-partition topic.
func fill(b *testing.B, addr string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	val := bytes.Repeat([]byte("x"), recordBytes)
	for range topicBytes / recordBytes {
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// settle polls the process's RSS until it has not grown for three seconds (or 30 s
// passed) and returns its peak (VmHWM).
func settle(b *testing.B, pid int) int64 {
	deadline := time.Now().Add(30 * time.Second)
	last, since := int64(0), time.Now()
	for time.Now().Before(deadline) && time.Since(since) < 3*time.Second {
		if r := rss(b, pid, "VmRSS"); r > last {
			last, since = r, time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return rss(b, pid, "VmHWM")
}

// rss reads a size field (in bytes) from /proc/<pid>/status.
func rss(b *testing.B, pid int, field string) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
