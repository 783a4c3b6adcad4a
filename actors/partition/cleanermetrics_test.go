package partition

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/storage"
)

// gauge is the value of the first series of name in reg, a gauge or a counter, whose
// labels include step (when given); ok: such a series is exported.
func gauge(t *testing.T, reg *prometheus.Registry, name string, step ...string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if len(step) > 0 && l.GetName() == "step" && l.GetValue() != step[0] {
					continue series
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue(), true
			}
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func counter(t *testing.T, reg *prometheus.Registry, name string, step ...string) float64 {
	t.Helper()
	v, _ := gauge(t, reg, name, step...)
	return v
}

// TestCleanerMetrics: a pass counts its bytes and the partition publishes the time of
// its last pass and its dirty ratio (high while dirty, 0 once cleaned); a failed pass
// counts an error of its step; the series go with the actor.
func TestCleanerMetrics(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	held, release := make(chan struct{}), make(chan struct{})
	var hold, fail atomic.Bool
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpRename && strings.HasSuffix(path, swapSuffix) && hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		if op == storage.OpCreate && strings.HasSuffix(path, cleanedSuffix) && fail.CompareAndSwap(true, false) {
			return errors.New("disk full")
		}
		return nil
	})
	var mu sync.Mutex
	now := time.UnixMilli(10_000)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cleanedEv := &eventWriter{msg: "partition_log_cleaned", ch: make(chan struct{}, 4)}
	failedEv := &eventWriter{msg: "partition_clean_failed", ch: make(chan struct{}, 4)}
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 200, FlushMessages: 1,
		RetentionMS: -1, RetentionBytes: -1, Now: clock, Log: zerolog.New(zerolog.MultiLevelWriter(cleanedEv, failedEv)),
		FS: fsys, Metrics: met, Cleaner: &CleanerConfig{MinDirtyRatio: 0.01, DeleteRetentionMS: 1000, MaxKeys: 1000}}))
	produce := func(recs ...kv) {
		t.Helper()
		batch, perr := validateBatch(keyedBatch(1000, recs...), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		if r, ok := w.Wait(10 * time.Second); !ok || r.(*Produced).ErrorCode != 0 {
			t.Fatalf("produce: %+v", r)
		}
	}
	overwrite := func() {
		for i := 0; i < 6; i++ {
			produce(kv{k: "a", v: "value-of-a"}, kv{k: "b", v: "value-of-b"})
		}
	}

	if _, ok := gauge(t, reg, "kaas_log_cleaner_last_clean_timestamp_seconds"); ok {
		t.Fatal("a last clean time before any pass")
	}
	overwrite()
	sys.Send(pid, &retentionTick{})
	wait(t, cleanedEv.ch, "partition_log_cleaned")
	if n := counter(t, reg, "kaas_log_cleaner_passes_total"); n != 1 {
		t.Fatalf("passes %v, want 1", n)
	}
	if c, r := counter(t, reg, "kaas_log_cleaner_cleaned_bytes_total"), counter(t, reg, "kaas_log_cleaner_reclaimed_bytes_total"); c <= 0 || r <= 0 || r > c {
		t.Fatalf("cleaned %v bytes, reclaimed %v", c, r)
	}
	if ts, ok := gauge(t, reg, "kaas_log_cleaner_last_clean_timestamp_seconds"); !ok || ts != 10 {
		t.Fatalf("last clean time %v (%v), want 10", ts, ok)
	}
	if r, ok := gauge(t, reg, "kaas_log_cleaner_dirty_ratio"); !ok || r != 0 {
		t.Fatalf("dirty ratio after the pass %v (%v), want 0", r, ok)
	}

	// While the next pass is held, the ratio it started from is published.
	overwrite()
	hold.Store(true)
	sys.Send(pid, &retentionTick{})
	wait(t, held, "the swap")
	if r, ok := gauge(t, reg, "kaas_log_cleaner_dirty_ratio"); !ok || r <= 0.01 || r > 1 {
		t.Fatalf("dirty ratio before the second pass %v (%v)", r, ok)
	}
	close(release)
	wait(t, cleanedEv.ch, "partition_log_cleaned")

	overwrite()
	fail.Store(true)
	sys.Send(pid, &retentionTick{})
	wait(t, failedEv.ch, "partition_clean_failed")
	if n := counter(t, reg, "kaas_log_cleaner_errors_total", "clean"); n != 1 {
		t.Fatalf("clean errors %v, want 1", n)
	}

	if err := sys.Stop(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := gauge(t, reg, "kaas_log_cleaner_dirty_ratio"); ok {
		t.Fatal("a stopped partition's dirty ratio still exported")
	}
}
