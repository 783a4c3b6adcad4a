package offsets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

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
	if e, ok, err := readEpoch(storage.OSFS{}, filepath.Join(dir, FileName("g"))); err != nil || !ok || e != 2 {
		t.Fatalf("the group's epoch on disk %d (%v, %v), want the tombstone's 2", e, ok, err)
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

// badTomb writes group's tombstone in dir as content that is not a tombstone.
func badTomb(t *testing.T, dir, group string) string {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o700))
	path := filepath.Join(dir, TombstoneName(group))
	must(t, os.WriteFile(path, []byte(`{"version":1,"group":"`+group+`","epo`), 0o600))
	return path
}

// A deleted group's tombstone that cannot be read or understood keeps its fence: the
// group's actor in a cluster answers COORDINATOR_NOT_AVAILABLE, as for a file it cannot
// read, and logs it once, instead of taking it for no tombstone and writing the group
// again under an epoch below the deletion's. Once the tombstone is repaired the group
// goes on from its epoch.
func TestUnreadableTombstoneKeepsGroupUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool // the read fails (else the content is garbage)
	}{{"garbage", false}, {"read error", true}} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJournalHarness(t, "x", ckptNever)
			path := badTomb(t, j.dir, "g")
			if tc.fail {
				good, err := encodeTombstone("g", 5, time.Now())
				must(t, err)
				must(t, os.WriteFile(path, good, 0o600))
				j.failOn(storage.OpRead, func(p string) bool { return p == path })
			}
			pid, _ := gatedActor(j, "g")
			unavailable := []int16{kerr.CoordinatorNotAvailable.Code}
			if got := j.commitTo(pid, entry("t", 0, 7)); !slices.Equal(got, unavailable) {
				t.Fatalf("commit over an unreadable tombstone: %v, want %v", got, unavailable)
			}
			if got := j.commitTo(pid, entry("t", 0, 8)); !slices.Equal(got, unavailable) {
				t.Fatalf("second commit: %v", got)
			}
			lines := logLines(j.logs.String(), "offsets_file_unusable_group_unavailable_until_repaired")
			if len(lines) != 1 || !strings.Contains(lines[0], `"reason":"tombstone"`) || !strings.Contains(lines[0], TombstoneName("g")) {
				t.Fatalf("logged %d times, want once with reason tombstone and the file:\n%s", len(lines), j.logs)
			}
			if got := counterValue(j.metrics.loadFailures.WithLabelValues("tombstone")); got != 1 {
				t.Fatalf("load failures (tombstone) = %v, want 1", got)
			}
			if _, ok := groupFile(t, j.dir, "g"); ok {
				t.Fatal("a group file was written over an unreadable tombstone")
			}

			good, err := encodeTombstone("g", 5, time.Now())
			must(t, err)
			must(t, os.WriteFile(path, good, 0o600))
			j.advance(time.Minute) // past RetryLoadAfter
			if got := j.commitTo(pid, entry("t", 0, 9)); !codesOK(got) {
				t.Fatalf("commit after the repair: %v", got)
			}
			j.flushTo(pid)
			if s, ok := groupFile(t, j.dir, "g"); !ok || s.epoch <= 5 {
				t.Fatalf("file %v at epoch %d, want above the repaired tombstone's 5", ok, s.epoch)
			}
		})
	}
}

// A tombstone that becomes unreadable while its group, created again, waits for its first
// file keeps the file from being written (the journal keeps the records), logged once
// however many checkpoints try; once it reads again, the file is written.
func TestTombstoneUnreadableAfterLoadHoldsTheFile(t *testing.T) {
	j := newJournalHarness(t, "x", ckptNever)
	good, err := encodeTombstone("g", 5, time.Now())
	must(t, err)
	must(t, putTombstone(storage.OSFS{}, j.dir, FileName("g"), good))
	pid, _ := gatedActor(j, "g")
	if got := j.commitTo(pid, entry("t", 0, 7)); !codesOK(got) {
		t.Fatalf("commit: %v", got)
	}
	path := badTomb(t, j.dir, "g")
	for i := range 3 {
		if i > 0 {
			if got := j.commitTo(pid, entry("t", 0, int64(7+i))); !codesOK(got) {
				t.Fatalf("commit %d: %v", i, got)
			}
		}
		j.flushTo(pid)
	}
	if _, ok := groupFile(t, j.dir, "g"); ok {
		t.Fatal("the file was written over an unreadable tombstone")
	}
	lines := logLines(j.logs.String(), "offsets_tombstone_unreadable_file_not_written")
	if len(lines) != 1 || !strings.Contains(lines[0], TombstoneName("g")) {
		t.Fatalf("logged %d events naming the tombstone, want 1:\n%s", len(lines), j.logs)
	}
	must(t, os.WriteFile(path, good, 0o600))
	j.flushTo(pid)
	if s, ok := groupFile(t, j.dir, "g"); !ok || s.epoch <= 5 || s.offsets[TopicPartition{"t", 0}].Offset != 9 {
		t.Fatalf("file %v at epoch %d offsets %+v, want t-0=9 above epoch 5", ok, s.epoch, s.offsets)
	}
}

// logLines are the lines of logs whose message is msg.
func logLines(logs, msg string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"message":"`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// A replay, an adoption and the journal's own save of a group whose tombstone cannot be
// read leave the group alone and say so, each in one event naming the tombstone: taken
// for no tombstone, its records would bring the deleted group back.
func TestUnreadableTombstoneStopsReplayAdoptAndSave(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root)
	badTomb(t, dir, "g")
	writeJournal(t, JournalDir(root, 0), "g", 3, 10)
	var logs syncBuffer
	if _, err := Replay(ReplayConfig{FS: storage.OSFS{}, OffsetsDir: dir, JournalDir: JournalDir(root, 0), Log: zerolog.New(&logs)}); err != nil {
		t.Fatal(err)
	}
	if s, ok := groupFile(t, dir, "g"); ok {
		t.Fatalf("the replay wrote the group over its unreadable tombstone: %+v", s.offsets)
	}
	lines := logLines(logs.String(), "offsets_journal_records_not_applied_file_unusable")
	if len(lines) != 1 || !strings.Contains(lines[0], TombstoneName("g")) {
		t.Fatalf("replay logged %d events naming the tombstone, want 1:\n%s", len(lines), logs.String())
	}

	writeJournal(t, JournalDir(root, 1), "g", 3, 10)
	logs = syncBuffer{}
	n, err := Adopt(AdoptConfig{OffsetsDir: dir, JournalDirs: []string{JournalDir(root, 1)},
		Owns: func(string) bool { return true }, Log: zerolog.New(&logs)})
	if err != nil || n != 0 {
		t.Fatalf("adopt: %d groups, %v; want 0", n, err)
	}
	if _, ok := groupFile(t, dir, "g"); ok {
		t.Fatal("the adoption wrote the group over its unreadable tombstone")
	}
	lines = logLines(logs.String(), "offsets_group_not_adopted_file_unusable")
	if len(lines) != 1 || !strings.Contains(lines[0], TombstoneName("g")) {
		t.Fatalf("adopt logged %d events naming the tombstone, want 1:\n%s", len(lines), logs.String())
	}

	s := newState()
	s.epoch = 2
	s.offsets[TopicPartition{"t", 0}] = Committed{Offset: 1, LeaderEpoch: -1}
	data, err := encodeFile("g", s)
	must(t, err)
	if err := GroupFileSaver(storage.OSFS{}, dir)("g", data); err == nil || !strings.Contains(err.Error(), TombstoneName("g")) {
		t.Fatalf("save over an unreadable tombstone: %v, want an error naming it", err)
	}
	if _, ok := groupFile(t, dir, "g"); ok {
		t.Fatal("the journal's save wrote the group over its unreadable tombstone")
	}
}

// DropTombstones keeps a tombstone it cannot read or understand, drops the others, and
// reports the unreadable ones in its error (the groups manager logs it once a sweep).
func TestDropTombstonesReportsUnreadable(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	data, err := encodeTombstone("old", 3, now.Add(-48*time.Hour))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, TombstoneName("old")), data, 0o600))
	bad := badTomb(t, dir, "bad")
	other, err := encodeTombstone("someone-else", 3, now.Add(-48*time.Hour))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, TombstoneName("moved")), other, 0o600))

	n, err := DropTombstones(storage.OSFS{}, dir, now.Add(-24*time.Hour), nil)
	if n != 1 {
		t.Fatalf("dropped %d, want 1 (old)", n)
	}
	if err == nil || !strings.Contains(err.Error(), "2 unreadable") ||
		!strings.Contains(err.Error(), TombstoneName("bad")) && !strings.Contains(err.Error(), TombstoneName("moved")) {
		t.Fatalf("error %v, want the 2 unreadable tombstones reported, the first named", err)
	}
	for _, p := range []string{bad, filepath.Join(dir, TombstoneName("moved"))} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("unreadable tombstone %s not kept: %v", p, err)
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
