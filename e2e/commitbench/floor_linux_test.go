package commitbench

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// diskFloor measures, in dir, what the disk itself does in d per path: append + fsync
// (a plain log), write into a zero-filled file + fdatasync (the offsets journal), and the
// rewrite cycle of a group file (tmp write, fsync, rename, directory fsync). Durable
// commits are bounded by these times the commits each one carries.
func diskFloor(b *testing.B, dir string, d time.Duration) (fsyncs, datasyncs, cycles float64) {
	rate := func(step func() error) float64 {
		n := 0
		start := time.Now()
		for time.Since(start) < d {
			if err := step(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		return float64(n) / time.Since(start).Seconds()
	}
	rec := make([]byte, 200)
	f, err := os.Create(filepath.Join(dir, "append"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fsyncs = rate(func() error {
		if _, err := f.Write(rec); err != nil {
			return err
		}
		return f.Sync()
	})
	g, err := os.Create(filepath.Join(dir, "prealloc"))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Write(make([]byte, 16<<20)); err != nil {
		b.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	var off int64
	datasyncs = rate(func() error {
		if _, err := g.WriteAt(rec, off%(16<<20-int64(len(rec)))); err != nil {
			return err
		}
		off += int64(len(rec))
		return syscall.Fdatasync(int(g.Fd()))
	})
	path := filepath.Join(dir, "group.json")
	cycles = rate(func() error {
		t, err := os.Create(path + ".tmp")
		if err != nil {
			return err
		}
		if _, err := t.Write(rec); err != nil {
			return err
		}
		if err := t.Sync(); err != nil {
			return err
		}
		if err := t.Close(); err != nil {
			return err
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return err
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	})
	return fsyncs, datasyncs, cycles
}
