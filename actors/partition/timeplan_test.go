package partition

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/storage"
)

// TestListOffsetsByTimeOffTheTurn: a ListOffsets by timestamp reads the log off the
// partition's turn. While its read is held (a slow disk), the partition appends and
// acknowledges a produce; once the read goes on, the lookup answers the first offset at
// or after the timestamp.
func TestListOffsetsByTimeOffTheTurn(t *testing.T) {
	fsys := storage.NewFaultFS(nil)
	hold := newFirstHold()
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpRead && strings.HasSuffix(path, ".log") {
			hold.at()
		}
		return nil
	})
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: t.TempDir(), Topic: "t",
		SegmentBytes: 1 << 30, FlushMessages: 1, Log: zerolog.Nop(), FS: fsys}))
	ask := func(msg func(actor.Promise) any) any {
		t.Helper()
		w := sys.NewWaiter()
		sys.Send(pid, msg(w.Promise))
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatal("not answered")
		}
		return v
	}
	produce := func(ts int64, v string) *Produced {
		t.Helper()
		batch, perr := validateBatch(testBatch(-1, -1, -1, 1, ts, []byte(v)), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		return ask(func(p actor.Promise) any { return AppendMessage(batch, p) }).(*Produced)
	}
	for i, ts := range []int64{1000, 2000} {
		if r := produce(ts, "x"); r.ErrorCode != 0 || r.BaseOffset != int64(i) {
			t.Fatalf("produce: %+v", r)
		}
	}
	hold.arm()
	w := sys.NewWaiter()
	sys.Send(pid, &listOffset{timestamp: 1500, currentEpoch: -1, reply: w.Promise})
	<-hold.held
	if r := produce(3000, "y"); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("produce while a time lookup reads: %+v", r)
	}
	close(hold.release)
	v, ok := w.Wait(10 * time.Second)
	if !ok {
		t.Fatal("ListOffsets by time not answered")
	}
	if l := v.(*Listed); l.ErrorCode != 0 || l.Offset != 1 || l.Timestamp != 2000 {
		t.Fatalf("ListOffsets at 1500: %+v, want offset 1 at 2000", l)
	}
}
