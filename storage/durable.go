package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// TmpSuffix ends the name of a file being written by WriteFileAtomic; a leftover (a crash
// mid-write) is never read as data and is removed by whoever loads the directory.
const TmpSuffix = ".tmp"

// WriteFileAtomic makes data the content of dir/name durably: it writes name.tmp, fsyncs
// it, renames it over name and fsyncs dir. On any failure the tmp file is removed (best
// effort; a leftover is cleaned at the next load) and name is either its old content or,
// when only the directory sync failed, the complete new content — never a partial file.
func WriteFileAtomic(fsys FS, dir, name string, data []byte) error {
	if err := replace(fsys, dir, name, data, true); err != nil {
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// replace writes data to dir/name.tmp (fsynced when sync is set) and renames it over
// dir/name; on any failure the tmp file is removed (best effort) and name is untouched.
func replace(fsys FS, dir, name string, data []byte, sync bool) error {
	path := filepath.Join(dir, name)
	tmp := path + TmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err = f.Write(data); err != nil {
		err = fmt.Errorf("write %s: %w", tmp, err)
	} else if sync {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("fsync %s: %w", tmp, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	if err == nil {
		if err = fsys.Rename(tmp, path); err != nil {
			err = fmt.Errorf("rename %s: %w", tmp, err)
		}
	}
	if err != nil {
		_ = fsys.Remove(tmp)
	}
	return err
}

// RemoveDurably removes dir/name and fsyncs dir. A missing file is not an error, nor is a
// missing dir: a group deleted before its first checkpoint on a fresh data dir never had
// a file, and the directory is made only by the first file written.
func RemoveDurably(fsys FS, dir, name string) error {
	path := filepath.Join(dir, name)
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// RenameDurably moves oldpath to newpath, both in dir, and fsyncs dir.
func RenameDurably(fsys FS, dir, oldpath, newpath string) error {
	if err := fsys.Rename(oldpath, newpath); err != nil {
		return fmt.Errorf("rename %s: %w", oldpath, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirDurably makes dir and its parents and fsyncs dir's parent, so that a directory
// just made survives a crash along with what is written in it.
func MkdirDurably(fsys FS, dir string) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("fsync directory %s: %w", filepath.Dir(dir), err)
	}
	return nil
}

// WriteFileUnsynced replaces dir/name with data through name.tmp and a rename, without
// an fsync: for a writer of many files that syncs them all at once (SyncWritten), as the
// offsets journal's replay does before it deletes the journal that can redo them.
func WriteFileUnsynced(fsys FS, dir, name string, data []byte) error {
	return replace(fsys, dir, name, data, false)
}

// SyncWritten makes the files written in dir (their paths; "" for a removal) durable:
// one syncfs where the system has it, else an fsync of each file; then an fsync of dir
// for the renames and removals.
func SyncWritten(fsys FS, dir string, written []string) error {
	err := fsys.SyncFS(dir)
	if errors.Is(err, errors.ErrUnsupported) {
		err = nil
		for _, path := range written {
			if path == "" {
				continue // a removal
			}
			f, oerr := fsys.OpenWrite(path)
			if oerr != nil {
				return fmt.Errorf("open %s: %w", path, oerr)
			}
			err = f.Sync()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("fsync %s: %w", path, err)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
