// Package commitbench measures durable OffsetCommit throughput and latency over the wire:
// kaas (every acknowledged commit fsynced) against franz-go's kfake with SyncWrites and
// without it, in the same run, with the ratios, for 1, 16 and 256 concurrent committers
// spread over 1 and over 64 groups, after the disk's own rates (the floor).
//
//	go test -run NONE -bench Commits -benchtime 1x ./e2e/commitbench/
//
// KAAS_BENCH_SECONDS sets how long each cell runs (default 3). Every cell runs with two
// kinds of client:
//
//   - client=conns: each committer has its own connection, as each consumer of a group has
//     to its coordinator, and speaks OffsetCommit v9 through kmsg with nothing between it
//     and the socket: one request in flight per connection, two syscalls per commit on
//     each side.
//   - client=kgo: the committers share at most 16 franz-go clients, as goroutines of one
//     application do, so requests of several committers go out pipelined on one
//     connection; the client library's own scheduling is in every latency.
//
// -bench Commits/client=conns (or =kgo) runs one kind. The process runs with one P more
// than cores, as cmd/kaas does (broker.SpareProc), for kaas and kfake alike; the clients
// share the process.
package commitbench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

const topic = "bench"

type result struct {
	perSec   float64
	p50, p99 time.Duration
}

func cellDuration() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("KAAS_BENCH_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 3 * time.Second
}

// run commits from committers goroutines over groups groups against addr for d.
func run(b testing.TB, client, addr string, committers, groups int, d time.Duration) result {
	if client == "kgo" {
		return runKgo(b, addr, committers, groups, d)
	}
	return runRaw(b, addr, committers, groups, d)
}

func commitReq(c, groups int, off int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = "bench-" + strconv.Itoa(c%groups)
	req.Generation = -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition = int32(c % 8)
	p.Offset = off
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

// runRaw gives each committer its own connection and one request in flight on it.
func runRaw(b testing.TB, addr string, committers, groups int, d time.Duration) result {
	conns := make([]*brokertest.Raw, committers)
	for i := range conns {
		conns[i] = brokertest.Dial(b, addr)
	}
	return drive(b, committers, d, func(c int, off int64) (*kmsg.OffsetCommitResponse, error) {
		req := commitReq(c, groups, off)
		if _, err := conns[c].C.Write(conns[c].Encode(req, int32(off))); err != nil {
			return nil, err
		}
		frame, err := conns[c].ReadFrame(30 * time.Second)
		if err != nil {
			return nil, err
		}
		resp := kmsg.NewPtrOffsetCommitResponse()
		resp.Version = req.Version
		if corr, err := brokertest.Decode(frame, resp); err != nil || corr != int32(off) {
			return nil, fmt.Errorf("response %d to request %d: %v", corr, off, err)
		}
		return resp, nil
	})
}

// runKgo commits through franz-go clients.
func runKgo(b testing.TB, addr string, committers, groups int, d time.Duration) result {
	nClients := min(committers, 16)
	clients := make([]*kgo.Client, nClients)
	for i := range clients {
		// OffsetCommit v9 for both (the requests name topics; v10 names them by id).
		versions := kversion.Stable()
		versions.SetMaxKeyVersion(8, 9)
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.MaxVersions(versions))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	return drive(b, committers, d, func(c int, off int64) (*kmsg.OffsetCommitResponse, error) {
		return commitReq(c, groups, off).RequestWith(ctx, clients[c%nClients])
	})
}

// drive runs committers goroutines for d, each committing the next offset with commit
// and waiting for the answer, and summarizes the rate and latencies.
func drive(b testing.TB, committers int, d time.Duration, commit func(c int, off int64) (*kmsg.OffsetCommitResponse, error)) result {
	var total atomic.Int64
	lat := make([][]time.Duration, committers)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(1); time.Now().Before(stop); off++ {
				t0 := time.Now()
				resp, err := commit(c, off)
				if err != nil {
					b.Errorf("commit: %v", err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
				if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
					b.Errorf("commit error code %d", code)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{perSec: float64(total.Load()) / elapsed.Seconds()}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

func BenchmarkCommits(b *testing.B) {
	d := cellDuration()
	broker.SpareProc()
	b.Run("disk", func(b *testing.B) {
		fsyncs, datasyncs, cycles := diskFloor(b, b.TempDir(), time.Second)
		b.ReportMetric(fsyncs, "fsyncs/s")
		b.ReportMetric(datasyncs, "journal_datasyncs/s")
		b.ReportMetric(cycles, "rewrites/s")
		b.Logf("disk floor: append+fsync %.0f/s, zero-filled write+fdatasync %.0f/s (the offsets journal), file rewrite cycle %.0f/s",
			fsyncs, datasyncs, cycles)
	})
	for _, client := range []string{"conns", "kgo"} {
		for _, committers := range []int{1, 16, 256} {
			for _, groups := range []int{1, 64} {
				if groups > committers {
					continue
				}
				b.Run(fmt.Sprintf("client=%s/committers=%d/groups=%d", client, committers, groups), func(b *testing.B) {
					cell(b, client, committers, groups, d)
				})
			}
		}
	}
}

// cell runs one cell against kaas, kfake with SyncWrites and kfake in memory.
func cell(b *testing.B, client string, committers, groups int, d time.Duration) {
	// The cell before left files to write back and directories to delete: flushed first,
	// so that its disk work is not measured against this cell's kaas.
	syscall.Sync()
	kaas := brokertest.Start(b, func(c *config.Config) { c.LogLevel = "warn" })
	createTopic(b, kaas.Addr())
	k := run(b, client, kaas.Addr(), committers, groups, d)

	synced := fakeCluster(b, true)
	s := run(b, client, synced, committers, groups, d)
	mem := fakeCluster(b, false)
	m := run(b, client, mem, committers, groups, d)

	b.ReportMetric(k.perSec, "kaas_commits/s")
	b.ReportMetric(ms(k.p50), "kaas_p50_ms")
	b.ReportMetric(ms(k.p99), "kaas_p99_ms")
	b.ReportMetric(s.perSec, "kfake_sync_commits/s")
	b.ReportMetric(ms(s.p99), "kfake_sync_p99_ms")
	b.ReportMetric(m.perSec, "kfake_mem_commits/s")
	b.ReportMetric(ms(m.p99), "kfake_mem_p99_ms")
	b.Logf("client=%s committers=%d groups=%d: kaas %.0f/s (p50 %v, p99 %v); kfake+SyncWrites %.0f/s (p99 %v), ratio %.1fx; kfake in memory %.0f/s (p99 %v), ratio %.2fx",
		client, committers, groups, k.perSec, k.p50, k.p99, s.perSec, s.p99, k.perSec/s.perSec, m.perSec, m.p99, k.perSec/m.perSec)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fakeCluster(b *testing.B, sync bool) string {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(8, topic)}
	if sync {
		opts = append(opts, kfake.DataDir(b.TempDir()), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func createTopic(b testing.TB, addr string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = 8
	t.ReplicationFactor = 1
	req.Topics = append(req.Topics, t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := req.RequestWith(ctx, cl); err != nil {
		b.Fatal(err)
	}
}
