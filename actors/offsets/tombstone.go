package offsets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"kaas/logs"
	"kaas/storage"
)

// Tombstones. In a cluster a group that ceases to exist (DeleteGroups, or an Empty group
// whose offsets all expired) may still have records in the journal of a broker that
// coordinated it before, under an older ownership epoch: a broker that is down, or merely
// paused. With the group file simply removed, that broker's replay when it returns (or
// another broker's Adopt of its journal) would find no epoch to compare its records with
// and bring the deleted group back. So a group of a non-zero epoch leaves a tombstone
// beside where its file was, "<encoded id>.del":
//
//	{"version":1,"group":"orders-app","epoch":4,"deleted_ms":1764806400000}
//
// Readers of a group's epoch (replay, Adopt, a checkpoint's newer-epoch check, the
// offsets actor's load) take the tombstone's when there is no file; everything that
// lists or reads groups ignores it. A group created again is written under an epoch at
// least the tombstone's, and its tombstone is then removed. Tombstones are dropped by the
// owner's retention sweep once older than offsets.retention.minutes: a journal record
// older than that would have expired anyway (the returning broker's own sweep removes a
// group it brings back from such records). A group that never moved (epoch 0, a single
// broker) leaves none: only its own journal can hold its records, and the deletion is
// journaled after them.
const tombSuffix = ".del"

// TombstoneName is the file name (no directory) of the group's tombstone.
func TombstoneName(group string) string { return encodeID(group) + tombSuffix }

// tombPath is the tombstone path beside the group file at path.
func tombPath(path string) string { return strings.TrimSuffix(path, fileSuffix) + tombSuffix }

type tombFile struct {
	Version   int        `json:"version"`
	Group     jsonString `json:"group"`
	Epoch     uint64     `json:"epoch"`
	DeletedMs int64      `json:"deleted_ms"`
}

// encodeTombstone is the content of group's tombstone.
func encodeTombstone(group string, epoch uint64, deleted time.Time) ([]byte, error) {
	b, err := json.Marshal(tombFile{Version: 1, Group: jsonString(group), Epoch: epoch, DeletedMs: deleted.UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("encode tombstone: %w", err)
	}
	return append(b, '\n'), nil
}

// isTombstone tells a tombstone's content from a group file's (a journal.Unsaved
// carries either).
func isTombstone(b []byte) bool { return bytes.Contains(b, []byte(`"deleted_ms":`)) }

func decodeTombstone(b []byte) (tombFile, error) {
	var t tombFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return tombFile{}, fmt.Errorf("decode tombstone: %w", err)
	}
	if t.Version != 1 {
		return tombFile{}, fmt.Errorf("decode tombstone: version %d, this broker reads 1", t.Version)
	}
	return t, nil
}

// readTombEpoch is the epoch of the tombstone beside the group file at path (false: no
// tombstone). A tombstone that cannot be read or understood is an error, never taken
// for no tombstone: it fences a deleted group's older records, and its readers keep
// that fence (they refuse to serve, write or replay the group) until it is repaired.
func readTombEpoch(fsys storage.FS, path string) (uint64, bool, error) {
	tp := tombPath(path)
	b, err := fsys.ReadFile(tp)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read tombstone %s: %w", tp, err)
	}
	t, err := decodeTombstone(b)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", tp, err)
	}
	return t.Epoch, true, nil
}

// putTombstone makes data (a tombstone) durable beside the group file name in dir, then
// removes the file durably: there is never a moment with neither on disk.
func putTombstone(fsys storage.FS, dir, name string, data []byte) error {
	if err := storage.MkdirDurably(fsys, dir); err != nil {
		return err
	}
	if err := storage.WriteFileAtomic(fsys, dir, strings.TrimSuffix(name, fileSuffix)+tombSuffix, data); err != nil {
		return err
	}
	return storage.RemoveDurably(fsys, dir, name)
}

// UnreadableTombstones is DropTombstones' error for the tombstones it could not read or
// understand: they are kept (a tombstone fences a deleted group's older records), and
// the others were still dropped.
type UnreadableTombstones struct {
	Count int
	First string // the path of the first one
	Err   error  // why the first one could not be read
}

func (u *UnreadableTombstones) Error() string {
	return fmt.Sprintf("%d unreadable tombstones kept, the first %s: %v", u.Count, u.First, u.Err)
}

func (u *UnreadableTombstones) Unwrap() error { return u.Err }

// DropTombstones removes the tombstones in dir of the groups owns says this broker
// serves (nil: all) that are older than before, and returns how many it removed. It runs
// off the actors (the groups manager's retention sweep); a group written again meanwhile
// has removed its own. A tombstone it cannot read or understand is kept and the sweep
// goes on; they are reported together, as an *UnreadableTombstones.
func DropTombstones(fsys storage.FS, dir string, before time.Time, owns func(string) bool) (int, error) {
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	n := 0
	var bad *UnreadableTombstones
	unreadable := func(path string, err error) {
		if bad == nil {
			bad = &UnreadableTombstones{First: path, Err: err}
		}
		bad.Count++
	}
	for _, name := range names {
		if !strings.HasSuffix(name, tombSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := fsys.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing: its group was written again
		}
		if err != nil {
			unreadable(path, err)
			continue
		}
		t, err := decodeTombstone(b)
		if err != nil {
			unreadable(path, err)
			continue
		}
		if TombstoneName(string(t.Group)) != name {
			unreadable(path, fmt.Errorf("holds group %q", logs.ID(string(t.Group))))
			continue
		}
		if t.DeletedMs >= before.UnixMilli() {
			continue
		}
		if owns != nil && !owns(string(t.Group)) {
			continue
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("remove tombstone %s: %w", path, err)
		}
		n++
	}
	if bad != nil {
		return n, bad
	}
	return n, nil
}
