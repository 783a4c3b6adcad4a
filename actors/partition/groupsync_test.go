package partition

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// TestWritesArrivingTogetherShareOneFsync: a produce, a transaction marker and another
// produce that reach the partition's mailbox together are appended first and then made
// durable by one fsync (group commit across producers), not the first alone and the
// others by the next. That fsync failing fails every one of them: none is acknowledged,
// the marker included, and the high watermark and LSO stay where they were.
func TestWritesArrivingTogetherShareOneFsync(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	hold := newFirstHold()
	var syncs atomic.Int64
	var failSync atomic.Bool
	fsys.SetBefore(func(op storage.Op, path string) error {
		if !strings.HasSuffix(path, ".log") {
			return nil
		}
		switch op {
		case storage.OpWrite:
			hold.at() // the first append after arm holds the actor in its turn
		case storage.OpSync:
			syncs.Add(1)
			if failSync.CompareAndSwap(true, false) {
				return errors.New("injected fsync failure")
			}
		}
		return nil
	})
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 1 << 20, FlushMessages: 1,
		Log: zerolog.Nop(), FS: fsys}))
	wait := func(w *actor.Waiter) any {
		t.Helper()
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatal("not answered")
		}
		return v
	}
	appendBatch := func(raw []byte, verified bool) *actor.Waiter {
		t.Helper()
		b, perr := validateBatch(raw, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		if verified {
			sys.Send(pid, VerifiedAppendMessage(b, 0, false, w.Promise))
		} else {
			sys.Send(pid, AppendMessage(b, w.Promise))
		}
		return w
	}
	// Producer 5's transaction is open and durable.
	if r := wait(appendBatch(transactional(testBatch(5, 0, 0, 1, 0, []byte("t"))), true)).(*Produced); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	before := syncs.Load()

	hold.arm()
	failSync.Store(true)
	first := appendBatch(testBatch(-1, -1, -1, 1, 0, []byte("a")), false)
	<-hold.held // the actor is in the first produce's turn: the next two queue behind it
	mw := sys.NewWaiter()
	sys.Send(pid, markerMessage(&WriteTxnMarker{Topic: "t", ProducerID: 5, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 1, Reply: mw.Promise}, 0))
	second := appendBatch(testBatch(-1, -1, -1, 1, 0, []byte("b")), false)
	close(hold.release)

	for i, w := range []*actor.Waiter{first, second} {
		if r := wait(w).(*Produced); r.ErrorCode != kerr.KafkaStorageError.Code {
			t.Errorf("produce %d under the failed fsync: %+v, want KAFKA_STORAGE_ERROR", i, r)
		}
	}
	if r := wait(mw).(*TxnMarkerWritten); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Errorf("marker under the failed fsync: %+v, want KAFKA_STORAGE_ERROR", r)
	}
	if n := syncs.Load() - before; n != 1 {
		t.Errorf("%d fsyncs for three writes that arrived together, want 1", n)
	}
	rw := sys.NewWaiter()
	sys.Send(pid, &readLog{committed: true, offset: 0, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: rw.Promise})
	out := Fetched{}
	switch v := wait(rw).(type) {
	case *Fetched:
		out = *v
	case *readPlan:
		out = v.out
		dropRead(v)
	}
	if out.HighWatermark != 1 || out.LastStableOffset != 0 {
		t.Fatalf("after the failed fsync: high watermark %d, LSO %d; want 1 and 0", out.HighWatermark, out.LastStableOffset)
	}
}
