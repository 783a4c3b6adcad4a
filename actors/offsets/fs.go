package offsets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
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

// GroupFilesSaver is the offsets journal's Config.SaveMany: it writes several groups'
// files as GroupFileSaver does each (under the file's lock, never over the file of a
// newer epoch), without an fsync each, then makes them durable together with one
// syncfs (storage.SyncWritten). errs[i] is the outcome of groups[i]; a failed sync fails
// every group it was to make durable.
func GroupFilesSaver(fsys storage.FS, dir string) func(groups []string, data [][]byte) []error {
	return func(groups []string, data [][]byte) []error {
		errs := make([]error, len(groups))
		if err := storage.MkdirDurably(fsys, dir); err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		var written []string
		wrote := make([]bool, len(groups))
		for i, g := range groups {
			wrote[i], errs[i] = saveUnsynced(fsys, dir, g, data[i], &written)
		}
		if len(written) == 0 {
			return errs
		}
		if err := storage.SyncWritten(fsys, dir, written); err != nil {
			for i := range errs {
				if wrote[i] {
					errs[i] = err
				}
			}
		}
		return errs
	}
}

// saveUnsynced is one group's write of GroupFilesSaver; wrote says whether it left
// something (added to written) to make durable.
func saveUnsynced(fsys storage.FS, dir, group string, data []byte, written *[]string) (wrote bool, err error) {
	name := FileName(group)
	path := filepath.Join(dir, name)
	lock := fileLock(path)
	lock <- struct{}{}
	defer func() { <-lock }()
	if mine, ok := epochOf(data); ok {
		disk, ok, err := readEpoch(fsys, path)
		if err != nil {
			return false, err
		}
		if ok && disk > mine {
			return false, nil
		}
	}
	switch {
	case data == nil:
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove %s: %w", path, err)
		}
		*written = append(*written, "")
	case isTombstone(data):
		if err := storage.WriteFileUnsynced(fsys, dir, TombstoneName(group), data); err != nil {
			return false, err
		}
		*written = append(*written, tombPath(path))
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true, fmt.Errorf("remove %s: %w", path, err)
		}
	default:
		if err := storage.WriteFileUnsynced(fsys, dir, name, data); err != nil {
			return false, err
		}
		*written = append(*written, path)
	}
	return true, nil
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

// behindUnsavedLazy is the Unsaved the replay leaves for group (ReplayConfig.Behind):
// its state, made by make the first time its bytes are needed (once, whoever asks), and
// encoded then (journal.Unsaved.Encode). exists and epoch are the state's.
func behindUnsavedLazy(group string, exists bool, epoch, seq uint64, make func() (state, error)) *journal.Unsaved {
	at := time.Now()
	u := &journal.Unsaved{Key: group, Seq: seq, Replayed: true}
	switch {
	case exists:
		var once sync.Once
		var s state
		var err error
		u.Encode = func() ([]byte, error) {
			once.Do(func() { s, err = make() })
			if err != nil {
				return nil, err
			}
			return encodeFile(group, s)
		}
	case epoch > 0:
		u.Encode = func() ([]byte, error) { return encodeTombstone(group, epoch, at) }
	}
	return u
}

// unsavedState is the state an Unsaved carries.
func unsavedState(u *journal.Unsaved) (s state, exists bool, err error) {
	data, err := u.Bytes()
	if err != nil {
		return newState(), false, err
	}
	if data == nil {
		return newState(), false, nil
	}
	if isTombstone(data) {
		t, err := decodeTombstone(data)
		s = newState()
		s.epoch = t.Epoch
		return s, false, err
	}
	_, s, err = decodeFile(data)
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
