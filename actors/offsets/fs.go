package offsets

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"kaas/actors/journal"
	"kaas/storage"
)

// GroupFileSaver is journal.Config.Save for the group files in dir: it writes data (a
// group file's content, as a journal.Unsaved carries it) as group's file durably, or
// removes the file when data is nil, creating dir if it is missing.
func GroupFileSaver(fsys storage.FS, dir string) func(group string, data []byte) error {
	return func(group string, data []byte) error {
		lock := fileLock(filepath.Join(dir, FileName(group)))
		lock <- struct{}{}
		defer func() { <-lock }()
		// A state left with the journal by an earlier owner never goes over the file of
		// a newer one (the group moved: its new owner replayed this journal).
		if mine, ok := epochOf(data); ok {
			disk, ok, err := readEpoch(fsys, filepath.Join(dir, FileName(group)))
			if err != nil {
				// Whether a newer owner deleted the group is unknown: the state stays
				// with the journal (which logs this and tries again) rather than bring
				// the group back over its tombstone.
				return err
			}
			if ok && disk > mine {
				return nil
			}
		}
		return saveGroupData(fsys, dir, FileName(group), data)
	}
}

// saveGroupData makes data the content of dir/name durably (removes the file when data
// is nil), creating dir if it is missing.
func saveGroupData(fsys storage.FS, dir, name string, data []byte) error {
	if data == nil {
		return storage.RemoveDurably(fsys, dir, name)
	}
	if isTombstone(data) {
		return putTombstone(fsys, dir, name, data)
	}
	// The directory may have just been made: its entry must be durable too.
	if err := storage.MkdirDurably(fsys, dir); err != nil {
		return err
	}
	return storage.WriteFileAtomic(fsys, dir, name, data)
}

// newUnsaved is the Unsaved of group's state s, its records up to seq in the journal.
func newUnsaved(group string, s state, exists bool, seq uint64) (*journal.Unsaved, error) {
	u := &journal.Unsaved{Key: group, Seq: seq}
	switch {
	case exists:
		data, err := encodeFile(group, s)
		if err != nil {
			return nil, err
		}
		u.Data = data
	case s.epoch > 0:
		data, err := encodeTombstone(group, s.epoch, time.Now())
		if err != nil {
			return nil, err
		}
		u.Data = data
	}
	return u, nil
}

// unsavedState is the state an Unsaved carries.
func unsavedState(u *journal.Unsaved) (s state, exists bool, err error) {
	if u.Data == nil {
		return newState(), false, nil
	}
	if isTombstone(u.Data) {
		t, err := decodeTombstone(u.Data)
		s = newState()
		s.epoch = t.Epoch
		return s, false, err
	}
	_, s, err = decodeFile(u.Data)
	return s, err == nil, err
}

// readEpoch reads the ownership epoch of the group file at path (false: no file, or
// not readable as one; its actor's load reports such a file). With no file, it is the
// epoch of the group's tombstone, and a tombstone that cannot be read is an error.
func readEpoch(fsys storage.FS, path string) (uint64, bool, error) {
	b, err := fsys.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return readTombEpoch(fsys, path) // a deleted group's epoch stays in its tombstone
	}
	if err != nil {
		return 0, false, nil
	}
	e, ok := epochOf(b)
	return e, ok, nil
}

// epochOf is the ownership epoch in a group file's content.
func epochOf(b []byte) (uint64, bool) {
	if b == nil {
		return 0, false
	}
	var f struct {
		Epoch uint64 `json:"epoch"`
	}
	if json.Unmarshal(b, &f) != nil {
		return 0, false
	}
	return f.Epoch, true
}
