// Package diskimage copies a running broker's data directory as a crash could leave it,
// for tests of what survives a kill -9 (the page cache survives a killed process, so the
// files as they are now are what the next start finds). It imports nothing of kaas, so
// the tests of any package, internal ones too, can use it.
package diskimage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Copy copies the tree at src to dst as it is now, but for the tree at skip (""
// skips nothing). A file that goes while it copies (a segment removed, a temporary file
// renamed) is left out, as it would be from a crash image taken a moment later.
func Copy(t testing.TB, src, dst, skip string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if skip != "" && path == skip {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// Crash copies the data dir root into a new temporary dir and returns it: the journal
// dir (inside root) first, then the rest. The other order could pair a file written
// after the copy began with a journal whose segment was dropped meanwhile, an image no
// crash leaves.
func Crash(t testing.TB, root, journal string) string {
	t.Helper()
	dst := t.TempDir()
	rel, err := filepath.Rel(root, journal)
	if err != nil {
		t.Fatal(err)
	}
	Copy(t, journal, filepath.Join(dst, rel), "")
	Copy(t, root, dst, journal)
	return dst
}
