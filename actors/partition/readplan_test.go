package partition

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// TestReadPlanOutlivesRetentionAndIdleClose: a segment whose file a fetch is reading
// is deleted by retention and its files closed as idle; the plan still reads every
// batch it was planned for, and the file is closed once it is done.
func TestReadPlanOutlivesRetentionAndIdleClose(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 200)
	defer l.closeFiles()
	appendN(t, l, 6, 1, 0)
	if len(l.segs) < 3 {
		t.Fatalf("want several segments, have %d", len(l.segs))
	}
	first := l.segs[0]
	plan, err := l.planRead(0, l.EndOffset(), 1<<20, true)
	if err != nil || plan == nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	if n, err := l.retain(time.Now().UnixMilli(), -1, 0); err != nil || n == 0 {
		t.Fatalf("retention deleted %d segments: %v", n, err)
	}
	if _, err := os.Stat(first.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment %s still on disk: %v", first.path, err)
	}
	l.closeIdle(true)
	recs, err := plan.read(func(corruptRange) { t.Error("reported corrupt") })
	if err != nil {
		t.Fatal(err)
	}
	if h := parseHeader(recs); h.BaseOffset != 0 || !checkStored(recs[:h.Size()]) {
		t.Fatalf("read batch at %d", h.BaseOffset)
	}
	f := plan.hold.file.f
	plan.hold.release()
	plan.hold.release() // once only
	if _, err := f.Size(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("file of a deleted segment left open after its last reader: %v", err)
	}
}

// TestSegmentClosedWithoutReaders: with no fetch reading it, a segment closes its file
// itself.
func TestSegmentClosedWithoutReaders(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.closeFiles()
	appendN(t, l, 2, 1, 0)
	b, err := l.read(0, l.EndOffset(), 1<<20, true)
	if err != nil || len(b) == 0 {
		t.Fatalf("read: %d bytes, %v", len(b), err)
	}
	f := l.active().f
	l.closeIdle(true)
	if _, err := f.Size(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("idle segment file left open: %v", err)
	}
}

// TestReadPlanReportsCorruption: a batch whose bytes rot after the plan was made is
// never served; the actor quarantines it when told, and later reads answer
// errCorruptRange without reading.
func TestReadPlanReportsCorruption(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.closeFiles()
	appendN(t, l, 3, 1, 0)
	plan, err := l.planRead(1, l.EndOffset(), 1<<20, true)
	if err != nil || plan == nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	// Flip a byte of the second batch's records.
	pos := l.active().index[0].pos
	first := l.readBatchSize(t, pos)
	if _, err := l.active().f.WriteAt([]byte{0xff}, pos+first+batchHeaderSize+2); err != nil {
		t.Fatal(err)
	}
	var got []corruptRange
	_, err = plan.read(func(c corruptRange) { got = append(got, c) })
	plan.hold.release()
	if !errors.Is(err, errCorruptRange) || len(got) != 1 || got[0].from != 1 {
		t.Fatalf("read: %v, reported %+v", err, got)
	}
	l.onCorruptRead(&corruptRead{seg: plan.seg, c: got[0]})
	l.onCorruptRead(&corruptRead{seg: plan.seg, c: got[0]}) // once only
	if len(l.corrupt) != 1 {
		t.Fatalf("quarantined %d ranges", len(l.corrupt))
	}
	if p, err := l.planRead(1, l.EndOffset(), 1<<20, true); p != nil || !errors.Is(err, errCorruptRange) {
		t.Fatalf("read at the quarantined batch: plan %v, %v", p, err)
	}
}

func (l *segmentLog) readBatchSize(t *testing.T, pos int64) int64 {
	t.Helper()
	hb := make([]byte, batchHeaderSize)
	if _, err := l.active().f.ReadAt(hb, pos); err != nil {
		t.Fatal(err)
	}
	h := parseHeader(hb)
	return h.Size()
}

// TestPartitionAnswersWhileAReadIsOutstanding: the partition actor answers a fetch's
// read with a plan and does not read itself; while the plan is not yet read (a slow
// disk under a cold consumer), the partition appends and acknowledges a produce, and
// the plan then serves exactly what lay below the high watermark when it was made.
func TestPartitionAnswersWhileAReadIsOutstanding(t *testing.T) {
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: t.TempDir(), Topic: "t",
		SegmentBytes: 1 << 30, FlushMessages: 1, Log: zerolog.Nop()}))
	produce := func(v string) *Produced {
		t.Helper()
		batch, perr := validateBatch(testBatch(-1, -1, -1, 1, 0, []byte(v)), 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		w := sys.NewWaiter()
		sys.Send(pid, AppendMessage(batch, w.Promise))
		r, ok := w.Wait(5 * time.Second)
		if !ok {
			t.Fatal("produce not answered")
		}
		return r.(*Produced)
	}
	if r := produce("a"); r.ErrorCode != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	w := sys.NewWaiter()
	sys.Send(pid, &readLog{offset: 0, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: w.Promise})
	v, ok := w.Wait(5 * time.Second)
	if !ok {
		t.Fatal("read not answered")
	}
	plan, ok := v.(*readPlan)
	if !ok {
		t.Fatalf("the partition answered a read with %T, not a plan for the fetch to read", v)
	}
	if r := produce("b"); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("produce while a read is outstanding: %+v", r)
	}
	recs, err := plan.read(func(corruptRange) { t.Error("reported corrupt") })
	plan.hold.release()
	if err != nil {
		t.Fatal(err)
	}
	if h := parseHeader(recs); h.BaseOffset != 0 || h.Size() != int64(len(recs)) || plan.out.HighWatermark != 1 {
		t.Fatalf("plan served from %d, %d bytes of %d, high watermark %d", h.BaseOffset, len(recs), h.Size(), plan.out.HighWatermark)
	}
}

// TestUnclaimedPlanLetsTheFileGo: a plan whose fetch ended before it came (the
// connection finds no fetch for it) lets its pin go, so a segment that let its file go
// meanwhile has it closed.
func TestUnclaimedPlanLetsTheFileGo(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.closeFiles()
	appendN(t, l, 2, 1, 0)
	plan, err := l.planRead(0, l.EndOffset(), 1<<20, true)
	if err != nil || plan == nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	f := plan.hold.file.f
	l.closeIdle(true)
	if _, err := f.Size(); err != nil {
		t.Fatalf("file closed under an outstanding plan: %v", err)
	}
	Unclaimed(&actor.Settled{Value: plan})
	if _, err := f.Size(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("file left open after its plan was dropped: %v", err)
	}
}
