package broker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"kaas/storage"
)

// The cluster id is written once, at the first start, and every client caches it: a
// write that was not made durable (the fsync of the file or of its directory failed)
// must stop the start, or a crash could bring the broker back under a new id. A failed
// write leaves no file behind, and the next start writes the id afresh.
func TestClusterIDWriteIsDurable(t *testing.T) {
	for _, op := range []storage.Op{storage.OpSync, storage.OpSyncDir, storage.OpClose} {
		t.Run(string(op), func(t *testing.T) {
			dir := t.TempDir()
			fsys := storage.NewFaultFS(nil)
			fsys.FailNext(op, nil)
			if id, err := loadClusterID(fsys, dir); !errors.Is(err, storage.ErrInjected) {
				t.Fatalf("cluster id %q, error %v; want the injected %s failure", id, err, op)
			}
			if _, err := os.Stat(filepath.Join(dir, "cluster.id.tmp")); !os.IsNotExist(err) {
				t.Fatalf("a tmp file is left: %v", err)
			}
			id, err := loadClusterID(fsys, dir)
			if err != nil || len(id) != 22 {
				t.Fatalf("second start: id %q, %v", id, err)
			}
			again, err := loadClusterID(fsys, dir)
			if err != nil || again != id {
				t.Fatalf("third start read %q, %v; want %q", again, err, id)
			}
		})
	}
}
