package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The steps of a file open for positioned reads and writes (a partition segment): opening
// is OpCreate with os.O_CREATE and OpOpen without; a failed WriteAt writes half its buffer
// at its offset and says how much; a failed ReadAt, Truncate or Size does nothing and the
// file stays usable; a failed fsync is OpSync as for any file.
func TestFaultFSPositionedFileSteps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "00000000000000000000.log")
	fsys := NewFaultFS(nil)
	fsys.FailNext(OpCreate, nil)
	if _, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted create: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a faulted create made the file: %v", err)
	}
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Name() != path {
		t.Fatalf("Name %q, want %q", f.Name(), path)
	}
	if _, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive create of an existing file: %v, want ErrExist", err)
	}
	if _, err := f.WriteAt([]byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	fsys.FailNext(OpWrite, nil)
	if n, err := f.WriteAt([]byte("abcdef"), 10); !errors.Is(err, ErrInjected) || n != 3 {
		t.Fatalf("faulted WriteAt: %d, %v; want 3 bytes and ErrInjected", n, err)
	}
	buf := make([]byte, 13)
	fsys.FailNext(OpRead, nil)
	if n, err := f.ReadAt(buf, 0); !errors.Is(err, ErrInjected) || n != 0 {
		t.Fatalf("faulted ReadAt: %d, %v", n, err)
	}
	if n, err := f.ReadAt(buf, 0); err != nil || string(buf[:n]) != "0123456789abc" {
		t.Fatalf("ReadAt after the fault: %q, %v; want the write and half the faulted one", buf[:n], err)
	}
	fsys.FailNext(OpTruncate, nil)
	if err := f.Truncate(10); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Truncate: %v", err)
	}
	fsys.FailNext(OpStat, nil)
	if _, err := f.Size(); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Size: %v", err)
	}
	if n, err := f.Size(); err != nil || n != 13 {
		t.Fatalf("Size after a faulted Truncate: %d, %v; want 13", n, err)
	}
	if err := f.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Size(); err != nil || n != 10 {
		t.Fatalf("Size after Truncate(10): %d, %v", n, err)
	}
	fsys.FailNext(OpSync, nil)
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Sync: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fsys.FailNext(OpOpen, nil)
	if _, err := fsys.OpenFile(path, os.O_RDONLY); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted open: %v", err)
	}
	r, err := fsys.OpenFile(path, os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n, err := r.ReadAt(buf[:4], 6); err != nil || string(buf[:n]) != "6789" {
		t.Fatalf("read-only ReadAt: %q, %v", buf[:n], err)
	}
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("WriteAt on a file opened read-only passed")
	}
	for op, want := range map[Op]int{OpCreate: 3, OpOpen: 2, OpWrite: 3, OpRead: 3, OpTruncate: 2, OpStat: 3, OpSync: 2} {
		if n := fsys.Count(op); n != want {
			t.Errorf("Count(%s) = %d, want %d", op, n, want)
		}
	}
}

// Lock takes a file's lock once: a second Lock of the same path (another open file, as
// another process would have) finds it held, until the holder's file is closed. A faulted
// Lock takes nothing.
func TestLockHeldUntilClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	for _, fsys := range []FS{OSFS{}, NewFaultFS(nil)} {
		f, held, err := fsys.Lock(path)
		if err != nil || !held {
			t.Fatalf("%T: first Lock: held %v, %v", fsys, held, err)
		}
		if _, err := f.WriteAt([]byte("7"), 0); err != nil {
			t.Fatal(err)
		}
		if g, held, err := fsys.Lock(path); err != nil || held || g != nil {
			t.Fatalf("%T: Lock of a held lock: held %v, file %v, %v", fsys, held, g, err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "7" {
			t.Fatalf("lock file %q, %v", b, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		g, held, err := fsys.Lock(path)
		if err != nil || !held {
			t.Fatalf("%T: Lock after the holder closed: held %v, %v", fsys, held, err)
		}
		g.Close()
	}
	fsys := NewFaultFS(nil)
	fsys.FailNext(OpLock, nil)
	if _, _, err := fsys.Lock(path); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Lock: %v", err)
	}
	f, held, err := OSFS{}.Lock(path)
	if err != nil || !held {
		t.Fatalf("a faulted Lock left the lock held: held %v, %v", held, err)
	}
	f.Close()
}

// The chaos hook sees a segment's positioned steps as FaultFS does, and fails them the
// same way (a failed WriteAt writes half its buffer).
func TestHookSeesPositionedSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "00000000000000000000.log")
	f, err := OSFS{}.OpenFile(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seen []Op
	fail := map[Op]bool{}
	restore := SetHook(func(op Op, p string) error {
		if p != path {
			return nil
		}
		seen = append(seen, op)
		if fail[op] {
			return ErrInjected
		}
		return nil
	})
	defer restore()
	fail[OpWrite], fail[OpRead], fail[OpTruncate], fail[OpSync] = true, true, true, true
	if n, err := f.WriteAt([]byte("abcd"), 0); !errors.Is(err, ErrInjected) || n != 2 {
		t.Fatalf("hooked WriteAt: %d, %v", n, err)
	}
	if _, err := f.ReadAt(make([]byte, 2), 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("hooked ReadAt: %v", err)
	}
	if err := f.Truncate(0); !errors.Is(err, ErrInjected) {
		t.Fatalf("hooked Truncate: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("hooked Sync: %v", err)
	}
	if n, err := f.Size(); err != nil || n != 2 {
		t.Fatalf("Size: %d, %v", n, err)
	}
	want := []Op{OpWrite, OpRead, OpTruncate, OpSync, OpStat}
	if len(seen) != len(want) {
		t.Fatalf("hook saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("hook saw %v, want %v", seen, want)
		}
	}
}

// TestDatasyncWhileClosing: a file's fdatasync on one goroutine and its Close on another
// (a partition stopping while its segment syncs) do not race: the sync holds the
// descriptor while it runs (run under -race, as make test does).
func TestDatasyncWhileClosing(t *testing.T) {
	for i := range 20 {
		f, err := OSFS{}.OpenFile(filepath.Join(t.TempDir(), fmt.Sprintf("f%d", i)), os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- f.Datasync() }()
		closeErr := f.Close()
		// Closed before the sync took the descriptor: the sync says so, nothing else.
		if err := <-done; err != nil && !strings.Contains(err.Error(), "closed file") {
			t.Fatalf("datasync: %v", err)
		}
		if closeErr != nil {
			t.Fatalf("close: %v", closeErr)
		}
	}
}
