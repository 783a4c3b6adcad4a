package storage

import (
	"errors"
	"io/fs"
	"os"
	"sync"
)

// Op names one FS step, for FaultFS.
type Op string

// The steps FaultFS can fail.
const (
	// OpRead is a whole-file read (ReadFile) or a positioned one (RWFile.ReadAt).
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
	// OpRemoveAll is a removal of a tree (a deleted topic's directory).
	OpRemoveAll Op = "removeall"
	// OpTruncate cuts a file open for positioned writes (a torn segment tail).
	OpTruncate Op = "truncate"
	// OpStat asks an open file its size.
	OpStat Op = "stat"
	// OpLock takes a file's lock (a partition's leader.lock).
	OpLock Op = "lock"
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

var _ FS = (*FaultFS)(nil)

// NewFaultFS wraps inner (OSFS when nil).
func NewFaultFS(inner FS) *FaultFS {
	if inner == nil {
		inner = OSFS{}
	}
	return &FaultFS{Inner: inner, fails: map[Op][]error{}, count: map[Op]int{}}
}

// SetBefore sets Before under f's lock, for a test that changes it while the FS is in
// use.
func (f *FaultFS) SetBefore(before func(op Op, path string) error) {
	f.mu.Lock()
	f.Before = before
	f.mu.Unlock()
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

func (f *FaultFS) ReadDir(dir string) ([]fs.DirEntry, error) {
	if err := f.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return f.Inner.ReadDir(dir)
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

func (f *FaultFS) RemoveAll(path string) error {
	if err := f.check(OpRemoveAll, path); err != nil {
		return err
	}
	return f.Inner.RemoveAll(path)
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

func (f *FaultFS) OpenFile(path string, flag int) (RWFile, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := f.check(op, path); err != nil {
		return nil, err
	}
	file, err := f.Inner.OpenFile(path, flag)
	if err != nil {
		return nil, err
	}
	return &faultRWFile{faultFile{fs: f, path: path, inner: file}, file}, nil
}

func (f *FaultFS) Lock(path string) (RWFile, bool, error) {
	if err := f.check(OpLock, path); err != nil {
		return nil, false, err
	}
	file, held, err := f.Inner.Lock(path)
	if err != nil || !held {
		return nil, held, err
	}
	return &faultRWFile{faultFile{fs: f, path: path, inner: file}, file}, true, nil
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

// faultRWFile is a faultFile open for positioned reads and writes. A failed WriteAt
// writes half of its buffer first, as a failed Write does.
type faultRWFile struct {
	faultFile
	rw RWFile
}

func (f *faultRWFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.path); err != nil {
		return 0, err
	}
	return f.rw.ReadAt(p, off)
}

func (f *faultRWFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpWrite, f.path); err != nil {
		n, _ := f.rw.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.rw.WriteAt(p, off)
}

func (f *faultRWFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.path); err != nil {
		return err
	}
	return f.rw.Truncate(size)
}

func (f *faultRWFile) Size() (int64, error) {
	if err := f.fs.check(OpStat, f.path); err != nil {
		return 0, err
	}
	return f.rw.Size()
}

func (f *faultRWFile) Name() string { return f.rw.Name() }
