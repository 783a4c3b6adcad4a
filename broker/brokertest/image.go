package brokertest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// CopyTree copies a running broker's data directory as it is at this moment: the image
// a crash would leave (the page cache survives a killed process). Modes are kept.
func CopyTree(t testing.TB, src, dst string) { copyTree(t, src, dst, nil) }

// CopyTreeSparse is CopyTree with the zero-filled end of each file left a hole (the
// file keeps its size and bytes), so that preallocated journal segments take no room on
// a small tmpfs.
func CopyTreeSparse(t testing.TB, src, dst string) { copyTree(t, src, dst, holes) }

// holes writes b to path with its trailing zeros as a hole.
func holes(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(bytes.TrimRight(b, "\x00")); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyTree(t testing.TB, src, dst string, write func(path string, b []byte, mode os.FileMode) error) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if write != nil {
			return write(to, b, info.Mode().Perm())
		}
		return os.WriteFile(to, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}
