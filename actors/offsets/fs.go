package offsets

import "kaas/storage"

// GroupFileSaver is JournalConfig.Save for the group files in dir: it writes data (a
// group file's content, as an Unsaved carries it) as group's file durably, or removes
// the file when data is nil, creating dir if it is missing.
func GroupFileSaver(fsys storage.FS, dir string) func(group string, data []byte) error {
	return func(group string, data []byte) error { return saveGroupData(fsys, dir, FileName(group), data) }
}

// saveGroupData makes data the content of dir/name durably (removes the file when data
// is nil), creating dir if it is missing.
func saveGroupData(fsys storage.FS, dir, name string, data []byte) error {
	if data == nil {
		return storage.RemoveDurably(fsys, dir, name)
	}
	// The directory may have just been made: its entry must be durable too.
	if err := storage.MkdirDurably(fsys, dir); err != nil {
		return err
	}
	return storage.WriteFileAtomic(fsys, dir, name, data)
}

// newUnsaved is the Unsaved of group's state s, its records up to seq in the journal.
func newUnsaved(group string, s state, exists bool, seq uint64) (*Unsaved, error) {
	u := &Unsaved{Group: group, Seq: seq}
	if exists {
		data, err := encodeFile(group, s)
		if err != nil {
			return nil, err
		}
		u.Data = data
	}
	return u, nil
}

// unsavedState is the state an Unsaved carries.
func unsavedState(u *Unsaved) (s state, exists bool, err error) {
	if u.Data == nil {
		return newState(), false, nil
	}
	_, s, err = decodeFile(u.Data)
	return s, err == nil, err
}
