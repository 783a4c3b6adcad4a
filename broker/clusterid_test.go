package broker

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
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
			if left, _ := filepath.Glob(filepath.Join(dir, "*"+storage.TmpSuffix)); len(left) > 0 {
				t.Fatalf("a tmp file is left: %v", left)
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

// Brokers started together on a fresh data dir each make the cluster id: every one
// succeeds and all read the same id. Before, they shared one temporary name, and one's
// rename found the file already renamed away by another ("rename cluster.id.tmp: no
// such file or directory").
func TestClusterIDMadeByManyAtOnce(t *testing.T) {
	const brokers, rounds = 16, 50
	for r := 0; r < rounds; r++ {
		dir := t.TempDir()
		ids := make([]string, brokers)
		errs := make([]error, brokers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range brokers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids[i], errs[i] = loadClusterID(storage.OSFS{}, dir)
			}()
		}
		close(start)
		wg.Wait()
		for i := range brokers {
			if errs[i] != nil {
				t.Fatalf("round %d: broker %d: %v", r, i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("round %d: broker %d read %q, broker 0 %q", r, i, ids[i], ids[0])
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*"+storage.TmpSuffix)); len(left) > 0 {
			t.Fatalf("round %d: temporary files left: %v", r, left)
		}
	}
}

// Brokers of two sizes started together on a fresh data dir: one size is recorded, every
// broker of it starts, every broker of the other is refused. A size file that holds no
// size refuses every start.
func TestClusterSizeRecordedOnce(t *testing.T) {
	for r := 0; r < 20; r++ {
		dir := t.TempDir()
		sizes := []int{3, 4, 3, 4, 3, 4, 3, 4}
		errs := make([]error, len(sizes))
		var wg sync.WaitGroup
		for i, size := range sizes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = recordClusterSize(storage.OSFS{}, dir, size)
			}()
		}
		wg.Wait()
		won := map[int]bool{}
		for i, err := range errs {
			switch {
			case err == nil:
				won[sizes[i]] = true
			case !errors.Is(err, ErrClusterSize):
				t.Fatalf("round %d: size %d: %v", r, sizes[i], err)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: sizes started: %v, want exactly one", r, won)
		}
		for size := range won {
			if err := checkClusterSize(storage.OSFS{}, dir, size); err != nil {
				t.Fatal(err)
			}
			if err := checkClusterSize(storage.OSFS{}, dir, 7-size); !errors.Is(err, ErrClusterSize) {
				t.Fatalf("size %d after %d was recorded: %v", 7-size, size, err)
			}
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, clusterSizeName), []byte("three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkClusterSize(storage.OSFS{}, dir, 3); err == nil {
		t.Fatal("a size file holding no size let a broker start")
	}
}
