package partition

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/storage"
)

// compressedKeyed is keyedBatch with its records compressed in codec.
func compressedKeyed(t *testing.T, codec int16, ts int64, recs ...kv) []byte {
	t.Helper()
	plain := keyedBatch(ts, recs...)
	h := parseHeader(plain)
	payload, err := compress(codec, plain[batchHeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	return encodeBatch(&h, codec, ts, int32(len(recs)), payload)
}

// TestCompactKeepsTheBatchCodec: a compressed batch the cleaner rewrites keeps its
// codec (Apache writes retained records with the batch's original compression), and
// its kept records read back.
func TestCompactKeepsTheBatchCodec(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 300)
	for _, codec := range []int16{codecZstd, codecGzip, codecLz4, codecSnappy} {
		b := compressedKeyed(t, codec, 1000, kv{k: "a", v: "old"}, kv{k: "x" + codecName(codec), v: "kept"})
		h, perr := validateProduced(b, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		if _, err := l.append(b, &h, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := l.roll(l.EndOffset()); err != nil {
			t.Fatal(err)
		}
	}
	appendKeyed(t, l, 1000, kv{k: "a", v: "newest"})
	if _, err := l.roll(l.EndOffset()); err != nil { // the newest value is cleanable too
		t.Fatal(err)
	}
	appendKeyed(t, l, 1000, kv{k: "z", v: "active"})
	cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5000)

	codecs := map[int16]bool{}
	for off := l.StartOffset(); off < l.EndOffset(); {
		b, err := l.read(off, l.EndOffset(), 1<<20, true)
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d: %v", off, err)
		}
		for len(b) > 0 {
			h := parseHeader(b)
			recs, err := batchRecords(&h, b[:h.Size()])
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if string(r.Key) == "a" && string(r.Value) == "old" {
					t.Fatalf("an overwritten value kept at %d", h.BaseOffset+int64(r.OffsetDelta))
				}
			}
			if h.RecordCount == 1 && h.Attributes&attrCompression != codecNone {
				codecs[h.Attributes&attrCompression] = true // a rewritten batch
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	for _, codec := range []int16{codecZstd, codecGzip, codecLz4, codecSnappy} {
		if !codecs[codec] {
			t.Errorf("no cleaned %s batch: rewritten batches lost their codec (%v)", codecName(codec), codecs)
		}
	}
	l.Close()
}

// TestCompactionOverdue: with a dirty ratio below min.cleanable.dirty.ratio, a pass is
// due once a dirty segment's first batch is older than max.compaction.lag.ms, and not
// before.
func TestCompactionOverdue(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 200)
	writeOverwrites(t, l) // every batch at timestamp 1000
	pol := cleanPolicy{minDirtyRatio: 1.01, deleteRetentionMS: 100, maxKeys: 1000}
	if l.planClean(pol, 0, 10_000, -1) != nil {
		t.Fatal("a pass planned below the dirty ratio without max.compaction.lag.ms")
	}
	pol.maxLagMS = 5000
	if l.planClean(pol, 0, 5500, -1) != nil {
		t.Fatal("a pass planned before max.compaction.lag.ms passed")
	}
	if l.planClean(pol, 0, 6001, -1) == nil {
		t.Fatal("no pass planned once the first dirty batch is older than max.compaction.lag.ms")
	}
	l.Close()
}

// TestMaxCompactionLagRollsTheActiveSegment: a compacted topic's active segment rolls by
// age at max.compaction.lag.ms when it is below segment.ms (Apache's maxSegmentMs).
func TestMaxCompactionLagRollsTheActiveSegment(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.Close()
	appendKeyed(t, l, 1000, kv{k: "a", v: "1"})
	p := &partitionActor{disk: l, cfg: PartitionConfig{Now: func() time.Time { return time.UnixMilli(1000) },
		Timing: Timing{SegmentMS: 7 * 24 * 3600 * 1000}}}
	next := &header{MaxTimestamp: 3000}
	if p.timeRollDue(next) {
		t.Fatal("rolled 2 s after the first batch with segment.ms of a week and no cleaner")
	}
	p.cfg.Cleaner = &CleanerConfig{MaxLagMS: 1000}
	if !p.timeRollDue(next) {
		t.Fatal("not rolled 2 s after the first batch with max.compaction.lag.ms=1000")
	}
	if p.timeRollDue(&header{MaxTimestamp: 1500}) {
		t.Fatal("rolled before max.compaction.lag.ms")
	}
}

// TestCleanerCheckpointSurvivesRestart: where a pass stopped is on disk, so a partition
// opened again with nothing written since is not dirty (its first pass would map the
// whole log again otherwise); a checkpoint past the log end is not used.
func TestCleanerCheckpointSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cleanedEv := &eventWriter{msg: "partition_log_cleaned", ch: make(chan struct{}, 4)}
	start := func(reg *prometheus.Registry) (*actor.System, *actor.PID) {
		sys := actor.NewSystem(zerolog.Nop())
		pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 200, FlushMessages: 1,
			RetentionMS: -1, RetentionBytes: -1, Now: func() time.Time { return time.UnixMilli(10_000) },
			Log: zerolog.New(cleanedEv), FS: storage.OSFS{}, Metrics: NewMetrics(reg),
			Cleaner: &CleanerConfig{MinDirtyRatio: 0.01, DeleteRetentionMS: 1000, MaxKeys: 1000}}))
		return sys, pid
	}
	reg := prometheus.NewRegistry()
	sys, pid := start(reg)
	for i := 0; i < 8; i++ {
		batch, perr := validateBatch(keyedBatch(1000, kv{k: "a", v: "value-of-a"}, kv{k: "b", v: "value-of-b"}), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		if r, ok := w.Wait(10 * time.Second); !ok || r.(*Produced).ErrorCode != 0 {
			t.Fatalf("produce: %+v", r)
		}
	}
	sys.Send(pid, &retentionTick{})
	wait(t, cleanedEv.ch, "partition_log_cleaned")
	if err := sys.Stop(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	sys.Shutdown()
	b, err := os.ReadFile(filepath.Join(dir, cleanerCkptName))
	if err != nil {
		t.Fatal(err)
	}
	upTo, ok := decodeCleanerCkpt(b)
	if !ok || upTo <= 0 {
		t.Fatalf("checkpoint %v (%v)", upTo, ok)
	}

	dirtyAfterOpen := func() float64 {
		t.Helper()
		reg := prometheus.NewRegistry()
		sys, pid := start(reg)
		defer sys.Shutdown()
		sys.Send(pid, &retentionTick{}) // publishes the ratio; no pass is due at 0
		w := sys.NewWaiter()
		sys.Send(pid, ProducersMessage(w.Promise)) // answered after the tick's turn
		if _, ok := w.Wait(10 * time.Second); !ok {
			t.Fatal("not answered")
		}
		r, ok := gauge(t, reg, "kaas_log_cleaner_dirty_ratio")
		if !ok {
			t.Fatal("no dirty ratio published")
		}
		if err := sys.Stop(pid, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := dirtyAfterOpen(); r != 0 {
		t.Fatalf("dirty ratio %v after a restart with nothing written: the checkpoint was not used", r)
	}
	// A checkpoint past the log end (the log lost its tail) is not used.
	if err := storage.WriteFileAtomic(storage.OSFS{}, dir, cleanerCkptName, encodeCleanerCkpt(1<<40)); err != nil {
		t.Fatal(err)
	}
	if r := dirtyAfterOpen(); r <= 0 {
		t.Fatalf("dirty ratio %v with a checkpoint past the log end", r)
	}
}
