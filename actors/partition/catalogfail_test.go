package partition

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// A catalogue write whose fsync fails (topic.json of a new topic, the next block of
// producer ids) is answered with an error, leaves nothing behind under topics/ (no
// directory of the topic, no tmp file), and the same write succeeds once the volume does.
func TestCatalogueWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	h := newHarness(t, dir, func(c *Config) { c.FS = fsys })
	defer h.stop()
	root := topicsDir(dir)

	fsys.FailNext(storage.OpSync, nil)
	if ti := h.create("t", 2); ti.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("create under a failed fsync: %+v, want KAFKA_STORAGE_ERROR", ti)
	}
	assertOnly(t, root)
	if ti := h.create("t", 2); ti.ErrorCode != 0 {
		t.Fatalf("create after the failure: %+v", ti)
	}

	fsys.FailNext(storage.OpSync, nil)
	if id := h.initProducerID(); id.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("producer id under a failed fsync: %+v, want COORDINATOR_NOT_AVAILABLE", id)
	}
	assertOnly(t, root, "t")
	if id := h.initProducerID(); id.ErrorCode != 0 || id.ID != 0 {
		t.Fatalf("producer id after the failure: %+v, want id 0", id)
	}
	assertOnly(t, root, "t", producerIDFile)
}

func (h *harness) initProducerID() *ProducerID {
	return request[*ProducerID](h, func(p actor.Promise) any { return &InitProducerID{Reply: p} })
}

// assertOnly fails unless dir holds exactly names.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", filepath.Base(dir), got, names)
	}
}
