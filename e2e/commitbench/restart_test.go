package commitbench

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// BenchmarkRestartLiveGroups makes N live groups (a first OffsetCommit of 4 partitions
// each, as BenchmarkLiveGroups), stops the broker gracefully and starts it again on the
// same data dir, and reports how long the stop took and how long the start took until
// the broker served: Start returned and an OffsetFetch of the last group made answered
// its committed offsets. The checkpoint interval is an hour, so that at the stop every
// group's file is behind the journal (as for groups that all committed within the last
// interval). KAAS_BENCH_RESTART_GROUPS sets N (default 100,000).
//
// kaas_stop_cpu_s and kaas_start_cpu_s are the CPU time (user and system) the process
// spent in each, the figures to compare on a machine shared with other work.
//
// KAAS_BENCH_PROFILE_DIR, when set, is where the CPU profiles of the stop and of the start
// go (stop.cpu, start.cpu), each of that phase alone.
//
// kfake keeps no durable state across a restart, so its figure beside these is the time
// it takes to make the same N groups in memory (its rate as BenchmarkLiveGroups reports
// it): how long a kfake restart would take to have them again. restart_s, the figure
// hack/benchtable sets beside it, is kaas's stop plus its start until it served.
//
//	go test -run NONE -bench RestartLiveGroups -benchtime 1x ./e2e/commitbench/
func BenchmarkRestartLiveGroups(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("KAAS_BENCH_RESTART_GROUPS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		c := brokertest.Config(b)
		c.LogLevel = "warn"
		// Every group's file is behind the journal when the broker stops: the worst
		// case, that of groups that all committed in the last checkpoint interval.
		c.OffsetsCheckpointInterval = time.Hour
		kaas := brokertest.StartWith(b, c)
		createTopic(b, kaas.Addr())
		createGroups(b, kaas.Addr(), n)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		endProfile := profile(b, "stop")
		cpu := cpuTime()
		start := time.Now()
		if err := kaas.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		stop := time.Since(start)
		stopCPU := cpuTime() - cpu
		endProfile()
		cancel()

		c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 0}}
		endProfile = profile(b, "start")
		cpu = cpuTime()
		start = time.Now()
		again := brokertest.StartWith(b, c)
		started := time.Since(start)
		startCPU := cpuTime() - cpu
		endProfile()
		r := brokertest.Dial(b, again.Addr())
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 7
		req.Group = "live-" + strconv.Itoa(n-1)
		resp := r.Roundtrip(req, 1).(*kmsg.OffsetFetchResponse)
		serving := time.Since(start)
		r.C.Close()
		if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 4 ||
			resp.Topics[0].Partitions[0].Offset != int64(n-1) {
			b.Fatalf("after the restart, group live-%d fetched %+v", n-1, resp)
		}

		mem := fakeCluster(b, false)
		mRate := createGroups(b, mem, n)
		mTime := float64(n) / mRate

		b.ReportMetric(stop.Seconds(), "kaas_stop_s")
		b.ReportMetric(stopCPU.Seconds(), "kaas_stop_cpu_s")
		b.ReportMetric(startCPU.Seconds(), "kaas_start_cpu_s")
		b.ReportMetric(started.Seconds(), "kaas_start_s")
		b.ReportMetric(serving.Seconds(), "kaas_serving_s")
		b.ReportMetric((stop + serving).Seconds(), "kaas_restart_s")
		b.ReportMetric(mTime, "kfake_mem_restart_s")
		b.Logf("%d live groups of 4 partitions: kaas stop %.2f s, start %.2f s (serving after %.2f s); kfake in memory makes them in %.2f s (%.0f groups/s): restart/remake %.2fx",
			n, stop.Seconds(), started.Seconds(), serving.Seconds(), mTime, mRate, (stop+serving).Seconds()/mTime)
	}
}

// profile starts a CPU profile of one phase into $KAAS_BENCH_PROFILE_DIR/<name>.cpu, when
// that is set; the function it returns ends it.
func profile(b *testing.B, name string) func() {
	dir := os.Getenv("KAAS_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
