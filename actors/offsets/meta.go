package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"kaas/storage"
)

// ReadMeta reads the group meta kept in group's file under dir, for a group whose actor
// is not running: ListGroups shows a former consumer group as "consumer" also right after
// a restart. ok is false when the group has no file. It only reads; the group's own actor
// owns the file.
func ReadMeta(fsys storage.FS, dir, group string) (meta GroupMeta, ok bool, err error) {
	path := filepath.Join(dir, FileName(group))
	b, err := fsys.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return GroupMeta{}, false, nil
	}
	if err != nil {
		return GroupMeta{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	id, st, err := decodeFile(b)
	if err != nil {
		return GroupMeta{}, false, fmt.Errorf("%s: %w", path, err)
	}
	if id != group {
		return GroupMeta{}, false, fmt.Errorf("%s: holds group %q", path, id)
	}
	return st.meta, true, nil
}
