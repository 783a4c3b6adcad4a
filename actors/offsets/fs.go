package offsets

import "kaas/storage"

// saveGroupFile makes s, group's state, the content of dir/name durably (removes the file
// when the group has nothing to keep), creating dir if it is missing.
func saveGroupFile(fsys storage.FS, dir, name, group string, s state, exists bool) error {
	if !exists {
		return storage.RemoveDurably(fsys, dir, name)
	}
	// The directory may have just been made: its entry must be durable too.
	if err := storage.MkdirDurably(fsys, dir); err != nil {
		return err
	}
	data, err := encodeFile(group, s)
	if err != nil {
		return err
	}
	return storage.WriteFileAtomic(fsys, dir, name, data)
}
