package offsets

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/storage"
)

// Benchmarks of the durable path. Run on the volume kaas will use:
//
//	KAAS_BENCH_DIR=/data go test -run XXX -bench . -benchtime 3s ./actors/offsets/
//
// BenchmarkDurableCommits reports commits/s and p50/p99 latency of acknowledged (fsynced)
// commits; BenchmarkDiskCycle reports the disk's own rate of a checkpoint's write cycle (tmp
// write, fsync, rename, directory fsync) without the actor, to compare them with.

func benchDir(b *testing.B) string {
	if d := os.Getenv("KAAS_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "offsets-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// collector forwards the promises it settles to a channel: a committer's mailbox.
type collector struct{ ch chan any }

func (c *collector) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*actor.Settled); ok {
		c.ch <- m.Value
	}
}

// BenchmarkDurableCommits runs each cell on the broker's journal: a batch is durable with
// one fdatasync shared by every group, files rewritten behind it.
func BenchmarkDurableCommits(b *testing.B) {
	for _, committers := range []int{1, 16, 256} {
		for _, groups := range []int{1, 64} {
			b.Run(fmt.Sprintf("committers=%d/groups=%d", committers, groups), func(b *testing.B) {
				benchCommits(b, committers, groups)
			})
		}
	}
}

func benchCommits(b *testing.B, committers, groups int) {
	root := benchDir(b)
	dir := filepath.Join(root, "offsets")
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	fsys := storage.NewFaultFS(nil) // no faults: it counts the syncs
	jpid := sys.Spawn(journal.Props(journal.Config{Dir: filepath.Join(root, "journal"), FS: fsys, Log: zerolog.Nop()}))
	pids := make([]*actor.PID, groups)
	for g := range pids {
		pids[g] = sys.Spawn(Props(Config{Group: fmt.Sprintf("bench-group-%d", g), Dir: dir, FS: fsys, Log: zerolog.Nop(), Journal: jpid}))
	}
	defer func() {
		for _, pid := range pids {
			_ = sys.Poison(pid, 10*time.Second)
		}
		_ = sys.Poison(jpid, 10*time.Second)
	}()
	// Every group's file exists before timing starts (the directory, first loads).
	for g, pid := range pids {
		w := sys.NewWaiter()
		sys.Send(pid, &Commit{Entries: []Entry{entry("warm", int32(g), 0)}, Reply: w.Promise})
		if _, ok := w.Wait(10 * time.Second); !ok {
			b.Fatal("warm-up commit timed out")
		}
	}
	syncs0 := fsys.Count(storage.OpSync)

	var next atomic.Int64
	lat := make([][]time.Duration, committers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			col := &collector{ch: make(chan any, 1)}
			me := sys.Spawn(actor.PropsOf(func() actor.Actor { return col }))
			defer sys.Stop(me, time.Second)
			pid := pids[c%groups]
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				t0 := time.Now()
				sys.Send(pid, &Commit{Entries: []Entry{entry("t", int32(c), i)}, Reply: sys.PromiseTo(me)})
				res := (<-col.ch).(*CommitResult)
				if res.Codes[0] != 0 {
					b.Errorf("commit failed: %v", res.Codes)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	reportPercentiles(b, lat)
	if w := fsys.Count(storage.OpSync) - syncs0; w > 0 {
		b.ReportMetric(float64(b.N)/float64(w), "commits/write")
	}
}

// BenchmarkDiskCycle is the disk's own rate of the durable write cycle the actor uses
// (a ~300-byte file: create tmp, write, fsync, close, rename, fsync the directory), from
// one writer and from 64 writers on 64 files in one directory.
func BenchmarkDiskCycle(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := benchDir(b)
			data := make([]byte, 300)
			var next atomic.Int64
			var wg sync.WaitGroup
			lat := make([][]time.Duration, writers)
			b.ResetTimer()
			start := time.Now()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("f%d.json", w)
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						t0 := time.Now()
						if err := storage.WriteFileAtomic(storage.OSFS{}, dir, name, data); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat [][]time.Duration) {
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(float64(len(all)-1)*p)].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
}

// BenchmarkFsync is one fsync of a small append, the disk's raw rate.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(benchDir(b), "f"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		f.Write([]byte("x"))
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "fsyncs/s")
}

// BenchmarkListGroupIDs100k is what a broker with 100,000 group files spends at start to
// know its groups: names are listed, no file is read.
func BenchmarkListGroupIDs100k(b *testing.B) {
	dir := benchDir(b)
	for i := range 100_000 {
		if err := os.WriteFile(filepath.Join(dir, FileName(fmt.Sprintf("group-%d", i))), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		ids, err := ListGroupIDs(storage.OSFS{}, dir)
		if err != nil || len(ids) != 100_000 {
			b.Fatalf("%d ids, %v", len(ids), err)
		}
	}
}

// BenchmarkReplayGroups replays a journal holding one record (4 partitions) of each of N
// groups with no files yet, as a broker alone finds it after a graceful stop
// (LeaveToJournal), eagerly (every file written, one syncfs) and behind (the state left
// to the journal), of records in the compact format a broker alone writes and, behind, in
// the JSON of older versions. KAAS_BENCH_REPLAY_GROUPS sets N (default 20,000).
//
//	go test -run NONE -bench ReplayGroups -benchtime 1x ./actors/offsets/
func BenchmarkReplayGroups(b *testing.B) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("KAAS_BENCH_REPLAY_GROUPS")); err == nil && v > 0 {
		n = v
	}
	for _, c := range []struct {
		behind bool
		format string
	}{{false, "compact"}, {true, "compact"}, {true, "json"}} {
		behind := c.behind
		encode := encodeCompactRecord
		if c.format == "json" {
			encode = encodeRecord // as versions before the compact format wrote them
		}
		b.Run(fmt.Sprintf("behind=%v/format=%s", behind, c.format), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				root := benchDir(b)
				jdir := JournalDir(root, 1)
				if err := os.MkdirAll(jdir, 0o755); err != nil {
					b.Fatal(err)
				}
				var seg []byte
				for g := 0; g < n; g++ {
					o := op{Set: []fileOffset{}}
					for p := int32(0); p < 4; p++ {
						o.Set = append(o.Set, fileOffset{Topic: "bench", Partition: p, Offset: int64(g), LeaderEpoch: -1, CommitTime: 1})
					}
					rec, err := encode("live-"+strconv.Itoa(g), 0, []op{o})
					if err != nil {
						b.Fatal(err)
					}
					seg = append(seg, frame(rec)...)
				}
				if err := os.WriteFile(filepath.Join(jdir, journal.SegmentName(1)), seg, 0o644); err != nil {
					b.Fatal(err)
				}
				seg = nil
				heap := heapInUse()
				b.StartTimer()
				start, cpu := time.Now(), cpuTime()
				r, err := Replay(ReplayConfig{OffsetsDir: Dir(root), JournalDir: jdir, Log: zerolog.Nop(), Behind: behind})
				if err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				b.ReportMetric(took.Seconds(), "replay_s")
				b.ReportMetric((cpuTime() - cpu).Seconds(), "replay_cpu_s")
				b.ReportMetric(float64(len(r.Unsaved)), "unsaved")
				// What the replay leaves in memory (the unsaved states, the pins of the
				// kept segments), per group.
				b.ReportMetric(float64(heapInUse()-heap)/float64(n), "left_B/group")
				runtime.KeepAlive(r)
			}
		})
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

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
