package partition

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/internal/testwait"
	"kaas/storage"
)

// repairRig is one partition actor on a FaultFS that counts segment writes.
type repairRig struct {
	t      *testing.T
	dir    string
	fsys   *storage.FaultFS
	writes atomic.Int64
	sys    *actor.System
	pid    *actor.PID
}

func newRepairRig(t *testing.T) *repairRig {
	r := &repairRig{t: t, dir: t.TempDir(), fsys: storage.NewFaultFS(nil)}
	r.fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpWrite && strings.HasSuffix(path, ".log") {
			r.writes.Add(1)
		}
		return nil
	})
	r.sys = actor.NewSystem(zerolog.Nop())
	t.Cleanup(func() { r.sys.Shutdown() })
	r.pid = r.sys.Spawn(PartitionProps(PartitionConfig{Dir: r.dir, Topic: "t",
		SegmentBytes: 1 << 30, FlushMessages: 1, Log: zerolog.Nop(), FS: r.fsys}))
	return r
}

// produce sends producer 7's batch of sequence seq and waits for its answer.
func (r *repairRig) produce(seq int32, v string) *Produced {
	r.t.Helper()
	batch, perr := validateBatch(testBatch(7, 0, seq, 1, 0, []byte(v)), 1<<20)
	if perr != nil {
		r.t.Fatal(perr.msg)
	}
	w := r.sys.NewWaiter()
	r.sys.Send(r.pid, AppendMessage(batch, w.Promise))
	a, ok := w.Wait(10 * time.Second)
	if !ok {
		r.t.Fatal("produce not answered")
	}
	return a.(*Produced)
}

// values reads the whole log back.
func (r *repairRig) values() []string {
	r.t.Helper()
	var out []string
	for off := int64(0); ; {
		w := r.sys.NewWaiter()
		r.sys.Send(r.pid, &readLog{offset: off, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: w.Promise})
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			r.t.Fatal("fetch not answered")
		}
		plan, ok := v.(*readPlan)
		if !ok {
			return out
		}
		recs, err := plan.read(func(corruptRange) { r.t.Error("reported corrupt") })
		plan.hold.release()
		if err != nil {
			r.t.Fatal(err)
		}
		for len(recs) > 0 {
			h := parseHeader(recs)
			out = append(out, string(firstValue(r.t, recs[:h.Size()])))
			off = h.LastOffset() + 1
			recs = recs[h.Size():]
		}
	}
}

// After a failed fsync, the produce's retry (a duplicate of a batch in the log) is
// acknowledged only once the bytes written since the last good fsync have been written
// again and fsynced: an fsync alone could find them marked clean in the page cache.
func TestFailedFsyncTailWrittenAgain(t *testing.T) {
	r := newRepairRig(t)
	if p := r.produce(0, "a"); p.ErrorCode != 0 {
		t.Fatalf("produce a: %+v", p)
	}
	r.fsys.FailNext(storage.OpSync, nil)
	if p := r.produce(1, "b"); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce b with its fsync failing: %+v, want KAFKA_STORAGE_ERROR", p)
	}
	before := r.writes.Load()
	if p := r.produce(1, "b"); p.ErrorCode != 0 || p.BaseOffset != 1 {
		t.Fatalf("b retried: %+v, want offset 1", p)
	}
	if r.writes.Load() == before {
		t.Fatal("the retry was acknowledged without the unsynced tail written again")
	}
	if got := r.values(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("log %v, want [a b]", got)
	}
}

// After a failed fsync, bytes that no longer read back as written (the page cache
// dropped them and the disk has something else) are never acknowledged: the partition
// opens its log again, recovery cuts the torn tail, and the retried batch is written
// anew, once.
func TestFailedFsyncLostTailReopens(t *testing.T) {
	r := newRepairRig(t)
	if p := r.produce(0, "a"); p.ErrorCode != 0 {
		t.Fatalf("produce a: %+v", p)
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(r.dir, segmentName(0)))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	aEnd := size()
	r.fsys.FailNext(storage.OpSync, nil)
	if p := r.produce(1, "b"); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce b with its fsync failing: %+v, want KAFKA_STORAGE_ERROR", p)
	}
	// What the disk would hand back for b's bytes once the cache let them go.
	f, err := os.OpenFile(filepath.Join(r.dir, segmentName(0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, size()-aEnd), aEnd); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := r.produce(1, "b")
	if p.ErrorCode == 0 {
		t.Fatalf("b acknowledged at 1 though its bytes are gone: %+v", p)
	}
	// Retried as a producer would while the log opens again.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if p.ErrorCode != 0 {
			if p.ErrorCode != kerr.KafkaStorageError.Code {
				t.Fatalf("b retried while the log reopens: %+v", p)
			}
			p = r.produce(1, "b")
		}
		if p.ErrorCode != 0 {
			return kerr.ErrorForCode(p.ErrorCode)
		}
		return nil
	})
	if p.BaseOffset != 1 {
		t.Fatalf("b written anew at %d, want 1", p.BaseOffset)
	}
	if got := r.values(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("log %v, want [a b]", got)
	}
}
