package partition

import (
	"errors"
	"os"
	"testing"
)

// TestLogAcknowledgedTailIsNotCut cuts the file inside its last batch after a clean
// close: that batch is below the recovery point (it was on disk), so it is corruption,
// not a torn write. Nothing is truncated, the log end stays past it, and reading it
// answers the corrupt-range error instead of skipping it.
func TestLogAcknowledgedTailIsNotCut(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 1<<20)
	appendN(t, l, 10, 3, 1000)
	path, size := l.active().path, l.active().size
	l.Close()
	if err := os.Truncate(path, size-7); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, 1<<20)
	defer l.Close()
	if l.EndOffset() != 30 {
		t.Fatalf("end %d, want 30: acknowledged offsets would be reused", l.EndOffset())
	}
	if st, _ := os.Stat(path); st.Size() != size-7 {
		t.Fatalf("segment cut to %d bytes", st.Size())
	}
	if _, err := l.read(27, 30, 1<<20, true); !errors.Is(err, errCorruptRange) {
		t.Fatalf("read of the lost batch: %v", err)
	}
	if b, err := l.read(0, 30, 1<<20, true); err != nil || int64(len(b)) != 9*size/10 {
		t.Fatalf("before the lost batch: %d bytes, %v", len(b), err)
	}
	appendN(t, l, 1, 2, 2000)
	if b, err := l.read(30, 32, 1<<20, true); err != nil || parseHeader(b).BaseOffset != 30 {
		t.Fatalf("after the lost batch: %v", err)
	}
}

// TestLogCloseAfterDirMovedAside closes a log whose directory was moved aside (a deleted
// topic) while a new log of the same name stands at the old path: the old log's
// recovery point must not land in the new one, whose log would then look truncated.
func TestLogCloseAfterDirMovedAside(t *testing.T) {
	root := t.TempDir()
	dir := root + "/p"
	old := openTestLog(t, dir, 1<<20)
	appendN(t, old, 10, 3, 1000)
	old.closeIdle(true)
	if err := os.Rename(dir, root+"/p~deleted"); err != nil {
		t.Fatal(err)
	}
	fresh := openTestLog(t, dir, 1<<20)
	fresh.Close()
	old.Close()
	fresh = openTestLog(t, dir, 1<<20)
	defer fresh.Close()
	if fresh.EndOffset() != 0 || len(fresh.corrupt) != 0 {
		t.Fatalf("new log: end %d, corrupt %v", fresh.EndOffset(), fresh.corrupt)
	}
}

// TestLogMissingOffsetsAreQuarantined loses acknowledged batches without leaving a bad
// byte: the newest segment cut at a batch boundary below the recovery point, and a
// middle segment's file gone. Both ranges answer the corrupt-range error instead of
// being skipped, and no offset in them is handed out again.
func TestLogMissingOffsetsAreQuarantined(t *testing.T) {
	t.Run("cut at a batch boundary", func(t *testing.T) {
		dir := t.TempDir()
		l := openTestLog(t, dir, 1<<20)
		appendN(t, l, 10, 3, 1000)
		path, size := l.active().path, l.active().size
		l.Close()
		if err := os.Truncate(path, size/10*9); err != nil {
			t.Fatal(err)
		}
		l = openTestLog(t, dir, 1<<20)
		defer l.Close()
		if l.EndOffset() != 30 {
			t.Fatalf("end %d", l.EndOffset())
		}
		if _, err := l.read(27, 30, 1<<20, true); !errors.Is(err, errCorruptRange) {
			t.Fatalf("read of the lost batch: %v", err)
		}
	})
	t.Run("middle segment gone", func(t *testing.T) {
		dir := t.TempDir()
		one := int64(len(testBatch(-1, -1, -1, 3, 0, []byte("value"))))
		l := openTestLog(t, dir, 3*one)
		appendN(t, l, 10, 3, 1000) // segments 0-8, 9-17, 18-26, 27-29
		l.Close()
		if err := os.Remove(dir + "/" + segmentName(9)); err != nil {
			t.Fatal(err)
		}
		l = openTestLog(t, dir, 3*one)
		defer l.Close()
		for _, off := range []int64{9, 17} {
			if _, err := l.read(off, 30, 1<<20, true); !errors.Is(err, errCorruptRange) {
				t.Fatalf("read at %d of the lost segment: %v", off, err)
			}
		}
		if b, err := l.read(18, 30, 1<<20, true); err != nil || parseHeader(b).BaseOffset != 18 {
			t.Fatalf("read after the lost segment: %v", err)
		}
	})
}

// TestLogEverySegmentGone starts again past the recovery point when every segment file
// is gone, so no offset a consumer may hold is handed out a second time.
func TestLogEverySegmentGone(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 1<<20)
	appendN(t, l, 10, 3, 1000)
	path := l.active().path
	l.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, 1<<20)
	defer l.Close()
	if l.StartOffset() != 30 || l.EndOffset() != 30 {
		t.Fatalf("log %d-%d, want 30-30", l.StartOffset(), l.EndOffset())
	}
}

// TestLogReadNoRoom reads with no room for a batch (a client's zero or negative max
// bytes, without min-one): nothing, and no panic.
func TestLogReadNoRoom(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.Close()
	appendN(t, l, 3, 1, 1000)
	for _, max := range []int32{0, -1} {
		if b, err := l.read(0, 3, max, false); err != nil || len(b) != 0 {
			t.Fatalf("max %d: %d bytes, %v", max, len(b), err)
		}
	}
}

// TestLogOlderSegmentLastBatchChecked flips a bit in the last-offset delta of an older
// segment's last batch, which the header walk alone would trust: the segment would then
// seem to overlap the next one. The batch is found corrupt and the next segment stays.
func TestLogOlderSegmentLastBatchChecked(t *testing.T) {
	dir := t.TempDir()
	one := int64(len(testBatch(-1, -1, -1, 1, 0, []byte("value"))))
	l := openTestLog(t, dir, 3*one)
	appendN(t, l, 10, 1, 1000) // segments 0-2, 3-5, 6-8, 9
	l.Close()
	path := dir + "/" + segmentName(0)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, 2*one+offLastOffsetDelta+3)
	b[0] ^= 0x04
	f.WriteAt(b, 2*one+offLastOffsetDelta+3)
	f.Close()
	l = openTestLog(t, dir, 3*one)
	defer l.Close()
	if _, err := os.Stat(dir + "/" + segmentName(3)); err != nil {
		t.Fatalf("next segment: %v", err)
	}
	if _, err := l.read(2, 10, 1<<20, true); !errors.Is(err, errCorruptRange) {
		t.Fatalf("read of the corrupt batch: %v", err)
	}
	if b, err := l.read(3, 10, 1<<20, true); err != nil || parseHeader(b).BaseOffset != 3 {
		t.Fatalf("read of the next segment: %v", err)
	}
}
