package partition

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"
)

// appendAt appends n one-record batches stamped with epoch.
func appendAt(t *testing.T, l *segmentLog, n int, epoch int32) {
	t.Helper()
	for i := 0; i < n; i++ {
		b := testBatch(-1, -1, -1, 1, int64(i), []byte("v"))
		h, perr := validateProduced(b, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		if _, err := l.append(b, &h, epoch); err != nil {
			t.Fatal(err)
		}
	}
}

// lateWrite runs write on the log as a former leader that opened it before its successor
// began would: its recovery point is not written again.
func lateWrite(t *testing.T, dir string, write func(*segmentLog)) {
	t.Helper()
	l := openEpochLog(t, dir, nil, false)
	write(l)
	l.closeFiles()
}

func openEpochLog(t *testing.T, dir string, entries []epochEntry, rollOnOpen bool) *segmentLog {
	t.Helper()
	l, err := openLog(dir, logConfig{segmentBytes: 1 << 20, log: zerolog.Nop(), epochs: entries, epochsFound: entries != nil, rollOnOpen: rollOnOpen}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A batch written at or past an epoch's start with an older epoch is a replaced leader's
// late write: recovery serves nothing from it on, and new batches go to a segment of
// their own (not after the stale bytes, where a later recovery would drop them too).
func TestRecoveryIgnoresStaleEpochBatch(t *testing.T) {
	dir := t.TempDir()
	l := openEpochLog(t, dir, nil, false)
	appendAt(t, l, 2, 1) // offsets 0-1 by the leader of epoch 1
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Epoch 2 began at offset 2; the former leader's late write at 2, stamped 1, came
	// after (its recovery point never reaches the file its successor replaced).
	lateWrite(t, dir, func(l *segmentLog) { appendAt(t, l, 1, 1) })
	entries := []epochEntry{{Epoch: 1, StartOffset: 0, Broker: 0}, {Epoch: 2, StartOffset: 2, Broker: 1}}
	l = openEpochLog(t, dir, entries, false)
	if got := l.EndOffset(); got != 2 {
		t.Fatalf("log end after recovery = %d, want 2 (the stale batch at 2 ignored)", got)
	}
	if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("served %v, want [0 1]", got)
	}
	appendAt(t, l, 1, 2)
	if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("served after an append %v, want [0 1 2]", got)
	}
	if len(l.segs) != 2 || l.active().base != 2 {
		t.Fatalf("segments %d, active base %d: the append after a stale tail must start a segment", len(l.segs), l.active().base)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, the new leader's batch at 2 stays and the stale one never comes back.
	l = openEpochLog(t, dir, entries, false)
	defer l.Close()
	b, err := l.read(2, l.EndOffset(), 1<<20, true)
	if err != nil || len(b) == 0 {
		t.Fatalf("read at 2: %v (%d bytes)", err, len(b))
	}
	if h := parseHeader(b); h.LeaderEpoch != 2 {
		t.Fatalf("batch at 2 has epoch %d, want 2 (the new leader's)", h.LeaderEpoch)
	}
}

// A segment a replaced leader rolled after its successor began holds nothing of the log:
// it is moved aside, and the successor's own segment is served.
func TestRecoveryMovesStaleSegmentAside(t *testing.T) {
	dir := t.TempDir()
	l := openEpochLog(t, dir, nil, false)
	appendAt(t, l, 2, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The former leader (epoch 1) rolled and wrote at 2 after epoch 2 began at 2, and
	// the new leader wrote nothing yet: the newest segment starts with a stale batch.
	lateWrite(t, dir, func(l *segmentLog) {
		if _, err := l.roll(2); err != nil {
			t.Fatal(err)
		}
		appendAt(t, l, 1, 1)
	})
	entries := []epochEntry{{Epoch: 1, StartOffset: 0, Broker: 0}, {Epoch: 2, StartOffset: 2, Broker: 1}}
	l = openEpochLog(t, dir, entries, true)
	defer l.Close()
	if got := l.EndOffset(); got != 2 {
		t.Fatalf("log end = %d, want 2", got)
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(2)+".stale")); err != nil {
		t.Fatalf("stale segment not moved aside: %v", err)
	}
	appendAt(t, l, 1, 3)
	if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("served %v, want [0 1 2]", got)
	}
}

// A cluster leader never appends into an empty newest segment a former leader made (and
// may still write into): it unlinks it and makes its own, so the former leader's write
// lands in a file nobody reads.
func TestRollOwnReplacesEmptySegment(t *testing.T) {
	dir := t.TempDir()
	former := openEpochLog(t, dir, nil, true)
	appendAt(t, former, 1, 1)
	if _, err := former.roll(1); err != nil { // rolled, then paused before writing
		t.Fatal(err)
	}
	next := openEpochLog(t, dir, []epochEntry{{Epoch: 1, StartOffset: 0}}, true)
	defer next.Close()
	appendAt(t, next, 1, 2)
	appendAt(t, former, 1, 1) // the former leader resumes: its write goes to the unlinked file
	former.closeFiles()
	next.closeFiles()
	l := openEpochLog(t, dir, []epochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 1, Broker: 1}}, true)
	defer l.Close()
	b, err := l.read(1, l.EndOffset(), 1<<20, true)
	if err != nil || len(b) == 0 {
		t.Fatalf("read at 1: %v", err)
	}
	if h := parseHeader(b); h.LeaderEpoch != 2 || h.BaseOffset != 1 {
		t.Fatalf("batch at 1: epoch %d base %d, want the new leader's (epoch 2)", h.LeaderEpoch, h.BaseOffset)
	}
}

// A segment is never served past its own end: bytes a former leader appended after its
// successor began are skipped even when a read would reach them in one go.
func TestReadStopsAtSegmentEnd(t *testing.T) {
	dir := t.TempDir()
	l := openEpochLog(t, dir, nil, false)
	appendAt(t, l, 2, 1)
	l.Close()
	lateWrite(t, dir, func(l *segmentLog) { appendAt(t, l, 1, 1) })
	// The successor found offsets 0-1 only (epoch 2 began at 2) and rolled at 2.
	entries := []epochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 2, Broker: 1}}
	l = openEpochLog(t, dir, entries, true)
	defer l.Close()
	appendAt(t, l, 2, 2)
	var epochs []int32
	b, err := l.read(0, l.EndOffset(), 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 {
		h := parseHeader(b)
		epochs = append(epochs, h.LeaderEpoch)
		b = b[h.Size():]
	}
	if !slices.Equal(epochs, []int32{1, 1}) {
		t.Fatalf("one read from 0 served batches of epochs %v, want [1 1] (the old segment up to its end)", epochs)
	}
	if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Fatalf("served %v, want [0 1 2 3]", got)
	}
}
