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
	"kaas/storage"
)

// TestRollOffTheTurn: a segment roll's fsyncs run off the partition's turn. While the
// roll's directory fsync is held (a slow disk), the partition still answers a fetch;
// the produce that filled the segment and the one sent after it wait for the roll, and
// are then appended in the order they came, in the new segment, and acknowledged.
func TestRollOffTheTurn(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	hold := newFirstHold()
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpSyncDir {
			hold.at()
		}
		return nil
	})
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	one := testBatch(-1, -1, -1, 1, 0, []byte("a"))
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t",
		SegmentBytes: int64(2*len(one) + 1), FlushMessages: 1, Log: zerolog.Nop(), FS: fsys}))
	send := func(v string) *actor.Waiter {
		t.Helper()
		batch, perr := validateBatch(testBatch(-1, -1, -1, 1, 0, []byte(v)), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		return w
	}
	answer := func(w *actor.Waiter) *Produced {
		t.Helper()
		r, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatal("produce not answered")
		}
		return r.(*Produced)
	}
	for i, v := range []string{"a", "b"} {
		if r := answer(send(v)); r.ErrorCode != 0 || r.BaseOffset != int64(i) {
			t.Fatalf("produce %s: %+v", v, r)
		}
	}
	hold.arm()
	c := send("c") // fills the segment: the roll starts
	<-hold.held
	d := send("d")
	w := sys.NewWaiter()
	sys.Send(pid, &readLog{offset: 0, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: w.Promise})
	v, ok := w.Wait(10 * time.Second)
	if !ok {
		t.Fatal("fetch not answered while the roll's fsync is held")
	}
	if plan, ok := v.(*readPlan); ok {
		plan.hold.release()
	} else if f, ok := v.(*Fetched); !ok || f.ErrorCode != 0 {
		t.Fatalf("fetch while rolling: %+v", v)
	}
	close(hold.release)
	if r := answer(c); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("the produce that rolled: %+v (%s), want offset 2", r, kerr.ErrorForCode(r.ErrorCode))
	}
	if r := answer(d); r.ErrorCode != 0 || r.BaseOffset != 3 {
		t.Fatalf("the produce that waited for the roll: %+v, want offset 3", r)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	if want := []string{segmentName(0), segmentName(2)}; !slices.Equal(logs, want) {
		t.Fatalf("segments %v, want %v", logs, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, segmentName(2))); err != nil || fi.Size() != int64(2*len(one)) {
		t.Fatalf("new segment: %v %v, want two batches", fi, err)
	}
}

// TestStopDuringRoll: a partition that stops while its roll's fsync is held answers the
// produce waiting for it NOT_LEADER_OR_FOLLOWER (never appended, so its producer
// retries), and the roll's new file, made after the stop, is closed rather than left open.
func TestStopDuringRoll(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	hold := newFirstHold()
	closed := make(chan string, 64)
	fsys.SetBefore(func(op storage.Op, path string) error {
		switch op {
		case storage.OpSyncDir:
			hold.at()
		case storage.OpClose:
			if hold.isArmed() {
				closed <- filepath.Base(path)
			}
		}
		return nil
	})
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	one := testBatch(-1, -1, -1, 1, 0, []byte("a"))
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t",
		SegmentBytes: int64(len(one) + 1), FlushMessages: 1, Log: zerolog.Nop(), FS: fsys}))
	send := func(v string) *actor.Waiter {
		batch, perr := validateBatch(testBatch(-1, -1, -1, 1, 0, []byte(v)), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		return w
	}
	if r, ok := send("a").Wait(10 * time.Second); !ok || r.(*Produced).ErrorCode != 0 {
		t.Fatalf("first produce: %v %v", r, ok)
	}
	hold.arm()
	b := send("b")
	<-hold.held
	stopped := make(chan error, 1)
	go func() { stopped <- sys.Poison(pid, 10*time.Second) }()
	r, ok := b.Wait(10 * time.Second)
	if !ok || r.(*Produced).ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("the produce waiting for the roll, as the partition stops: %+v %v, want NOT_LEADER_OR_FOLLOWER", r, ok)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	for name := range closed {
		if name == segmentName(1) {
			break // the file made after the stop is closed by the roll itself
		}
	}
}

// firstHold holds the first storage call it is told of once armed (a FaultFS Before
// hook calls at), until the test releases it; later calls go through.
type firstHold struct {
	armed, held, release chan struct{}
	first                atomic.Bool
}

func newFirstHold() *firstHold {
	return &firstHold{armed: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{})}
}

func (h *firstHold) arm() { close(h.armed) }

func (h *firstHold) isArmed() bool {
	select {
	case <-h.armed:
		return true
	default:
		return false
	}
}

// at blocks the first call after arm until the test has taken it (held) and let it go
// (release).
func (h *firstHold) at() {
	if h.isArmed() && h.first.CompareAndSwap(false, true) {
		h.held <- struct{}{}
		<-h.release
	}
}
