package partition

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/storage"
)

// TestFailedFsyncIsNeverAcknowledged injects an fsync failure under a produce: the
// producer gets KAFKA_STORAGE_ERROR (retriable), the high watermark does not cover what
// was not made durable, and the next produce is acknowledged once its fsync succeeds.
func TestFailedFsyncIsNeverAcknowledged(t *testing.T) {
	var failNext atomic.Bool
	var syncs atomic.Int64
	fsys := storage.NewFaultFS(nil)
	fsys.Before = func(op storage.Op, path string) error {
		if op != storage.OpSync || !strings.HasSuffix(path, ".log") {
			return nil // the catalogue's writes
		}
		syncs.Add(1)
		if failNext.CompareAndSwap(true, false) {
			return errors.New("injected fsync failure")
		}
		return nil
	}
	h := newHarness(t, t.TempDir(), func(c *Config) { c.FS = fsys })
	defer h.stop()
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 1000, []byte("a"))); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	failNext.Store(true)
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 1000, []byte("b"))); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce under a failed fsync: %+v, want KAFKA_STORAGE_ERROR", r)
	}
	if f := h.fetch("t", 0, 0, 0, 1); f.ErrorCode != 0 || f.HighWatermark != 1 {
		t.Fatalf("after the failed fsync the high watermark is %d (error %d), want 1", f.HighWatermark, f.ErrorCode)
	}
	r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 1000, []byte("c")))
	if r.ErrorCode != 0 {
		t.Fatalf("produce after the failure: %+v", r)
	}
	if f := h.fetch("t", 0, 0, 0, 1); f.HighWatermark != r.BaseOffset+1 {
		t.Fatalf("high watermark %d, want %d", f.HighWatermark, r.BaseOffset+1)
	}
	if syncs.Load() < 3 {
		t.Fatalf("%d fsyncs for 3 acknowledged-or-failed produces", syncs.Load())
	}
}
