package storage

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// faultStep is one FS step on a real directory, run through fsys; check says whether it
// took effect on disk.
type faultStep struct {
	op    Op
	path  string // the path the fault names
	run   func(fsys FS) error
	check func(t *testing.T) bool // true when the step took effect
}

// faultSteps sets up dir for each step (so each may succeed) and returns them.
func faultSteps(t *testing.T, dir string) []faultStep {
	t.Helper()
	p := func(name string) string { return filepath.Join(dir, name) }
	write := func(name, content string) {
		if err := os.WriteFile(p(name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(p(name))
		return err == nil
	}
	content := func(name string) string {
		b, _ := os.ReadFile(p(name))
		return string(b)
	}
	write("read", "r")
	write("old", "o")
	write("gone", "g")
	write("open", "0123456789")
	if err := os.MkdirAll(p("tree/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var got []byte
	var names []string
	var entries []fs.DirEntry
	return []faultStep{
		{OpRead, p("read"), func(f FS) (err error) { got, err = f.ReadFile(p("read")); return err },
			func(*testing.T) bool { return string(got) == "r" }},
		{OpReadDir, dir, func(f FS) (err error) { names, err = f.ReadDirNames(dir); return err },
			func(*testing.T) bool { return len(names) > 0 }},
		{OpReadDir, dir, func(f FS) (err error) { entries, err = f.ReadDir(dir); return err },
			func(*testing.T) bool { return len(entries) > 0 }},
		{OpCreate, p("new"), func(f FS) error {
			file, err := f.Create(p("new"))
			if err != nil {
				return err
			}
			return file.Close()
		}, func(*testing.T) bool { return exists("new") }},
		{OpOpen, p("open"), func(f FS) error {
			file, err := f.OpenWrite(p("open"))
			if err != nil {
				return err
			}
			if _, err := file.Write([]byte("ab")); err != nil {
				return err
			}
			return file.Close()
		}, func(*testing.T) bool { return content("open") == "ab23456789" }},
		{OpRename, p("renamed"), func(f FS) error { return f.Rename(p("old"), p("renamed")) },
			func(*testing.T) bool { return exists("renamed") && !exists("old") }},
		{OpRemove, p("gone"), func(f FS) error { return f.Remove(p("gone")) },
			func(*testing.T) bool { return !exists("gone") }},
		{OpRemoveAll, p("tree"), func(f FS) error { return f.RemoveAll(p("tree")) },
			func(*testing.T) bool { return !exists("tree") }},
		{OpMkdir, p("a/b"), func(f FS) error { return f.MkdirAll(p("a/b")) },
			func(*testing.T) bool { return exists("a/b") }},
		{OpSyncDir, dir, func(f FS) error { return f.SyncDir(dir) }, nil},
		{OpSyncFS, dir, func(f FS) error {
			if err := f.SyncFS(dir); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				return err
			}
			return nil
		}, nil},
	}
}

// Each step fails, with the error asked for and its path, when FailNext names it, and is
// not done; the same step then passes through to the disk; no other step is failed by it.
func TestFaultFSFailsTheStepItNames(t *testing.T) {
	for i, step := range faultSteps(t, t.TempDir()) {
		t.Run(string(step.op), func(t *testing.T) {
			dir := t.TempDir()
			step := faultSteps(t, dir)[i]
			fsys := NewFaultFS(nil)
			boom := errors.New("boom")
			fsys.FailNext(step.op, boom)
			err := step.run(fsys)
			var pe *fs.PathError
			if !errors.Is(err, boom) || !errors.As(err, &pe) || pe.Op != string(step.op) || pe.Path != step.path {
				t.Fatalf("%s with a fault queued: %v, want boom as a PathError of %s on %s", step.op, err, step.op, step.path)
			}
			if step.check != nil && step.check(t) {
				t.Fatalf("%s failed but was done on disk", step.op)
			}
			if n := fsys.Count(step.op); n != 1 {
				t.Errorf("Count(%s) = %d after one try", step.op, n)
			}
			if err := step.run(fsys); err != nil {
				t.Fatalf("%s after its one fault: %v", step.op, err)
			}
			if step.check != nil && !step.check(t) {
				t.Fatalf("%s passed but was not done on disk", step.op)
			}
			// a fault of every other kind queued fails none of this step's calls
			other := NewFaultFS(nil)
			for _, s := range faultSteps(t, t.TempDir()) {
				if s.op != step.op {
					other.FailNext(s.op, nil)
				}
			}
			if err := faultSteps(t, t.TempDir())[i].run(other); err != nil {
				t.Fatalf("%s failed by a fault queued for another step: %v", step.op, err)
			}
		})
	}
}

// The steps of a file open for writing: a failed write writes half its buffer (a full
// disk cutting it short) and says how much; a failed Sync or Datasync is counted as OpSync
// and the file stays usable; a failed Close still closes the file. Faults queue, and the
// default error is ErrInjected.
func TestFaultFSFileSteps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	fsys := NewFaultFS(OSFS{})
	f, err := fsys.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fsys.FailNext(OpWrite, nil)
	fsys.FailNext(OpWrite, nil)
	if n, err := f.Write([]byte("abcdef")); !errors.Is(err, ErrInjected) || n != 3 {
		t.Fatalf("first faulted write: %d, %v; want 3 bytes and ErrInjected", n, err)
	}
	if n, err := f.Write([]byte("gh")); !errors.Is(err, ErrInjected) || n != 1 {
		t.Fatalf("second queued write fault: %d, %v; want 1 byte and ErrInjected", n, err)
	}
	if n, err := f.Write([]byte("XY")); err != nil || n != 2 {
		t.Fatalf("write after the faults: %d, %v", n, err)
	}
	fsys.FailNext(OpSync, nil)
	fsys.FailNext(OpSync, nil)
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Sync: %v", err)
	}
	if err := f.Datasync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Datasync: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("Sync after the faults: %v", err)
	}
	if err := f.Datasync(); err != nil {
		t.Fatalf("Datasync after the faults: %v", err)
	}
	if n := fsys.Count(OpSync); n != 4 {
		t.Errorf("Count(sync) = %d, want 4 (Sync and Datasync are both the fsync step)", n)
	}
	fsys.FailNext(OpClose, nil)
	if err := f.Close(); !errors.Is(err, ErrInjected) {
		t.Fatalf("faulted Close: %v", err)
	}
	if _, err := f.Write([]byte("z")); err == nil || errors.Is(err, ErrInjected) {
		t.Fatalf("write after a faulted Close: %v, want the closed file's own error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "abcgXY" {
		t.Fatalf("file holds %q, want abc (half of the first write) g (half of the second) XY", b)
	}
	if n := fsys.Count(OpWrite); n != 4 {
		t.Errorf("Count(write) = %d, want 4", n)
	}
}

// Before sees every step with its path before it is done, may fail it with an error of
// its own, and may hold it: a write held in Before has not reached the file until Before
// returns.
func TestFaultFSBeforeHoldsAndFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	fsys := NewFaultFS(nil)
	var seen []Op
	denied := errors.New("denied")
	fsys.SetBefore(func(op Op, p string) error {
		seen = append(seen, op)
		if op == OpRename {
			return denied
		}
		return nil
	})
	f, err := fsys.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.Rename(path, filepath.Join(dir, "g")); !errors.Is(err, denied) {
		t.Fatalf("rename failed by Before: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a rename Before failed was done: %v", err)
	}
	if want := []Op{OpCreate, OpRename}; len(seen) != 2 || seen[0] != want[0] || seen[1] != want[1] {
		t.Fatalf("Before saw %v, want %v", seen, want)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	fsys.SetBefore(func(op Op, p string) error {
		if op == OpWrite && p == path {
			close(entered)
			<-release
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := f.Write([]byte("held"))
		done <- err
	}()
	<-entered
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("a write held in Before reached the file: %q", b)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("held")) {
		t.Fatalf("file %q after the held write went on", b)
	}
	// a queued fault wins over Before, which is then not asked
	called := false
	fsys.SetBefore(func(Op, string) error { called = true; return nil })
	fsys.FailNext(OpClose, nil)
	if err := f.Close(); !errors.Is(err, ErrInjected) || called {
		t.Fatalf("queued close fault: %v, Before called %v", err, called)
	}
}

// NewFaultFS(nil) wraps the operating system's files; a fault of a step does not reach
// Inner, a passed step does.
func TestFaultFSInner(t *testing.T) {
	if _, ok := NewFaultFS(nil).Inner.(OSFS); !ok {
		t.Fatal("NewFaultFS(nil) does not wrap OSFS")
	}
	inner := NewFaultFS(nil)
	outer := NewFaultFS(inner)
	dir := t.TempDir()
	outer.FailNext(OpMkdir, nil)
	if err := outer.MkdirAll(filepath.Join(dir, "x")); err == nil {
		t.Fatal("faulted MkdirAll passed")
	}
	if n := inner.Count(OpMkdir); n != 0 {
		t.Fatalf("a faulted step reached Inner %d times", n)
	}
	if err := outer.MkdirAll(filepath.Join(dir, "x")); err != nil || inner.Count(OpMkdir) != 1 {
		t.Fatalf("MkdirAll through: %v, inner count %d", err, inner.Count(OpMkdir))
	}
}
