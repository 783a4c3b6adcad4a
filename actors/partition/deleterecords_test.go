package partition

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

func (h *harness) deleteRecords(offset int64) *RecordsDeleted {
	h.t.Helper()
	q := OffsetQuery{Partition: 0, Offset: offset}
	return h.ask("t", 0, DefaultRequestTimeout, func(p actor.Promise) any { return DeleteRecordsMessage(q, p) },
		func(code int16) any { return &RecordsDeleted{ErrorCode: code, LowWatermark: -1} }).(*RecordsDeleted)
}

// A DeleteRecords whose log-start-offset file cannot be made durable is answered
// KAFKA_STORAGE_ERROR and moves nothing; the next one moves the start, which reads,
// fetches and a restart all follow.
func TestDeleteRecordsWriteFaultIsNotAcknowledged(t *testing.T) {
	dir := t.TempDir()
	fault := &pathFault{op: storage.OpSync, suffix: logStartName + storage.TmpSuffix}
	logs := &eventLog{}
	h := newHarness(t, dir, func(c *Config) {
		c.FS = fault.faultFS()
		c.Log = zerolog.New(logs)
	})
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	for _, v := range []string{"a", "b", "c"} {
		if r := h.produceValue(v); r.ErrorCode != 0 {
			t.Fatalf("produce %s: %+v", v, r)
		}
	}
	fault.armed.Store(1)
	if r := h.deleteRecords(2); r.ErrorCode != kerr.KafkaStorageError.Code || r.LowWatermark != -1 {
		t.Fatalf("delete whose file sync failed: %+v", r)
	}
	if fault.failed.Load() != 1 || len(logs.events(t, "partition_log_start_write_failed")) != 1 {
		t.Fatalf("the failed write was not made through storage.FS, or not logged")
	}
	if l := h.listOffset("t", 0, earliestTimestamp); l.Offset != 0 {
		t.Fatalf("earliest %d after a failed delete", l.Offset)
	}
	if r := h.deleteRecords(2); r.ErrorCode != 0 || r.LowWatermark != 2 {
		t.Fatalf("delete: %+v", r)
	}
	if l := h.listOffset("t", 0, earliestTimestamp); l.Offset != 2 {
		t.Fatalf("earliest %d after deleting below 2", l.Offset)
	}
	if f := h.fetch("t", 0, 1, 0, 1); f.ErrorCode != kerr.OffsetOutOfRange.Code || f.LogStartOffset != 2 {
		t.Fatalf("fetch at 1: %+v", f)
	}
	if r := h.produceValue("d"); r.ErrorCode != 0 || r.LogStartOffset != 2 {
		t.Fatalf("produce after the delete: %+v", r)
	}
	h.stop()
	b, err := storage.OSFS{}.ReadFile(filepath.Join(partitionDir(topicsDir(dir), "t", 0), logStartName))
	if start, ok := decodeLogStart(b); err != nil || !ok || start != 2 {
		t.Fatalf("log-start-offset file: %d %v %v", start, ok, err)
	}
	h = newHarness(t, dir, nil)
	defer h.stop()
	if l := h.listOffset("t", 0, earliestTimestamp); l.Offset != 2 {
		t.Fatalf("earliest %d after a restart", l.Offset)
	}
	if bases, _, values := h.batchesFrom("t", 0, 2); len(bases) != 2 || values[0] != "c" {
		t.Fatalf("after a restart served %v at %v, want c, d", values, bases)
	}
}

// With produces acknowledged before their fsync (log.flush.interval.messages > 1), the
// active segment is made durable before a start past what is durable is recorded: a
// start is never past the log a restart recovers.
func TestDeleteRecordsSyncsTheLogFirst(t *testing.T) {
	dir := t.TempDir()
	fault := &pathFault{op: storage.OpSync, suffix: ".log"}
	h := newHarness(t, dir, func(c *Config) {
		c.Broker.LogFlushIntervalMessages = 1000
		c.FS = fault.faultFS()
	})
	defer h.stop()
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	for _, v := range []string{"a", "b"} {
		if r := h.produceValue(v); r.ErrorCode != 0 {
			t.Fatalf("produce %s: %+v", v, r)
		}
	}
	fault.armed.Store(1)
	if r := h.deleteRecords(-1); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("delete whose segment fsync failed: %+v", r)
	}
	if fault.failed.Load() != 1 {
		t.Fatal("no segment fsync before the start was recorded")
	}
	if r := h.deleteRecords(-1); r.ErrorCode != 0 || r.LowWatermark != 2 {
		t.Fatalf("delete to the high watermark: %+v", r)
	}
	if r := h.deleteRecords(3); r.ErrorCode != kerr.OffsetOutOfRange.Code || r.LowWatermark != -1 {
		t.Fatalf("delete past the high watermark: %+v", r)
	}
}
