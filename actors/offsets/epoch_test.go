package offsets

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/storage"
)

// A stale owner — its group taken over by another broker, which wrote the file under a
// newer epoch — must not write the file back, and stops serving the group.
func TestStaleOwnerCheckpointRefused(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	pid, _ := gatedActor(j, "stale")
	if got := j.commitTo(pid, entry("t", 0, 5)); got[0] != 0 {
		t.Fatalf("commit: %v", got)
	}
	// Another broker takes the group over: its file, epoch 7, offset 9.
	st := newState()
	st.offsets[TopicPartition{Topic: "t", Partition: 0}] = Committed{Offset: 9, LeaderEpoch: -1}
	st.epoch = 7
	data, err := encodeFile("stale", st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteFileAtomic(storage.OSFS{}, j.dir, FileName("stale"), data); err != nil {
		t.Fatal(err)
	}
	// The stale actor's stop writes its file: refused.
	j.flushTo(pid)
	got, ok := groupFile(t, j.dir, "stale")
	if !ok || got.epoch != 7 || got.offsets[TopicPartition{Topic: "t", Partition: 0}].Offset != 9 {
		t.Fatalf("the newer owner's file was overwritten: epoch %d offsets %v", got.epoch, got.offsets)
	}
	if got := j.commitTo(pid, entry("t", 0, 6)); got[0] != kerr.CoordinatorNotAvailable.Code && got[0] != kerr.NotCoordinator.Code {
		t.Fatalf("a fenced actor answered a commit %v", got)
	}
}

// Once the gate closes (the lease lapsed), a batch made durable after it is not
// acknowledged.
func TestClosedGateRefusesAcknowledgement(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	pid, open := gatedActor(j, "gated")
	if got := j.commitTo(pid, entry("t", 0, 5)); got[0] != 0 {
		t.Fatalf("commit: %v", got)
	}
	open.Store(false)
	if got := j.commitTo(pid, entry("t", 0, 6)); got[0] != kerr.NotCoordinator.Code {
		t.Fatalf("commit after the gate closed: %v, want NOT_COORDINATOR", got)
	}
}

// A broker's own replay skips its records of a group that moved on to a newer epoch, so
// a returning broker never moves an offset back over its successor's commits.
func TestReplaySkipsRecordsOfOlderEpoch(t *testing.T) {
	root := t.TempDir()
	dir, jdir := Dir(root), JournalDir(root, 0)
	// The successor's file: epoch 3, offset 100.
	st := newState()
	st.offsets[TopicPartition{Topic: "t", Partition: 0}] = Committed{Offset: 100, LeaderEpoch: -1}
	st.epoch = 3
	data, _ := encodeFile("g", st)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName("g")), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// This broker's journal: a commit of offset 10 under epoch 2.
	writeJournal(t, jdir, "g", 2, 10)
	if _, err := Replay(ReplayConfig{FS: storage.OSFS{}, OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	got, _ := groupFile(t, dir, "g")
	if o := got.offsets[TopicPartition{Topic: "t", Partition: 0}].Offset; o != 100 {
		t.Fatalf("offset %d after replay, want the successor's 100", o)
	}
	// The same record under the file's epoch is applied.
	writeJournal(t, jdir, "g", 3, 120)
	if _, err := Replay(ReplayConfig{FS: storage.OSFS{}, OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	got, _ = groupFile(t, dir, "g")
	if o := got.offsets[TopicPartition{Topic: "t", Partition: 0}].Offset; o != 120 {
		t.Fatalf("offset %d after replay, want 120", o)
	}
}

// A replay whose records are all of an older epoch leaves the group's file alone: it
// is the current owner's to write, and a rewrite (even of the same bytes) can land over
// a checkpoint the owner writes in the meantime.
func TestReplayOfOnlyOlderEpochsWritesNothing(t *testing.T) {
	root := t.TempDir()
	dir, jdir := Dir(root), JournalDir(root, 0)
	st := newState()
	st.offsets[TopicPartition{Topic: "t", Partition: 0}] = Committed{Offset: 100, LeaderEpoch: -1}
	st.epoch = 3
	data, _ := encodeFile("g", st)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName("g")), data, 0o600); err != nil {
		t.Fatal(err)
	}
	writeJournal(t, jdir, "g", 2, 10)
	fsys := storage.NewFaultFS(nil)
	var writes []string
	fsys.SetBefore(func(op storage.Op, path string) error {
		if (op == storage.OpCreate || op == storage.OpRename || op == storage.OpRemove) && filepath.Dir(path) == dir {
			writes = append(writes, path)
		}
		return nil
	})
	if _, err := Replay(ReplayConfig{FS: fsys, OffsetsDir: dir, JournalDir: jdir, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if len(writes) > 0 {
		t.Fatalf("replay of older-epoch records wrote into the offsets dir: %v", writes)
	}
	got, _ := groupFile(t, dir, "g")
	if o := got.offsets[TopicPartition{Topic: "t", Partition: 0}].Offset; o != 100 || got.epoch != 3 {
		t.Fatalf("file holds offset %d epoch %d, want 100 at 3", o, got.epoch)
	}
}

// Adopt applies a peer's records at or above the file's epoch and writes the group
// under the next epoch; a group this broker does not own is left alone.
func TestAdoptPeerJournal(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root)
	writeJournal(t, JournalDir(root, 1), "mine", 0, 42)
	writeJournal(t, JournalDir(root, 2), "theirs", 0, 43)
	n, err := Adopt(AdoptConfig{OffsetsDir: dir, JournalDirs: []string{JournalDir(root, 1), JournalDir(root, 2)},
		Owns: func(g string) bool { return g == "mine" }, Log: zerolog.Nop()})
	if err != nil || n != 1 {
		t.Fatalf("adopt: %d groups, %v", n, err)
	}
	got, ok := groupFile(t, dir, "mine")
	if !ok || got.epoch != 1 || got.offsets[TopicPartition{Topic: "t", Partition: 0}].Offset != 42 {
		t.Fatalf("adopted file: %+v", got)
	}
	if _, ok := groupFile(t, dir, "theirs"); ok {
		t.Fatal("a group owned elsewhere was written")
	}
	// Again: the records are below the file's epoch now; nothing is written.
	if n, err := Adopt(AdoptConfig{OffsetsDir: dir, JournalDirs: []string{JournalDir(root, 1)},
		Owns: func(g string) bool { return g == "mine" }, Log: zerolog.Nop()}); err != nil || n != 0 {
		t.Fatalf("second adopt: %d groups, %v", n, err)
	}
}

// writeJournal writes a journal segment in dir holding one record: group's commit of
// offset at t/0 under epoch.
func writeJournal(t *testing.T, dir, group string, epoch uint64, offset int64) {
	t.Helper()
	rec, err := encodeRecord(group, epoch, []op{{Set: []fileOffset{{Topic: "t", Partition: 0, Offset: offset, LeaderEpoch: -1}}}})
	if err != nil {
		t.Fatal(err)
	}
	frame := journal.AppendRecord(journal.StartFrame(nil), rec)
	journal.FinishFrame(frame, 1)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, journal.SegmentName(1)), frame, 0o600); err != nil {
		t.Fatal(err)
	}
}

// gatedActor starts group's offsets actor on j's journal with a Gate the test opens and
// closes (open at first).
func gatedActor(j *journalHarness, group string) (*actor.PID, *atomic.Bool) {
	open := &atomic.Bool{}
	open.Store(true)
	cfg := j.cfg
	cfg.Group = group
	cfg.Gate = open.Load
	return j.sys.Spawn(Props(cfg)), open
}
