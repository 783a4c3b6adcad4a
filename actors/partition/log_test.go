package partition

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

func openTestLog(t *testing.T, dir string, segBytes int64) *segmentLog {
	t.Helper()
	l, err := openLog(dir, logConfig{segmentBytes: segBytes, log: zerolog.Nop()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func appendN(t *testing.T, l *segmentLog, n int, records int, ts int64) {
	t.Helper()
	for i := 0; i < n; i++ {
		b := testBatch(-1, -1, -1, records, ts+int64(i), []byte("value"))
		h, perr := validateProduced(b, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		if _, err := l.append(b, &h, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// offsets lists the base offset of every batch read from offset to the end.
func readAll(t *testing.T, l *segmentLog, from int64) []int64 {
	t.Helper()
	var bases []int64
	for off := from; off < l.EndOffset(); {
		b, err := l.read(off, l.EndOffset(), 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Fatalf("nothing read at %d of %d", off, l.EndOffset())
		}
		for len(b) > 0 {
			if !checkStored(b[:parseHeaderSize(b)]) {
				t.Fatalf("bad batch served at %d", off)
			}
			h := parseHeader(b)
			bases = append(bases, h.BaseOffset)
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	return bases
}

func parseHeaderSize(b []byte) int64 { h := parseHeader(b); return h.Size() }

func TestLogAppendReadReopen(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 1<<20)
	appendN(t, l, 10, 3, 1000)
	if l.EndOffset() != 30 {
		t.Fatalf("end %d", l.EndOffset())
	}
	if got := readAll(t, l, 4); len(got) != 9 || got[0] != 3 {
		t.Fatalf("read from 4: %v", got)
	}
	l.Close()
	l = openTestLog(t, dir, 1<<20)
	defer l.Close()
	if l.EndOffset() != 30 || l.StartOffset() != 0 {
		t.Fatalf("after reopen: start %d end %d", l.StartOffset(), l.EndOffset())
	}
	if got := readAll(t, l, 0); len(got) != 10 {
		t.Fatalf("after reopen read %v", got)
	}
	// The high watermark limit is respected.
	b, _ := l.read(0, 6, 1<<20, true)
	if h := parseHeader(b); len(b) != int(2*h.Size()) {
		t.Fatalf("read past limit: %d bytes", len(b))
	}
}

func TestLogTornTailTruncated(t *testing.T) {
	for _, tear := range []string{"cut", "crc", "garbage"} {
		t.Run(tear, func(t *testing.T) {
			dir := t.TempDir()
			l := openTestLog(t, dir, 1<<20)
			appendN(t, l, 3, 2, 1000)
			path := l.active().path
			size := l.active().size
			one := size / 3
			l.Close()
			// A crash image taken before the recovery point covered these batches:
			// without the file, only the segment's base is known to be on disk.
			if err := os.Remove(filepath.Join(dir, recoveryPointName)); err != nil {
				t.Fatal(err)
			}
			switch tear {
			case "cut":
				os.Truncate(path, size-7)
			case "crc":
				f, _ := os.OpenFile(path, os.O_RDWR, 0)
				f.WriteAt([]byte{0xff}, size-3)
				f.Close()
			case "garbage":
				f, _ := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
				f.Write([]byte("not a batch at all, but long enough to look like a header 0123456789"))
				f.Close()
			}
			l = openTestLog(t, dir, 1<<20)
			defer l.Close()
			want := int64(4)
			if tear == "garbage" {
				want = 6
			}
			if l.EndOffset() != want {
				t.Fatalf("end %d, want %d", l.EndOffset(), want)
			}
			if st, _ := os.Stat(path); st.Size() != want/2*one {
				t.Fatalf("file %d bytes, want %d", st.Size(), want/2*one)
			}
			appendN(t, l, 1, 2, 2000)
			if got := readAll(t, l, 0); len(got) != int(want/2)+1 {
				t.Fatalf("after recovery: %v", got)
			}
		})
	}
}

func TestLogRollAndRetention(t *testing.T) {
	dir := t.TempDir()
	one := int64(len(testBatch(-1, -1, -1, 1, 0, []byte("value"))))
	l := openTestLog(t, dir, 3*one) // three batches per segment
	appendN(t, l, 10, 1, 1000)
	if len(l.segs) != 4 {
		t.Fatalf("%d segments", len(l.segs))
	}
	if got := readAll(t, l, 0); len(got) != 10 {
		t.Fatalf("read across segments: %v", got)
	}
	if off, ts, _ := l.offsetForTime(1004, l.EndOffset()); off != 4 || ts != 1004 {
		t.Fatalf("offset for time: %d %d", off, ts)
	}
	if ts, off, _ := l.maxTimestamp(l.EndOffset()); ts != 1009 || off != 9 {
		t.Fatalf("max timestamp %d at %d", ts, off)
	}
	// Time: segments whose newest record is older than 1003 go.
	if n, _ := l.retain(2003, 1000, -1); n != 1 || l.StartOffset() != 3 {
		t.Fatalf("time retention removed %d, start %d", n, l.StartOffset())
	}
	// Size: keep at most 4 batches' worth; the active segment always stays.
	if n, _ := l.retain(0, -1, 4*one); n != 1 || l.StartOffset() != 6 {
		t.Fatalf("size retention removed %d, start %d", n, l.StartOffset())
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(0))); !os.IsNotExist(err) {
		t.Fatalf("deleted segment still on disk: %v", err)
	}
	l.Close()
	l = openTestLog(t, dir, 3*one)
	defer l.Close()
	if l.StartOffset() != 6 || l.EndOffset() != 10 {
		t.Fatalf("after reopen %d..%d", l.StartOffset(), l.EndOffset())
	}
}

func TestLogEpochEnd(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.Close()
	for i, ep := range []int32{0, 0, 2, 2, 5} {
		b := testBatch(-1, -1, -1, 1, int64(i), nil)
		h, _ := validateProduced(b, 1<<20)
		l.append(b, &h, ep)
	}
	cases := []struct {
		ask, wantEp int32
		wantEnd     int64
	}{
		{0, 0, 2}, {1, 0, 2}, {2, 2, 4}, {4, 2, 4}, {5, 5, 5}, {6, -1, -1},
	}
	for _, c := range cases {
		if ep, end := l.epochEnd(c.ask, 5); ep != c.wantEp || end != c.wantEnd {
			t.Errorf("epoch %d: %d %d, want %d %d", c.ask, ep, end, c.wantEp, c.wantEnd)
		}
	}
}

func TestLogOffsetForTimeInsideBatch(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.Close()
	appendN(t, l, 1, 5, 1000) // offsets 0-4 at 1000-1004
	appendN(t, l, 1, 5, 2000) // offsets 5-9 at 2000-2004
	cases := []struct{ ts, off, at int64 }{
		{0, 0, 1000}, {1002, 2, 1002}, {1005, 5, 2000}, {2004, 9, 2004}, {2005, -1, -1},
	}
	for _, c := range cases {
		if off, at, err := l.offsetForTime(c.ts, l.EndOffset()); err != nil || off != c.off || at != c.at {
			t.Errorf("ts %d: offset %d at %d (%v), want %d at %d", c.ts, off, at, err, c.off, c.at)
		}
	}
	if ts, off, _ := l.maxTimestamp(l.EndOffset()); ts != 2004 || off != 9 {
		t.Errorf("max timestamp %d at %d", ts, off)
	}
}
