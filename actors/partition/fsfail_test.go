package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/internal/testwait"
	"kaas/storage"
)

// pathFault fails the step op of the files whose name ends in suffix, as many times as
// armed says (-1: every time), and counts the steps it failed. A failed write writes half
// its buffer first (storage.FaultFS), as a full disk would.
type pathFault struct {
	op     storage.Op
	suffix string
	armed  atomic.Int32
	failed atomic.Int32
}

func (f *pathFault) before(op storage.Op, path string) error {
	if op != f.op || !strings.HasSuffix(path, f.suffix) {
		return nil
	}
	for {
		n := f.armed.Load()
		if n == 0 {
			return nil
		}
		if n < 0 || f.armed.CompareAndSwap(n, n-1) {
			break
		}
	}
	f.failed.Add(1)
	return errors.New("injected " + string(op) + " fault")
}

// faultFS is a FaultFS that fails what f says.
func (f *pathFault) faultFS() *storage.FaultFS {
	fsys := storage.NewFaultFS(nil)
	fsys.SetBefore(f.before)
	return fsys
}

// values are the first record values of every batch of topic t's partition 0, and the
// batches' base offsets.
func (h *harness) values() ([]int64, []string) {
	h.t.Helper()
	bases, _, values := h.batchesFrom("t", 0, 0)
	return bases, values
}

func (h *harness) produceValue(value string) *Produced {
	h.t.Helper()
	return h.produce("t", 0, testBatch(-1, -1, -1, 1, 1000, []byte(value)))
}

// A segment write that fails (half the batch written, as a full disk does) answers the
// produce KAFKA_STORAGE_ERROR and takes no offset: the next batch gets the offset the
// failed one would have had, and the log holds exactly the acknowledged batches, served
// so and found so again after a restart.
func TestSegmentWriteFaultIsNotAcknowledged(t *testing.T) {
	dir := t.TempDir()
	fault := &pathFault{op: storage.OpWrite, suffix: ".log"}
	h := newHarness(t, dir, func(c *Config) { c.FS = fault.faultFS() })
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceValue("a"); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	fault.armed.Store(1)
	if r := h.produceValue("b"); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce under a failed segment write: %+v, want KAFKA_STORAGE_ERROR", r)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d segment writes failed, want 1: the write did not go through storage.FS", n)
	}
	if r := h.produceValue("c"); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("produce after the failed write: %+v, want offset 1", r)
	}
	if bases, values := h.values(); !slices.Equal(bases, []int64{0, 1}) || !slices.Equal(values, []string{"a", "c"}) {
		t.Fatalf("served %v at %v, want a, c at 0, 1", values, bases)
	}
	h.stop()

	h = newHarness(t, dir, nil)
	defer h.stop()
	if bases, values := h.values(); !slices.Equal(bases, []int64{0, 1}) || !slices.Equal(values, []string{"a", "c"}) {
		t.Fatalf("after a restart served %v at %v, want a, c at 0, 1", values, bases)
	}
	if r := h.produceValue("d"); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("produce after the restart: %+v, want offset 2", r)
	}
}

// A segment roll that cannot create the new segment answers the produce that needed it
// KAFKA_STORAGE_ERROR; the next produce rolls and is acknowledged, and nothing
// acknowledged is lost.
func TestSegmentRollFaultIsNotAcknowledged(t *testing.T) {
	dir := t.TempDir()
	fault := &pathFault{op: storage.OpCreate, suffix: ".log"}
	h := newHarness(t, dir, func(c *Config) {
		c.FS = fault.faultFS()
		c.Broker.LogSegmentBytes = 1 // every batch but a segment's first rolls
	})
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceValue("a"); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	fault.armed.Store(1)
	if r := h.produceValue("b"); r.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce under a failed roll: %+v, want KAFKA_STORAGE_ERROR", r)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d segment creations failed, want 1: the roll did not go through storage.FS", n)
	}
	if r := h.produceValue("c"); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("produce after the failed roll: %+v, want offset 1", r)
	}
	h.stop()
	h = newHarness(t, dir, nil)
	defer h.stop()
	if bases, values := h.values(); !slices.Equal(bases, []int64{0, 1}) || !slices.Equal(values, []string{"a", "c"}) {
		t.Fatalf("after a restart served %v at %v, want a, c at 0, 1", values, bases)
	}
}

// A segment read that fails answers the fetch KAFKA_STORAGE_ERROR (retriable) and changes
// nothing: the next fetch reads the batch.
func TestSegmentReadFaultIsAFetchError(t *testing.T) {
	fault := &pathFault{op: storage.OpRead, suffix: ".log"}
	h := newHarness(t, t.TempDir(), func(c *Config) { c.FS = fault.faultFS() })
	defer h.stop()
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceValue("a"); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	fault.armed.Store(1)
	if f := h.fetch("t", 0, 0, 0, 1); f.ErrorCode != kerr.KafkaStorageError.Code || len(f.Records) != 0 {
		t.Fatalf("fetch under a failed read: error %d with %d bytes, want KAFKA_STORAGE_ERROR", f.ErrorCode, len(f.Records))
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d segment reads failed, want 1: the read did not go through storage.FS", n)
	}
	if _, values := h.values(); !slices.Equal(values, []string{"a"}) {
		t.Fatalf("served %v after the failed read, want a", values)
	}
}

// The recovery point is rewritten without an fsync after each fsync of the log, and a
// write of it that fails is only a Warn (recovery.go): the produce its fsync covered is
// acknowledged, the file keeps an older point (or a torn one, which reads as none), and a
// restart recovers every acknowledged batch.
func TestRecoveryPointWriteFaultLeavesAnOlderPoint(t *testing.T) {
	dir := t.TempDir()
	fault := &pathFault{op: storage.OpWrite, suffix: recoveryPointName}
	logs := &eventLog{}
	h := newHarness(t, dir, func(c *Config) {
		c.FS = fault.faultFS()
		c.Log = zerolog.New(logs)
	})
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceValue("a"); r.ErrorCode != 0 {
		t.Fatalf("first produce: %+v", r)
	}
	fault.armed.Store(-1) // every write of it from now on, the clean close's too
	if r := h.produceValue("b"); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("produce whose recovery point write failed: %+v, want acknowledged at 1", r)
	}
	h.stop()
	if fault.failed.Load() == 0 {
		t.Fatal("no recovery point write failed: it did not go through storage.FS")
	}
	if evs := logs.events(t, "partition_recovery_point_write_failed"); len(evs) == 0 {
		t.Fatal("the failed recovery point write was not logged")
	}
	pdir := partitionDir(topicsDir(dir), "t", 0)
	if off, ok, err := readRecoveryPoint(storage.OSFS{}, pdir); err != nil || (ok && off >= 2) {
		t.Fatalf("recovery point %d (usable %v, %v) after its writes failed, want one older than 2", off, ok, err)
	}
	h = newHarness(t, dir, nil)
	defer h.stop()
	if bases, values := h.values(); !slices.Equal(bases, []int64{0, 1}) || !slices.Equal(values, []string{"a", "b"}) {
		t.Fatalf("after a restart served %v at %v, want a, b at 0, 1", values, bases)
	}
	if off, ok, err := readRecoveryPoint(storage.OSFS{}, pdir); err != nil || !ok || off != 2 {
		t.Fatalf("recovery point %d (usable %v, %v) after the restart, want 2", off, ok, err)
	}
}

// A leader-epoch file that cannot be read is rebuilt from the batches (epochs.go), as
// one that cannot be decoded is: the partition opens and serves.
func TestLeaderEpochFileReadFaultRebuildsIt(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, nil)
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	h.stop()
	pdir := partitionDir(topicsDir(dir), "t", 0)
	writeEpochs567(t, pdir)
	writeEntries(t, pdir, goodEpochs567)

	fault := &pathFault{op: storage.OpRead, suffix: epochsName}
	fault.armed.Store(1)
	logs := &eventLog{}
	h = newHarness(t, dir, func(c *Config) {
		c.FS = fault.faultFS()
		c.Log = zerolog.New(logs)
	})
	defer h.stop()
	if r := h.produceValue("new"); r.ErrorCode != 0 || r.BaseOffset != 9 {
		t.Fatalf("produce after the restart: %+v, want offset 9", r)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d leader-epoch file reads failed, want 1: the read did not go through storage.FS", n)
	}
	evs := logs.events(t, "partition_leader_epochs_rebuilt")
	if len(evs) != 1 || evs[0]["reason"] != "unreadable" {
		t.Fatalf("partition_leader_epochs_rebuilt: %v, want once with reason unreadable", evs)
	}
	entries, err := readEpochs(storage.OSFS{}, pdir)
	if err != nil || len(entries) == 0 || entries[len(entries)-1].Epoch != 7 {
		t.Fatalf("rebuilt leader-epoch file %+v (%v), want it to end at epoch 7", entries, err)
	}
}

// In a cluster a leader writes its new epoch before it appends under it; a write of the
// leader-epoch file that fails leaves the partition answering NOT_LEADER_OR_FOLLOWER and
// is tried again like a lock held elsewhere, and the partition leads once it succeeds.
func TestLeaderEpochFileWriteFaultIsRetried(t *testing.T) {
	fault := &pathFault{op: storage.OpSync, suffix: epochsName + storage.TmpSuffix}
	dir := leadsAfterTwoFaults(t, fault, "partition_leader_epoch_write_failed")
	pdir := partitionDir(topicsDir(dir), "t", 0)
	entries, err := readEpochs(storage.OSFS{}, pdir)
	if err != nil || len(entries) != 1 || entries[0].Broker != 0 {
		t.Fatalf("leader-epoch file %+v (%v), want the epoch this broker began", entries, err)
	}
}

// A log that cannot be opened (here: the fsync of its newest segment that recovery makes
// fails) answers KAFKA_STORAGE_ERROR and is opened again after a wait, without a restart:
// the partition then serves every batch it had and takes new ones.
func TestPartitionOpenFaultIsRetried(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, nil)
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceValue("a"); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	h.stop()

	fault := &pathFault{op: storage.OpSync, suffix: ".log"}
	fault.armed.Store(1)
	logs := &eventLog{}
	h = newHarness(t, dir, func(c *Config) {
		c.FS = fault.faultFS()
		c.Log = zerolog.New(logs)
	})
	defer h.stop()
	var r *Produced
	testwait.For(t, 10*time.Second, 5*time.Millisecond, func() error {
		if r = h.produceValue("b"); r.ErrorCode == kerr.KafkaStorageError.Code {
			return fmt.Errorf("produce after the failed open: %+v, want offset 1", r)
		}
		return nil
	})
	if r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("produce after the failed open: %+v, want offset 1", r)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d segment fsyncs failed, want 1", n)
	}
	if evs := logs.events(t, "partition_open_failed"); len(evs) != 1 {
		t.Fatalf("partition_open_failed logged %d times, want once", len(evs))
	}
	if _, values := h.values(); !slices.Equal(values, []string{"a", "b"}) {
		t.Fatalf("served %v, want a, b", values)
	}
}

// A leader whose lock file cannot be made to name it (the holder's id write fails) lets
// the lock go and takes it again, so a lock is held only while it names its holder. Kept
// unnamed, a successor finding it held by a broker paused past its lease could not tell
// whose lease to watch, and waited for the whole pause (the cluster chaos run, seed 101:
// a partition served by nobody for over 60 s). Before, the failure was not even logged.
func TestLeaderLockNamesItsHolder(t *testing.T) {
	fault := &pathFault{op: storage.OpWrite, suffix: "leader.lock"}
	dir := leadsAfterTwoFaults(t, fault, "partition_leader_lock_holder_write_failed")
	b, err := os.ReadFile(filepath.Join(partitionDir(topicsDir(dir), "t", 0), "leader.lock"))
	if err != nil || string(b) != "0" {
		t.Fatalf("leader.lock holds %q (%v), want the holder's id 0", b, err)
	}
}

// leadsAfterTwoFaults has broker 0 of a cluster lead a new one-partition topic "t" while
// fault fails its first two steps: each failure is logged as event and tried again, and
// the partition then leads and takes a produce at offset 0. It returns the data dir.
func leadsAfterTwoFaults(t *testing.T, fault *pathFault, event string) string {
	t.Helper()
	fault.armed.Store(2)
	logs := &eventLog{}
	var leader atomic.Int32
	dir := t.TempDir()
	h := newHarness(t, dir, func(c *Config) {
		asBroker(0, &leader, nil)(c)
		c.FS = fault.faultFS()
		c.Log = zerolog.New(logs)
	})
	defer h.stop()
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produceOnceLed("t", 0, []byte("a")); r.BaseOffset != 0 {
		t.Fatalf("produce once the partition leads: %+v", r)
	}
	if n := fault.failed.Load(); n != 2 {
		t.Fatalf("%d %s steps failed, want 2", n, fault.op)
	}
	if evs := logs.events(t, event); len(evs) != 2 {
		t.Fatalf("%s logged %d times, want 2", event, len(evs))
	}
	return dir
}
