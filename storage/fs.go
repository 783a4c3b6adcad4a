package storage

import (
	"io/fs"
	"os"

	"kaas/datamode"
)

// FS is every file operation kaas makes under data.dir. It is small on purpose: each step
// of a durable write (create, write, sync, close, rename, sync of the directory) is its
// own call, so FaultFS can fail any one of them in tests.
type FS interface {
	// ReadFile returns the whole file; a missing file is an error satisfying
	// errors.Is(err, fs.ErrNotExist).
	ReadFile(path string) ([]byte, error)
	// ReadDirNames lists the names in dir (not sorted, no stat of the entries).
	ReadDirNames(dir string) ([]string, error)
	// ReadDir lists dir's entries, sorted by name, each telling whether it is a
	// directory.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Create opens path for writing, truncating it.
	Create(path string) (File, error)
	// OpenWrite opens an existing file for writing from its start, without truncating it
	// (a preallocated journal segment).
	OpenWrite(path string) (File, error)
	// Rename replaces newpath with oldpath atomically.
	Rename(oldpath, newpath string) error
	// Remove deletes path; a missing path is an error satisfying fs.ErrNotExist.
	Remove(path string) error
	// RemoveAll deletes path and everything under it; a missing path is not an error.
	RemoveAll(path string) error
	// SyncDir fsyncs the directory itself, making renames and removals in it durable.
	SyncDir(dir string) error
	// SyncFS makes everything written to the filesystem holding dir durable at once
	// (syncfs): the journal replay writes thousands of group files and syncs them with
	// one call. It returns an error satisfying errors.ErrUnsupported where the system
	// has no such call.
	SyncFS(dir string) error
	// SyncFile fsyncs f, a file opened outside FS: partition segments keep their own
	// open and append path (the produce path), and only their fsync comes here.
	SyncFile(f *os.File) error
	// MkdirAll makes dir and its parents.
	MkdirAll(dir string) error
}

// File is a file open for writing.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	// Datasync is fdatasync: the data, and the metadata needed to read it back, without
	// the rest (on a preallocated file, no filesystem journal commit at all).
	Datasync() error
	Close() error
}

// OSFS is FS on the operating system's files. New files get datamode.File(), new
// directories datamode.Dir().
type OSFS struct{}

var _ FS = OSFS{}

func (OSFS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (OSFS) ReadDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	// Readdirnames reads the directory entries without a stat per entry: 100,000 group
	// files list in tens of milliseconds.
	return d.Readdirnames(-1)
}

func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

func (OSFS) Create(path string) (File, error) {
	if err := hooked(OpCreate, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, datamode.File())
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) OpenWrite(path string) (File, error) {
	if err := hooked(OpOpen, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is an *os.File with Datasync (datasync_linux.go, datasync_other.go).
type osFile struct{ *os.File }

func (f osFile) Datasync() error {
	if err := hooked(OpSync, f.Name()); err != nil {
		return err
	}
	return datasync(f.File)
}

func (f osFile) Write(p []byte) (int, error) {
	if err := hooked(OpWrite, f.Name()); err != nil {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, err
	}
	return f.File.Write(p)
}

func (f osFile) Sync() error {
	if err := hooked(OpSync, f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f osFile) Close() error {
	if err := hooked(OpClose, f.Name()); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

func (OSFS) Rename(oldpath, newpath string) error {
	if err := hooked(OpRename, newpath); err != nil {
		return err
	}
	return os.Rename(oldpath, newpath)
}

func (OSFS) Remove(path string) error {
	if err := hooked(OpRemove, path); err != nil {
		return err
	}
	return os.Remove(path)
}

func (OSFS) RemoveAll(path string) error {
	if err := hooked(OpRemoveAll, path); err != nil {
		return err
	}
	return os.RemoveAll(path)
}

func (OSFS) SyncDir(dir string) error {
	if err := hooked(OpSyncDir, dir); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (OSFS) SyncFile(f *os.File) error {
	if err := hooked(OpSync, f.Name()); err != nil {
		return err
	}
	return f.Sync()
}

func (OSFS) MkdirAll(dir string) error {
	if err := hooked(OpMkdir, dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, datamode.Dir())
}

func (OSFS) SyncFS(dir string) error {
	if err := hooked(OpSyncFS, dir); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return syncfs(d)
}
