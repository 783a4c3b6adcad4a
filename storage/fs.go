package storage

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

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
	// OpenFile opens path for positioned reads and writes (a partition segment, its
	// recovery point). flag is os.OpenFile's: os.O_RDONLY or os.O_RDWR, with os.O_CREATE,
	// os.O_EXCL and os.O_TRUNC as wanted; a file made gets datamode.File(). The step is
	// OpCreate with os.O_CREATE, else OpOpen.
	OpenFile(path string, flag int) (RWFile, error)
	// Lock opens path, creating it, and takes its exclusive advisory lock (flock) without
	// waiting: held is false, with no file, while another process holds it. The lock
	// lasts until the file is closed; the kernel drops it when its process dies.
	Lock(path string) (f RWFile, held bool, err error)
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

// RWFile is a file open for positioned reads and writes. ReadAt may run on another
// goroutine than the writes.
type RWFile interface {
	File
	io.ReaderAt
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	// Size is the file's length now.
	Size() (int64, error)
	Name() string
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

func (OSFS) OpenFile(path string, flag int) (RWFile, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := hooked(op, path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag, datamode.File())
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) Lock(path string) (RWFile, bool, error) {
	if err := hooked(OpLock, path); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, datamode.File())
	if err != nil {
		return nil, false, err
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return osFile{f}, true, nil
	}
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, false, nil
	}
	return nil, false, &fs.PathError{Op: "flock", Path: path, Err: err}
}

// osFile is an *os.File with Datasync (datasync_linux.go, datasync_other.go).
type osFile struct{ *os.File }

func (f osFile) ReadAt(p []byte, off int64) (int, error) {
	if err := hooked(OpRead, f.Name()); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f osFile) WriteAt(p []byte, off int64) (int, error) {
	if err := hooked(OpWrite, f.Name()); err != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.File.WriteAt(p, off)
}

func (f osFile) Truncate(size int64) error {
	if err := hooked(OpTruncate, f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f osFile) Size() (int64, error) {
	if err := hooked(OpStat, f.Name()); err != nil {
		return 0, err
	}
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

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
