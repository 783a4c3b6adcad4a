package partition

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// FuzzRecoverSegment writes arbitrary bytes after valid batches as the newest segment and
// opens the log: recovery must not panic, must keep the valid prefix, and every batch it
// then serves must pass the CRC check; what it quarantined answers errCorruptRange.
func FuzzRecoverSegment(f *testing.F) {
	good := append(testBatch(-1, -1, -1, 2, 1000, []byte("a")), testBatch(7, 0, 0, 1, 1001, []byte("b"))...)
	f.Add(good, []byte{})
	f.Add(good[:40], []byte{0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 61})
	f.Add([]byte{}, good[:70])
	torn := testBatch(-1, -1, -1, 1, 5, []byte("c"))
	f.Add(good, torn[:len(torn)-1])
	f.Fuzz(func(t *testing.T, prefix, tail []byte) {
		dir := t.TempDir()
		// Stamp offsets as the broker would, so the prefix may be a valid log.
		var data []byte
		next := int64(0)
		for b := prefix; len(b) >= batchHeaderSize; {
			h := parseHeader(b)
			if h.Size() > int64(len(b)) || h.Size() < batchHeaderSize || h.LastOffsetDelta < 0 {
				break
			}
			batch := append([]byte(nil), b[:h.Size()]...)
			stamp(batch, next, 0)
			next += int64(h.LastOffsetDelta) + 1
			data = append(data, batch...)
			b = b[h.Size():]
		}
		data = append(data, tail...)
		if err := os.WriteFile(filepath.Join(dir, segmentName(0)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := openLog(dir, logConfig{segmentBytes: 1 << 20, log: zerolog.Nop()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for off := l.StartOffset(); off < l.EndOffset(); {
			b, err := l.read(off, l.EndOffset(), 1<<20, true)
			if c := l.corruptAt(off); c != nil && errors.Is(err, errCorruptRange) {
				off = c.to // quarantined: reported, never served
				continue
			}
			if err != nil || len(b) == 0 {
				t.Fatalf("read at %d of %d: %v", off, l.EndOffset(), err)
			}
			for len(b) > 0 {
				h := parseHeader(b)
				if !checkStored(b[:h.Size()]) {
					t.Fatalf("bad batch served at %d", off)
				}
				off = h.LastOffset() + 1
				b = b[h.Size():]
			}
		}
	})
}

// FuzzLeaderEpochs: any leader-epoch file either decodes into entries that grow in epoch
// and never go back in start offset, or is refused; nothing panics, and what decodes
// round-trips through the writer's encoding.
func FuzzLeaderEpochs(f *testing.F) {
	f.Add([]byte(`{"epochs":[{"epoch":1,"start_offset":0,"broker":0},{"epoch":2,"start_offset":120,"broker":2}]}`))
	f.Add([]byte(`{"epochs":[]}`))
	f.Add([]byte(`{"epochs":[{"epoch":2,"start_offset":5},{"epoch":1,"start_offset":9}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodeEpochs(b, "fuzz")
		if err != nil {
			return
		}
		for i := 1; i < len(entries); i++ {
			if entries[i].Epoch <= entries[i-1].Epoch || entries[i].StartOffset < entries[i-1].StartOffset {
				t.Fatalf("accepted out of order: %+v", entries)
			}
		}
		dir := t.TempDir()
		if err := writeEpochs(storage.OSFS{}, dir, entries); err != nil {
			t.Fatal(err)
		}
		back, err := readEpochs(storage.OSFS{}, dir)
		if err != nil || len(back) != min(len(entries), maxEpochEntries) {
			t.Fatalf("round trip: %v, %d entries of %d", err, len(back), len(entries))
		}
	})
}
