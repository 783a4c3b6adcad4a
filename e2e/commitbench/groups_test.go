package commitbench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// BenchmarkLiveGroups creates live groups, each by a first OffsetCommit of 4 partitions
// (8 connections, 64 requests in flight on each), and reports how fast they were made
// and the heap and stacks they hold, for kaas and for kfake with SyncWrites in the same
// run, and for kfake keeping them in memory. KAAS_BENCH_GROUPS sets how many (default
// 100,000); KAAS_BENCH_HEAPPROFILE=path writes the heap profile of kaas holding them
// once idle; KAAS_BENCH_PROFILE_DIR, when set, gets the CPU profile of kaas making them
// (live-groups-kaas.cpu). The CPU time of each side making its groups (the clients'
// included) is reported per group beside the rates, for loaded machines. kaas_settled_bytes/group: the last checkpoints written, so what is left is
// what the groups keep; kaas_idle_bytes/group: offsets.idle.passivation.ms later, with
// their offsets actors passivated.
//
//	go test -run NONE -bench LiveGroups -benchtime 1x ./e2e/commitbench/
//
// The clients live in this process too; they are 8 connections, a few KB against the
// hundreds of MB measured. kaas's journal and group files are on disk, not in the heap.
func BenchmarkLiveGroups(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("KAAS_BENCH_GROUPS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		syscall.Sync()
		before := inUse()
		kaas := brokertest.Start(b, func(c *config.Config) { c.LogLevel = "warn" })
		createTopic(b, kaas.Addr())
		base := inUse() - before // the broker itself
		goroutines := runtime.NumGoroutine()
		stopProfile := profile(b, "live-groups-kaas")
		cpu0 := cpuTime()
		kRate := createGroups(b, kaas.Addr(), n)
		kCPU := cpuTime() - cpu0
		stopProfile()
		kPer := float64(inUse()-before-base) / float64(n)
		// What the figure is made of: the live heap, the heap's spans in use (with their
		// free slots), and the stacks, with the goroutines behind them. It includes the
		// checkpoints of the last offsets.checkpoint.interval.ms of groups, each waiting
		// on a goroutine for one of the write slots, as many as the disk is behind.
		logHeld(b, "kaas holding", n)
		// Settled: once the last group's checkpoint is due and the goroutines writing
		// checkpoints are done, what is left is what the live groups keep.
		settle(b, time.Now().Add(config.Default().OffsetsCheckpointInterval), goroutines)
		kSettled := float64(inUse()-before-base) / float64(n)
		logHeld(b, "kaas settled with", n)
		// Idle: once offsets.idle.passivation.ms has passed too, the groups' offsets
		// actors have stopped (the groups stay live, and bring them back from their files
		// on their next request).
		settle(b, time.Now().Add(config.Default().OffsetsIdlePassivation+time.Second), goroutines)
		kIdle := float64(inUse()-before-base) / float64(n)
		logHeld(b, "kaas idle with", n)
		if path := os.Getenv("KAAS_BENCH_HEAPPROFILE"); path != "" {
			writeHeapProfile(b, path)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := kaas.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()

		before = inUse()
		fake := fakeCluster(b, true)
		base = inUse() - before
		cpu0 = cpuTime()
		fRate := createGroups(b, fake, n)
		fCPU := cpuTime() - cpu0
		fPer := float64(inUse()-before-base) / float64(n)

		before = inUse()
		mem := fakeCluster(b, false)
		base = inUse() - before
		cpu0 = cpuTime()
		mRate := createGroups(b, mem, n)
		mCPU := cpuTime() - cpu0
		mPer := float64(inUse()-before-base) / float64(n)

		b.ReportMetric(kPer, "kaas_bytes/group")
		b.ReportMetric(kSettled, "kaas_settled_bytes/group")
		b.ReportMetric(kIdle, "kaas_idle_bytes/group")
		b.ReportMetric(fPer, "kfake_sync_bytes/group")
		b.ReportMetric(kRate, "kaas_groups/s")
		b.ReportMetric(fRate, "kfake_sync_groups/s")
		b.ReportMetric(float64(kCPU.Microseconds())/float64(n), "kaas_cpu_us/group")
		b.ReportMetric(float64(fCPU.Microseconds())/float64(n), "kfake_sync_cpu_us/group")
		b.ReportMetric(float64(mCPU.Microseconds())/float64(n), "kfake_mem_cpu_us/group")
		b.ReportMetric(mPer, "kfake_mem_bytes/group")
		b.ReportMetric(mRate, "kfake_mem_groups/s")
		b.Logf("%d groups of 4 partitions: kaas %.0f B/group (%.0f settled, %.0f idle), %.0f groups/s; kfake+SyncWrites %.0f B/group, %.0f groups/s (ratios %.2fx memory, %.2fx rate); kfake in memory %.0f B/group, %.0f groups/s (%.2fx rate)",
			n, kPer, kSettled, kIdle, kRate, fPer, fRate, kPer/fPer, kRate/fRate, mPer, mRate, kRate/mRate)
	}
}

// logHeld logs the live heap, the heap in use, the stacks and the goroutines.
func logHeld(b *testing.B, what string, n int) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.Logf("%s %d groups: heap alloc %d MB, heap in use %d MB, stacks %d MB, %d goroutines",
		what, n, ms.HeapAlloc>>20, ms.HeapInuse>>20, ms.StackInuse>>20, runtime.NumGoroutine())
}

// settle waits until due has passed and the goroutines are back to at most base plus
// the dispatcher's idle workers (actor.maxIdle), for at most a minute.
func settle(b *testing.B, due time.Time, base int) {
	const idleWorkers = 256
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(due) || runtime.NumGoroutine() > base+idleWorkers {
		if time.Now().After(deadline) {
			b.Logf("not settled after a minute: %d goroutines", runtime.NumGoroutine())
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeHeapProfile writes the heap profile of kaas holding its live groups to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// inUse is the heap and stacks in use after a collection.
func inUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// createGroups makes n groups, live-0 .. live-(n-1), each with a first commit of
// partitions 0-3, and returns groups made per second.
func createGroups(b *testing.B, addr string, n int) float64 {
	const conns, depth = 8, 64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	for c := range conns {
		r := brokertest.Dial(b, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.C.Close()
			var mine []int
			for g := c; g < n; g += conns {
				mine = append(mine, g)
			}
			sent, got := 0, 0
			for got < len(mine) {
				for sent < len(mine) && sent-got < depth {
					if _, err := r.C.Write(r.Encode(firstCommit(mine[sent]), int32(sent))); err != nil {
						errs <- err
						return
					}
					sent++
				}
				frame, err := r.ReadFrame(60 * time.Second)
				if err != nil {
					errs <- err
					return
				}
				resp := kmsg.NewPtrOffsetCommitResponse()
				resp.Version = 9
				corr, err := brokertest.Decode(frame, resp)
				if err != nil || corr != int32(got) {
					errs <- fmt.Errorf("response %d to request %d: %v", corr, got, err)
					return
				}
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							errs <- fmt.Errorf("group live-%d partition %d: error code %d", mine[got], p.Partition, p.ErrorCode)
							return
						}
					}
				}
				got++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

func firstCommit(g int) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = "live-" + strconv.Itoa(g)
	req.Generation = -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	for p := range int32(4) {
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition = p
		cp.Offset = int64(g)
		t.Partitions = append(t.Partitions, cp)
	}
	req.Topics = append(req.Topics, t)
	return req
}
