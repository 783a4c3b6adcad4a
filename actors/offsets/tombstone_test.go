package offsets

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/storage"
)

// A group deleted by its new owner while its former owner is down stays deleted when
// the former owner returns: its replay of its own journal, and another broker's adoption
// of that journal, skip the records below the tombstone's epoch. Without the tombstone
// the group came back with its old offsets.
func TestDeletedGroupStaysDeletedForFormerOwner(t *testing.T) {
	j := newJournalHarness(t, "x", ckptNever)
	former := JournalDir(j.root, 0)
	writeJournal(t, former, "g", 0, 10) // acknowledged by broker 0, which then died
	if n, err := Adopt(AdoptConfig{OffsetsDir: j.dir, JournalDirs: []string{former},
		Owns: func(g string) bool { return g == "g" }, Log: zerolog.Nop()}); err != nil || n != 1 {
		t.Fatalf("adopt: %d groups, %v", n, err)
	}
	pid, _ := gatedActor(j, "g")
	if f := j.fetchFrom(pid); f.Offsets[TopicPartition{"t", 0}].Offset != 10 {
		t.Fatalf("adopted group serves %+v, want t-0=10", f.Offsets)
	}
	if r := wait[*Result](t, j.sendTo(pid, func(p actor.Promise) any { return &DeleteAll{Reply: p} })); r.ErrorCode != 0 {
		t.Fatalf("delete: %d", r.ErrorCode)
	}
	j.flushTo(pid)
	if _, ok := groupFile(t, j.dir, "g"); ok {
		t.Fatal("the deleted group's file is still there")
	}
	tomb, err := os.ReadFile(filepath.Join(j.dir, TombstoneName("g")))
	if err != nil {
		t.Fatalf("no tombstone: %v", err)
	}
	if tf, err := decodeTombstone(tomb); err != nil || tf.Epoch < 2 || string(tf.Group) != "g" {
		t.Fatalf("tombstone %+v (%v), want group g at epoch 2 or more", tf, err)
	}
	if ids, err := ListGroupIDs(storage.OSFS{}, j.dir); err != nil || contains(ids, "g") {
		t.Fatalf("groups listed %v (%v): the tombstone is not a group", ids, err)
	}

	// A third broker adopting the former owner's journal: nothing to bring back.
	if n, err := Adopt(AdoptConfig{OffsetsDir: j.dir, JournalDirs: []string{former},
		Owns: func(g string) bool { return g == "g" }, Log: zerolog.Nop()}); err != nil || n != 0 {
		t.Fatalf("adopt after the delete: %d groups, %v", n, err)
	}
	// The former owner's own replay when it returns: nor here.
	if _, err := Replay(ReplayConfig{FS: storage.OSFS{}, OffsetsDir: j.dir, JournalDir: former, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if s, ok := groupFile(t, j.dir, "g"); ok {
		t.Fatalf("the deleted group came back from its former owner's journal: %+v", s.offsets)
	}

	// Created again, the group goes on from the tombstone's epoch, and the tombstone goes.
	if got := j.commitTo(pid, entry("t", 0, 3)); !codesOK(got) {
		t.Fatal(got)
	}
	j.flushTo(pid)
	s, ok := groupFile(t, j.dir, "g")
	if !ok || s.epoch < 2 || s.offsets[TopicPartition{"t", 0}].Offset != 3 {
		t.Fatalf("the group created again: %v epoch %d offsets %+v", ok, s.epoch, s.offsets)
	}
	if _, err := os.Stat(filepath.Join(j.dir, TombstoneName("g"))); !os.IsNotExist(err) {
		t.Fatalf("the tombstone outlived the group's new file: %v", err)
	}
}

// A group deleted under a peer (its journal ends in the deletion) gets a tombstone from
// the broker that adopts it, so a yet older owner's records of it stay dead too.
func TestAdoptOfDeletionLeavesTombstone(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root)
	writeJournal(t, JournalDir(root, 0), "g", 0, 10)
	commit, err := encodeRecord("g", 1, []op{{Set: []fileOffset{{Topic: "t", Partition: 0, Offset: 20, LeaderEpoch: -1}}}})
	if err != nil {
		t.Fatal(err)
	}
	clear, err := encodeRecord("g", 1, []op{{Clear: true}})
	if err != nil {
		t.Fatal(err)
	}
	frame := journal.AppendRecord(journal.AppendRecord(journal.StartFrame(nil), commit), clear)
	journal.FinishFrame(frame, 1)
	if err := os.MkdirAll(JournalDir(root, 2), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(JournalDir(root, 2), journal.SegmentName(1)), frame, 0o600); err != nil {
		t.Fatal(err)
	}
	owns := func(g string) bool { return g == "g" }
	if _, err := Adopt(AdoptConfig{OffsetsDir: dir, JournalDirs: []string{JournalDir(root, 0), JournalDir(root, 2)},
		Owns: owns, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if s, ok := groupFile(t, dir, "g"); ok {
		t.Fatalf("a deleted group adopted: %+v", s.offsets)
	}
	if e, ok := readEpoch(storage.OSFS{}, filepath.Join(dir, FileName("g"))); !ok || e != 2 {
		t.Fatalf("the group's epoch on disk %d (%v), want the tombstone's 2", e, ok)
	}
	if _, err := Replay(ReplayConfig{FS: storage.OSFS{}, OffsetsDir: dir, JournalDir: JournalDir(root, 0), Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if s, ok := groupFile(t, dir, "g"); ok {
		t.Fatalf("the oldest owner's replay brought the group back: %+v", s.offsets)
	}
}

// A group's epoch survives its deletion in memory too: a DeleteAll of a group that does
// not exist (nothing journaled) and a commit after it write the file under the epoch that
// follows the tombstone's, never under 0 or 1 where an older owner's records would count.
func TestEpochKeptOverDeleteOfMissingGroup(t *testing.T) {
	j := newJournalHarness(t, "x", ckptNever)
	data, err := encodeTombstone("g", 5, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := putTombstone(storage.OSFS{}, j.dir, FileName("g"), data); err != nil {
		t.Fatal(err)
	}
	pid, _ := gatedActor(j, "g")
	if r := wait[*Result](t, j.sendTo(pid, func(p actor.Promise) any { return &DeleteAll{Reply: p} })); r.ErrorCode != 0 {
		t.Fatalf("delete: %d", r.ErrorCode)
	}
	if got := j.commitTo(pid, entry("t", 0, 7)); !codesOK(got) {
		t.Fatal(got)
	}
	j.flushTo(pid)
	if s, ok := groupFile(t, j.dir, "g"); !ok || s.epoch <= 5 {
		t.Fatalf("file %v at epoch %d, want above the tombstone's 5", ok, s.epoch)
	}
}

// On a single broker (no gate, epoch 0) a deleted group leaves no tombstone.
func TestSingleBrokerDeleteLeavesNoTombstone(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	if r := wait[*Result](t, j.sendTo(j.pid, func(p actor.Promise) any { return &DeleteAll{Reply: p} })); r.ErrorCode != 0 {
		t.Fatalf("delete: %d", r.ErrorCode)
	}
	j.flushTo(j.pid)
	names, _ := os.ReadDir(j.dir)
	for _, n := range names {
		t.Errorf("left in the offsets dir: %s", n.Name())
	}
}

// DropTombstones removes the old tombstones of owned groups only.
func TestDropTombstones(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for _, g := range []struct {
		id  string
		age time.Duration
	}{{"old", 48 * time.Hour}, {"young", time.Hour}, {"theirs", 48 * time.Hour}} {
		data, err := encodeTombstone(g.id, 3, now.Add(-g.age))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, TombstoneName(g.id)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := DropTombstones(storage.OSFS{}, dir, now.Add(-24*time.Hour), func(g string) bool { return g != "theirs" })
	if err != nil || n != 1 {
		t.Fatalf("dropped %d, %v; want 1", n, err)
	}
	for id, want := range map[string]bool{"old": false, "young": true, "theirs": true} {
		_, err := os.Stat(filepath.Join(dir, TombstoneName(id)))
		if got := err == nil; got != want {
			t.Errorf("tombstone of %s kept %v, want %v", id, got, want)
		}
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// A tombstone is read from a shared volume a crash or another broker may have left in
// any state: decoding never panics, and what decodes encodes back to the same tombstone.
func FuzzDecodeTombstone(f *testing.F) {
	good, _ := encodeTombstone("g", 3, time.UnixMilli(1_700_000_000_000))
	f.Add(good)
	f.Add([]byte(`{"version":1,"group":{"base64":"/w=="},"epoch":1,"deleted_ms":1}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := decodeTombstone(b)
		if err != nil {
			return
		}
		again, err := encodeTombstone(string(tf.Group), tf.Epoch, time.UnixMilli(tf.DeletedMs))
		if err != nil {
			t.Fatalf("a decoded tombstone does not encode: %v", err)
		}
		back, err := decodeTombstone(again)
		if err != nil || back != tf {
			t.Fatalf("round trip: %+v → %+v (%v)", tf, back, err)
		}
	})
}
