package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Whichever step of an atomic write fails, the file keeps its old content (or, when only
// the directory's fsync failed, has the whole new content), and no tmp file is left.
func TestWriteFileAtomicFailures(t *testing.T) {
	for _, op := range []Op{OpCreate, OpWrite, OpSync, OpClose, OpRename, OpSyncDir} {
		t.Run(string(op), func(t *testing.T) {
			dir := t.TempDir()
			fsys := NewFaultFS(nil)
			if err := WriteFileAtomic(fsys, dir, "f", []byte("old")); err != nil {
				t.Fatal(err)
			}
			fsys.FailNext(op, nil)
			if err := WriteFileAtomic(fsys, dir, "f", []byte("new content")); !errors.Is(err, ErrInjected) {
				t.Fatalf("write under a failed %s: %v", op, err)
			}
			want := "old"
			if op == OpSyncDir {
				want = "new content"
			}
			if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != want {
				t.Fatalf("f holds %q (%v), want %q", b, err, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "f"+TmpSuffix)); !os.IsNotExist(err) {
				t.Fatalf("tmp file left: %v", err)
			}
		})
	}
}

// Removing a file that never was, in a directory that was never made, is done.
func TestRemoveDurablyMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	if err := RemoveDurably(OSFS{}, dir, "f"); err != nil {
		t.Fatal(err)
	}
	fsys := NewFaultFS(nil)
	if err := WriteFileAtomic(fsys, filepath.Dir(dir), "g", []byte("x")); err != nil {
		t.Fatal(err)
	}
	fsys.FailNext(OpSyncDir, nil)
	if err := RemoveDurably(fsys, filepath.Dir(dir), "g"); !errors.Is(err, ErrInjected) {
		t.Fatalf("removal under a failed directory fsync: %v", err)
	}
}
