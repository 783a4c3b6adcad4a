package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"kaas/datamode"
	"kaas/storage"
)

// sharedFile is one JSON file under <data.dir>/__cluster that every broker of the cluster
// reads and any of them may rewrite (acls.json, users.json). A change is a
// read-modify-write under flock(2) on <name>.lock, so two brokers changing it at once do
// not lose each other's change, written atomically through storage; every broker notices
// a change on disk by polling its size, mtime and inode (Poll).
type sharedFile struct {
	fs   storage.FS
	dir  string
	name string

	mu    sync.Mutex // serializes this broker's updates and polls
	stamp stamp      // of the content last parsed (or last refused)
}

// stamp tells one version of a file from another without reading it: a rename over it
// changes the inode, an edit in place its size or mtime.
type stamp struct {
	exists bool
	size   int64
	mtime  int64
	ino    uint64
}

func stampOf(fi fs.FileInfo) stamp {
	s := stamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

func (f *sharedFile) path() string { return filepath.Join(f.dir, f.name) }

// read returns the file's bytes and stamp; a missing file is nil bytes, no error.
func (f *sharedFile) read() ([]byte, stamp, error) {
	fi, err := os.Stat(f.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stamp{}, nil
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("stat %s: %w", f.path(), err)
	}
	b, err := f.fs.ReadFile(f.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stamp{}, nil
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("read %s: %w", f.path(), err)
	}
	return b, stampOf(fi), nil
}

// changed says whether the file on disk is not the version last parsed.
func (f *sharedFile) changed() (bool, error) {
	fi, err := os.Stat(f.path())
	var s stamp
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", f.path(), err)
	default:
		s = stampOf(fi)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return s != f.stamp, nil
}

// load reads the file and hands its bytes to parse (nil for a missing file) when it is
// not the version last parsed; force reads it whatever its stamp.
func (f *sharedFile) load(force bool, parse func([]byte) error) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, s, err := f.read()
	if err != nil {
		return false, err
	}
	if !force && s == f.stamp {
		return false, nil
	}
	// The stamp is taken even when parse refuses the content: a broken file is reported
	// once per version, not once per poll.
	f.stamp = s
	if err := parse(b); err != nil {
		return false, fmt.Errorf("%s: %w", f.path(), err)
	}
	return true, nil
}

// update changes the file under the cluster-wide lock: change gets the current bytes
// (nil when there is no file) and returns the new ones, or an error to leave it as it is.
// parse then takes the new content, so this broker sees its own change at once.
func (f *sharedFile) update(change func(old []byte) ([]byte, error), parse func([]byte) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fs.MkdirAll(f.dir); err != nil {
		return fmt.Errorf("create %s: %w", f.dir, err)
	}
	lockPath := f.path() + ".lock"
	lf, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, datamode.File())
	if err != nil {
		return fmt.Errorf("open %s: %w", lockPath, err)
	}
	defer lf.Close()
	if err := flockTimeout(lf, 10*time.Second); err != nil {
		return fmt.Errorf("lock %s: %w", lockPath, err)
	}
	defer func() { _ = unix.Flock(int(lf.Fd()), unix.LOCK_UN) }()
	old, _, err := f.read()
	if err != nil {
		return err
	}
	b, err := change(old)
	if err != nil {
		return err
	}
	if err := storage.WriteFileAtomic(f.fs, f.dir, f.name, b); err != nil {
		return err
	}
	if fi, err := os.Stat(f.path()); err == nil {
		f.stamp = stampOf(fi)
	}
	return parse(b)
}

// flockTimeout takes an exclusive flock, retrying a held one until timeout: another
// broker holds it only for one read-modify-write.
func flockTimeout(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}
