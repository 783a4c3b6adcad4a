package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"kaas/datamode"
	"kaas/storage"
)

// sharedFile is one JSON file under <data.dir>/__cluster that every broker of the cluster
// reads and any of them may rewrite (acls.json, users.json). A change is a
// read-modify-write under flock(2) on <name>.lock, so two brokers changing it at once do
// not lose each other's change, written atomically through storage; every broker notices
// a change on disk by polling its size, mtime, ctime and inode (Poll).
//
// These files carry rights, so they fail closed: once this process has taken up a
// version of the file, a file that is gone, empty, unreadable or not a regular file (a
// symlink is not followed) is refused like a corrupt one, and what is in force stays. Only
// a file that was never there (a fresh install) reads as none.
type sharedFile struct {
	fs   storage.FS
	dir  string
	name string

	mu      sync.Mutex // serializes this broker's updates and polls
	stamp   stamp      // of the content last parsed (or last refused)
	present bool       // a version of the file was taken up or written: from now on it must be there
}

// stamp tells one version of a file from another without reading it: a rename over it
// changes the inode, an edit in place its size or mtime, a chmod its ctime.
type stamp struct {
	exists bool
	size   int64
	mtime  int64
	ctime  int64
	ino    uint64
	mode   fs.FileMode
}

func stampOf(fi fs.FileInfo) stamp {
	s := stamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
		s.ctime = st.Ctim.Nano()
	}
	return s
}

func (f *sharedFile) path() string { return filepath.Join(f.dir, f.name) }

// errMissing is a shared file that is not there.
var errMissing = errors.New("missing")

// read returns the file's bytes and stamp: errMissing when there is no file, another
// error (with the stamp, when there is one) when it cannot be read or is not a regular
// file. A symlink is refused, not followed: the rights are this file's, not those of
// wherever a link points.
func (f *sharedFile) read() ([]byte, stamp, error) {
	path := f.path()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stamp{}, errMissing
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("stat %s: %w", path, err)
	}
	s := stampOf(fi)
	if !fi.Mode().IsRegular() {
		return nil, s, fmt.Errorf("%s is not a regular file (%s; a symlink is not followed)", path, fi.Mode().Type())
	}
	// O_NOFOLLOW: the name may have become a symlink since the Lstat; O_NONBLOCK: nor
	// may a FIFO put there hang the poller.
	file, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stamp{}, errMissing
	}
	if err != nil {
		return nil, s, fmt.Errorf("open %s: %w", path, err)
	}
	defer file.Close()
	if fi, err = file.Stat(); err != nil {
		return nil, s, fmt.Errorf("stat %s: %w", path, err)
	}
	s = stampOf(fi)
	if !fi.Mode().IsRegular() {
		return nil, s, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return nil, s, fmt.Errorf("read %s: %w", path, err)
	}
	return b, s, nil
}

// current is the file's content for a load or an update: nil with no error for a file
// that was never there; an error for one that is gone, empty or unreadable after a
// version of it was taken up, or empty or unreadable at all.
func (f *sharedFile) current() ([]byte, stamp, error) {
	b, s, err := f.read()
	switch {
	case errors.Is(err, errMissing) && !f.present:
		return nil, stamp{}, nil // a fresh install
	case errors.Is(err, errMissing):
		return nil, stamp{}, fmt.Errorf("%s was removed: restore it, or write an empty list to mean none", f.path())
	case err != nil:
		return nil, s, err
	case len(bytes.TrimSpace(b)) == 0:
		return nil, s, fmt.Errorf("%s is empty: restore it, or write an empty list to mean none", f.path())
	}
	return b, s, nil
}

// load reads the file and hands its bytes to parse (nil for a file that was never there)
// when it is not the version last parsed; force reads it whatever its stamp.
func (f *sharedFile) load(force bool, parse func([]byte) error) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, s, err := f.current()
	if !force && s == f.stamp {
		return false, nil
	}
	// The stamp is taken even when the content is refused: a broken file is reported
	// once per version, not once per poll.
	f.stamp = s
	if err != nil {
		return false, err
	}
	if err := parse(b); err != nil {
		return false, fmt.Errorf("%s: %w", f.path(), err)
	}
	if b != nil {
		f.present = true
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
	old, _, err := f.current()
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
	if fi, err := os.Lstat(f.path()); err == nil {
		f.stamp = stampOf(fi)
	}
	f.present = true
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

// checkKeys refuses a JSON document in which an object holds a key twice: encoding/json
// keeps the last one, so a second "permission" would silently turn a hand-written DENY
// into an ALLOW. In an object that decodes into a struct (isMap false for its depth, the
// top-level object being depth 0) keys that differ only in case are the same key too, as
// encoding/json matches field names case-insensitively; in one that decodes into a map
// (user names) they are different keys.
func checkKeys(b []byte, isMap func(depth int) bool) error {
	type frame struct {
		obj, fold, wantKey bool
		keys               map[string]bool
	}
	var stack []*frame
	depth := 0 // objects open
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			top := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				depth--
				valueDone()
				continue
			}
			key, _ := tok.(string)
			k := key
			if top.fold {
				k = foldKey(key)
			}
			if top.keys[k] {
				return fmt.Errorf("key %q appears twice in one object", key)
			}
			top.keys[k] = true
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, fold: !isMap(depth), wantKey: true, keys: map[string]bool{}})
			depth++
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// foldKey is key with each rune replaced by the smallest of its case-folding orbit, so
// that foldKey(x) == foldKey(y) exactly when encoding/json takes x and y for one field.
func foldKey(key string) string {
	var sb strings.Builder
	for _, r := range key {
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
