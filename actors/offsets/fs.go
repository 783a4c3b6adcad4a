package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"kaas/datamode"
)

// FS is every file operation the offsets actor and ListGroupIDs make. It is small on
// purpose: each step of a durable write (create, write, sync, close, rename, sync of the
// directory) is its own call, so FaultFS can fail any one of them in tests.
type FS interface {
	// ReadFile returns the whole file; a missing file is an error satisfying
	// errors.Is(err, fs.ErrNotExist).
	ReadFile(path string) ([]byte, error)
	// ReadDirNames lists the names in dir (not sorted, no stat of the entries).
	ReadDirNames(dir string) ([]string, error)
	// Create opens path for writing, truncating it.
	Create(path string) (File, error)
	// OpenWrite opens an existing file for writing from its start, without truncating it
	// (a preallocated journal segment).
	OpenWrite(path string) (File, error)
	// Rename replaces newpath with oldpath atomically.
	Rename(oldpath, newpath string) error
	// Remove deletes path; a missing path is an error satisfying fs.ErrNotExist.
	Remove(path string) error
	// SyncDir fsyncs the directory itself, making renames and removals in it durable.
	SyncDir(dir string) error
	// SyncFS makes everything written to the filesystem holding dir durable at once
	// (syncfs): the journal replay writes thousands of group files and syncs them with
	// one call. It returns an error satisfying errors.ErrUnsupported where the system
	// has no such call.
	SyncFS(dir string) error
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

// OSFS is FS on the operating system's files.
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

func (OSFS) Create(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, datamode.File())
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) OpenWrite(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is an *os.File with Datasync (datasync_linux.go, datasync_other.go).
type osFile struct{ *os.File }

func (f osFile) Datasync() error { return datasync(f.File) }

func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (OSFS) Remove(path string) error { return os.Remove(path) }

func (OSFS) SyncDir(dir string) error {
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

func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, datamode.Dir()) }

func (OSFS) SyncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return syncfs(d)
}

// Op names one FS step, for FaultFS.
type Op string

// The steps FaultFS can fail.
const (
	OpRead    Op = "read"
	OpReadDir Op = "readdir"
	OpCreate  Op = "create"
	OpOpen    Op = "open"
	OpWrite   Op = "write"
	OpSync    Op = "sync"
	OpClose   Op = "close"
	OpRename  Op = "rename"
	OpRemove  Op = "remove"
	OpSyncDir Op = "syncdir"
	OpSyncFS  Op = "syncfs"
	OpMkdir   Op = "mkdir"
)

// ErrInjected is the error FaultFS returns unless told another.
var ErrInjected = errors.New("injected fault")

// FaultFS wraps an FS and fails chosen steps, for tests: FailNext(OpSync, nil) makes the
// next fsync of a file fail. A failed OpWrite writes half of its buffer first, the way a
// full disk cuts a write short. Before, when set, runs before every step and may block
// (to hold a write in flight) or return an error of its own. Safe for concurrent use.
type FaultFS struct {
	Inner FS
	// Before, if set, is called before each step with its path; a non-nil error fails
	// the step.
	Before func(op Op, path string) error

	mu    sync.Mutex
	fails map[Op][]error
	count map[Op]int
}

// NewFaultFS wraps inner (OSFS when nil).
func NewFaultFS(inner FS) *FaultFS {
	if inner == nil {
		inner = OSFS{}
	}
	return &FaultFS{Inner: inner, fails: map[Op][]error{}, count: map[Op]int{}}
}

// FailNext makes the next call of op fail with err (ErrInjected when nil). Calls queue:
// FailNext twice fails the next two.
func (f *FaultFS) FailNext(op Op, err error) {
	if err == nil {
		err = ErrInjected
	}
	f.mu.Lock()
	f.fails[op] = append(f.fails[op], err)
	f.mu.Unlock()
}

// Count reports how many times op was attempted.
func (f *FaultFS) Count(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[op]
}

func (f *FaultFS) check(op Op, path string) error {
	f.mu.Lock()
	f.count[op]++
	var err error
	if q := f.fails[op]; len(q) > 0 {
		err, f.fails[op] = q[0], q[1:]
	}
	before := f.Before
	f.mu.Unlock()
	if err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	if before != nil {
		if err := before(op, path); err != nil {
			return &fs.PathError{Op: string(op), Path: path, Err: err}
		}
	}
	return nil
}

func (f *FaultFS) ReadFile(path string) ([]byte, error) {
	if err := f.check(OpRead, path); err != nil {
		return nil, err
	}
	return f.Inner.ReadFile(path)
}

func (f *FaultFS) ReadDirNames(dir string) ([]string, error) {
	if err := f.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return f.Inner.ReadDirNames(dir)
}

func (f *FaultFS) Create(path string) (File, error) {
	if err := f.check(OpCreate, path); err != nil {
		return nil, err
	}
	file, err := f.Inner.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, path: path, inner: file}, nil
}

func (f *FaultFS) OpenWrite(path string) (File, error) {
	if err := f.check(OpOpen, path); err != nil {
		return nil, err
	}
	file, err := f.Inner.OpenWrite(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, path: path, inner: file}, nil
}

func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.check(OpRename, newpath); err != nil {
		return err
	}
	return f.Inner.Rename(oldpath, newpath)
}

func (f *FaultFS) Remove(path string) error {
	if err := f.check(OpRemove, path); err != nil {
		return err
	}
	return f.Inner.Remove(path)
}

func (f *FaultFS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.Inner.SyncDir(dir)
}

func (f *FaultFS) SyncFS(dir string) error {
	if err := f.check(OpSyncFS, dir); err != nil {
		return err
	}
	return f.Inner.SyncFS(dir)
}

func (f *FaultFS) MkdirAll(dir string) error {
	if err := f.check(OpMkdir, dir); err != nil {
		return err
	}
	return f.Inner.MkdirAll(dir)
}

type faultFile struct {
	fs    *FaultFS
	path  string
	inner File
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.check(OpWrite, f.path); err != nil {
		n, _ := f.inner.Write(p[:len(p)/2])
		return n, err
	}
	return f.inner.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.check(OpSync, f.path); err != nil {
		return err
	}
	return f.inner.Sync()
}

// Datasync fails as OpSync does: both are the fsync step of a write.
func (f *faultFile) Datasync() error {
	if err := f.fs.check(OpSync, f.path); err != nil {
		return err
	}
	return f.inner.Datasync()
}

func (f *faultFile) Close() error {
	if err := f.fs.check(OpClose, f.path); err != nil {
		f.inner.Close()
		return err
	}
	return f.inner.Close()
}

// writeFileAtomic makes data the content of dir/name durably: it writes name.tmp, fsyncs
// it, renames it over name and fsyncs dir. On any failure the tmp file is removed (best
// effort; a leftover is cleaned at the next load) and name is either its old content or,
// when only the directory sync failed, the complete new content — never a partial file.
func writeFileAtomic(fsys FS, dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	_, err = f.Write(data)
	if err != nil {
		err = fmt.Errorf("write %s: %w", tmp, err)
	} else if err = f.Sync(); err != nil {
		err = fmt.Errorf("fsync %s: %w", tmp, err)
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
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// saveGroupFile makes s, group's state, the content of dir/name durably (removes the file
// when the group has nothing to keep), creating dir if it is missing.
func saveGroupFile(fsys FS, dir, name, group string, s state, exists bool) error {
	if !exists {
		return removeFileDurably(fsys, dir, name)
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// The directory may have just been made: its entry must be durable too.
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("fsync directory %s: %w", filepath.Dir(dir), err)
	}
	data, err := encodeFile(group, s)
	if err != nil {
		return err
	}
	return writeFileAtomic(fsys, dir, name, data)
}

// removeFileDurably removes dir/name and fsyncs dir. A missing file is not an error, nor
// is a missing dir: a group deleted before its first checkpoint on a fresh data dir never
// had a file, and the directory is made only by the first file written.
func removeFileDurably(fsys FS, dir, name string) error {
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

// writeFileUnsynced replaces dir/name with data through name.tmp and a rename, without
// an fsync: for the journal replay, which syncs everything it wrote at once (syncWritten)
// before it deletes the journal that can redo it.
func writeFileUnsynced(fsys FS, dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err = f.Write(data); err != nil {
		err = fmt.Errorf("write %s: %w", tmp, err)
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

// syncWritten makes the files written in dir (their paths; "" for a removal) durable:
// one syncfs where the system has it, else an fsync of each file; then an fsync of dir
// for the renames and removals.
func syncWritten(fsys FS, dir string, written []string) error {
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
