package offsets

import (
	"os"
	"path/filepath"
	"testing"

	"kaas/actors/journal"
	"kaas/storage"
)

// Fresh answers true only for a group with no file, tombstone or leftover tmp file in
// the directory, nothing left to the journal by the start's replay, and no earlier
// Take; and only once.
func TestFreshKnowsEveryGroupWithState(t *testing.T) {
	dir := t.TempDir()
	long := string(make([]byte, 300)) // a hashed file name
	for _, name := range []string{
		FileName("file"), FileName("tmp-only") + tmpSuffix, TombstoneName("deleted"),
		TombstoneName("deleted-tmp") + tmpSuffix, FileName(long), "stray.txt",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec := &journal.Recovered{
		Unsaved: []*journal.Unsaved{{Key: "behind"}},
		Held:    map[string][]string{"held": {"marker"}},
		Kept:    []journal.KeptSegment{{Name: "1.log", Keys: map[string]uint64{"pinned": 1}}},
	}
	f, err := NewFresh(storage.OSFS{}, dir, rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"file", "tmp-only", "deleted", "deleted-tmp", long, "behind", "held", "pinned"} {
		if f.Take(g) {
			t.Errorf("group %.20q has state, taken as new", g)
		}
	}
	for _, g := range []string{"new", "New", "", "stray", "file2"} {
		if !f.Take(g) {
			t.Errorf("group %q has no state, not taken as new", g)
		}
		if f.Take(g) {
			t.Errorf("group %q taken as new twice", g)
		}
	}
	// A directory that is not there yet: every group is new once.
	f, err = NewFresh(storage.OSFS{}, filepath.Join(dir, "none"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Take("file") || f.Take("file") {
		t.Error("with no directory, a group is new once")
	}
	var none *Fresh
	if none.Take("x") {
		t.Error("a nil Fresh takes no group as new")
	}
}

// A Fresh that remembers maxFresh groups takes no more as new.
func TestFreshFull(t *testing.T) {
	f, err := NewFresh(storage.OSFS{}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.full = true
	if f.Take("a") {
		t.Fatal("a full Fresh took a group as new")
	}
}
