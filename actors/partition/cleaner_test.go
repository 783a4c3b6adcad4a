package partition

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/internal/testwait"
	"kaas/storage"
)

// eventWriter signals each log line holding msg.
type eventWriter struct {
	msg string
	ch  chan struct{}
}

func (w *eventWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"`+w.msg+`"`)) {
		w.ch <- struct{}{}
	}
	return len(p), nil
}

// TestCompactionOffTheTurn: a partition of a compacted topic cleans its log on the
// retention tick off its turn. While the swap is held (a slow disk) the partition still
// answers fetches; a read planned before the swap reads the old segment's bytes after
// it; once the new segments are in, every key reads its newest value at increasing
// offsets, and the tombstone goes once delete.retention.ms has passed on the clock.
func TestCompactionOffTheTurn(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	held, release := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	hold.Store(true)
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpRename && strings.HasSuffix(path, swapSuffix) && hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	var mu sync.Mutex
	now := time.UnixMilli(10_000)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cleanedEv := &eventWriter{msg: "partition_log_cleaned", ch: make(chan struct{}, 4)}
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 200, FlushMessages: 1,
		RetentionMS: -1, RetentionBytes: -1, Now: clock, Log: zerolog.New(cleanedEv), FS: fsys,
		Cleaner: &CleanerConfig{MinDirtyRatio: 0.01, DeleteRetentionMS: 1000, MaxKeys: 1000}}))
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
	plan := func(off int64) any {
		t.Helper()
		w := sys.NewWaiter()
		sys.Send(pid, &readLog{offset: off, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: w.Promise})
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatal("fetch not answered")
		}
		return v
	}
	// records reads every record from offset 0 through plans, as fetches do.
	records := func() []logRecord {
		t.Helper()
		var out []logRecord
		for off := int64(0); ; {
			p, ok := plan(off).(*readPlan)
			if !ok {
				return out
			}
			b, err := p.read(func(corruptRange) {})
			p.hold.release()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 {
				return out
			}
			for len(b) > 0 {
				h := parseHeader(b)
				recs, err := batchRecords(&h, b[:h.Size()])
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					out = append(out, logRecord{off: h.BaseOffset + int64(r.OffsetDelta), k: string(r.Key), v: string(r.Value), tomb: r.Value == nil})
				}
				off = h.LastOffset() + 1
				b = b[h.Size():]
			}
		}
	}
	for round := 0; round < 4; round++ {
		produce(kv{k: "a", v: "a" + string(rune('0'+round))}, kv{k: "b", v: "b" + string(rune('0'+round))})
		produce(kv{k: "c", v: "c" + string(rune('0'+round))})
	}
	produce(kv{k: "b", tomb: true})
	produce(kv{k: "a", v: "a-last"})
	produce(kv{k: "d", v: "active"})
	before := records()
	early, ok := plan(0).(*readPlan) // pinned before the swap
	if !ok {
		t.Fatal("no plan at 0")
	}

	sys.Send(pid, &retentionTick{})
	wait(t, held, "the swap")
	if _, ok := plan(0).(*readPlan); !ok {
		t.Fatal("fetch while the swap is held not planned")
	}
	close(release)
	wait(t, cleanedEv.ch, "partition_log_cleaned")

	var have []string
	got := records()
	for i, r := range got {
		if i > 0 && r.off <= got[i-1].off {
			t.Fatalf("offsets do not increase: %v", got)
		}
		if r.tomb {
			have = append(have, r.k+"=<tombstone>")
		} else {
			have = append(have, r.k+"="+r.v)
		}
	}
	if want := []string{"c=c3", "b=<tombstone>", "a=a-last", "d=active"}; !slices.Equal(have, want) {
		t.Fatalf("after cleaning: %v, want %v", have, want)
	}
	b, err := early.read(func(corruptRange) {})
	early.hold.release()
	if err != nil || len(b) == 0 {
		t.Fatalf("read planned before the swap: %v", err)
	}
	if h := parseHeader(b); h.BaseOffset != before[0].off {
		t.Fatalf("read planned before the swap starts at %d, want %d", h.BaseOffset, before[0].off)
	}

	// The tombstone stays until delete.retention.ms after the pass that kept it. The
	// next passes are due once more is written past the cleaned range.
	for _, step := range []struct {
		advance time.Duration
		tomb    bool
	}{{500 * time.Millisecond, true}, {600 * time.Millisecond, false}} {
		mu.Lock()
		now = now.Add(step.advance)
		mu.Unlock()
		for i := 0; i < 4; i++ {
			produce(kv{k: "e", v: "more"})
		}
		sys.Send(pid, &retentionTick{})
		wait(t, cleanedEv.ch, "partition_log_cleaned")
		has := slices.ContainsFunc(records(), func(r logRecord) bool { return r.k == "b" })
		if has != step.tomb {
			t.Fatalf("%v after the first pass: tombstone there %v, want %v", step.advance, has, step.tomb)
		}
	}
}

func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// TestFencedPartitionSwapsNothingIn: a partition fenced while its pass writes the
// cleaned file does not swap it in: the file is deleted and the old segments stay.
func TestFencedPartitionSwapsNothingIn(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	held, release := make(chan struct{}), make(chan struct{})
	var hold, swapped atomic.Bool
	hold.Store(true)
	fsys.SetBefore(func(op storage.Op, path string) error {
		switch {
		case op == storage.OpSync && strings.HasSuffix(path, cleanedSuffix) && hold.CompareAndSwap(true, false):
			held <- struct{}{}
			<-release
		case op == storage.OpRename && strings.HasSuffix(path, swapSuffix):
			swapped.Store(true)
		}
		return nil
	})
	var open atomic.Bool
	open.Store(true)
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 200, FlushMessages: 1,
		RetentionMS: -1, RetentionBytes: -1, Log: zerolog.Nop(), FS: fsys, Gate: open.Load,
		Cleaner: &CleanerConfig{MinDirtyRatio: 0.01, DeleteRetentionMS: 1000, MaxKeys: 1000}}))
	for i := 0; i < 8; i++ {
		batch, perr := validateBatch(keyedBatch(1000, kv{k: "a", v: "value"}), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		if r, ok := w.Wait(10 * time.Second); !ok || r.(*Produced).ErrorCode != 0 {
			t.Fatalf("produce: %+v", r)
		}
	}
	before := segmentFiles(t, dir)
	sys.Send(pid, &retentionTick{})
	wait(t, held, "the cleaned file's fsync")
	open.Store(false) // the lease is lost while the pass runs
	close(release)
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if after := segmentFiles(t, dir); !slices.Equal(after, before) {
			return fmt.Errorf("files %v after a fenced pass, want the old segments %v", after, before)
		}
		return nil
	})
	if swapped.Load() {
		t.Fatal("a fenced partition swapped a cleaned file in")
	}
}

// segmentFiles lists dir's files.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".log") {
			out = append(out, e.Name())
		}
	}
	return out
}
