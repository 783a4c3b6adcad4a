package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"kaas/datamode"
	"kaas/storage"
)

// File is the fence of a plain shared volume. Each broker holds two things under
// <data.dir>/__cluster/nodes/:
//
//   - broker-<id>.lock, an exclusive flock(2) for as long as the process lives. The kernel
//     drops it however the process ends (kill -9 included), and a second process with the
//     same id cannot take it. A peer whose lock a broker can take is dead: Lapsed at once,
//     provided the file it took is the one the lease names (its inode): a lock file
//     deleted or replaced under a live holder proves nothing, and neither does any error
//     opening or locking it (EMFILE, EIO, EACCES): then only the lease decides.
//   - broker-<id>.lease, a fixed-size record overwritten in place (fdatasynced, with a
//     checksum: a torn record reads as unknown, keeping what was known) every renew
//     interval with a counter and the inode of the holder's lock file; a renewal needs
//     no free space, so a full volume stops writes, not the lease. A paused process
//     (SIGSTOP, a frozen VM, a partitioned NFS client) keeps its flock, but stops
//     renewing: a peer that sees the counter unchanged for a whole lease duration on its
//     own clock treats it as Lapsed. A lease still moving wins over a missing lock file.
//
// A holder checks its own lock file before each renewal: once the path is gone or names
// another inode, a second process could lock it, so the holder fences itself for good
// (no more renewals, ValidUntil in the past) and logs fence_lock_file_lost. A process
// starting finds the lease of a holder whose lock file vanished still moving and
// refuses to start (ErrInUse) until it has stood still for a lease duration.
//
// The holder's own writes are bounded by ValidUntil = the start of its last successful
// renewal + lease duration − margin. A peer decides a lapse only after seeing the same
// counter for a lease duration starting no earlier than when it read that counter, which
// is after the renewal began; so as long as the two clocks run at the same rate within
// the margin, the holder stops acknowledging before any peer adopts. Wall clocks are not
// compared, only each process's monotonic clock.
type File struct {
	dir      string
	self     int32
	peers    []int32
	duration time.Duration
	renew    time.Duration
	margin   time.Duration
	log      zerolog.Logger
	fsys     storage.FS
	// openLock opens a peer's lock file to probe it (os.OpenFile; tests inject errors).
	openLock func(path string, flag int, perm os.FileMode) (*os.File, error)

	mu       sync.Mutex
	lock     *os.File
	lockIno  uint64 // the inode of lock, named in the lease
	fenced   bool   // own lock file lost: never renews again
	validTil time.Time
	term     uint64
	counter  uint64
	seen     map[int32]*peerSeen
	ch       chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type peerSeen struct {
	counter uint64
	known   bool      // a lease record was read (counter and ino are its)
	ino     uint64    // the lock file inode the last record read names (0: not named)
	since   time.Time // when this process first read counter
	lapsed  bool
}

// FileConfig configures a File fence.
type FileConfig struct {
	Dir      string  // <data.dir>/__cluster/nodes
	Self     int32   // this broker's id
	Peers    []int32 // every other broker's id
	Duration time.Duration
	Renew    time.Duration
	Log      zerolog.Logger
}

// NewFile returns the fence; Start takes it.
func NewFile(cfg FileConfig) *File {
	f := &File{
		dir: cfg.Dir, self: cfg.Self, duration: cfg.Duration, renew: cfg.Renew,
		margin: cfg.Duration / 10, log: cfg.Log.With().Str("fence", "file").Logger(),
		fsys: storage.OSFS{}, openLock: os.OpenFile, seen: map[int32]*peerSeen{}, ch: make(chan struct{}, 1),
	}
	for _, p := range cfg.Peers {
		if p != cfg.Self {
			f.peers = append(f.peers, p)
		}
	}
	return f
}

// LockPath is the lock file of broker id under dir.
func LockPath(dir string, id int32) string {
	return filepath.Join(dir, "broker-"+strconv.Itoa(int(id))+".lock")
}

func leaseName(id int32) string { return "broker-" + strconv.Itoa(int(id)) + ".lease" }

type leaseFile struct {
	Broker  int32  `json:"broker"`
	Counter uint64 `json:"counter"`
	PID     int    `json:"pid"`
	// LockIno is the inode of the holder's lock file: a peer that takes a lock on
	// another inode (the file replaced) learns nothing of the holder. 0 in a lease of
	// a version before it.
	LockIno uint64 `json:"lock_ino,omitempty"`
	// Sum is leaseSum of the record (nil in a lease of a version before it).
	Sum *uint32 `json:"sum,omitempty"`
}

// errLeaseTorn is a lease file that is not a whole record.
var errLeaseTorn = errors.New("lease record unreadable")

// leaseSize is the size of a lease record: one JSON object padded with spaces, so that
// a renewal overwrites the same bytes of the same file (no new blocks: a full volume
// still renews) and the file holds nothing past a shorter record.
const leaseSize = 256

// leaseSum is the checksum of a record: CRC-32C of its JSON without the sum.
func leaseSum(l leaseFile) uint32 {
	l.Sum = nil
	b, _ := json.Marshal(l)
	return crc32.Checksum(b, crcTable)
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// encodeLease is l's record, leaseSize bytes.
func encodeLease(l leaseFile) []byte {
	sum := leaseSum(l)
	l.Sum = &sum
	b, _ := json.Marshal(l)
	out := bytes.Repeat([]byte{' '}, leaseSize)
	copy(out, b)
	out[leaseSize-1] = '\n'
	return out
}

// decodeLease reads a record of broker id: errLeaseTorn when it is not one whole record
// (a renewal cut short, two renewals' halves, another broker's). A record without a sum
// (a version before it, written whole by a rename) is taken as it is.
func decodeLease(b []byte, id int32) (leaseFile, error) {
	var l leaseFile
	if err := json.Unmarshal(b, &l); err != nil || l.Broker != id {
		return leaseFile{}, errLeaseTorn
	}
	if l.Sum != nil && *l.Sum != leaseSum(l) {
		return leaseFile{}, errLeaseTorn
	}
	return l, nil
}

// readLease reads broker id's lease: an error satisfying fs.ErrNotExist when there is
// none, errLeaseTorn (wrapped) when it is not a whole record of id.
func (f *File) readLease(id int32) (leaseFile, error) {
	path := filepath.Join(f.dir, leaseName(id))
	b, err := f.fsys.ReadFile(path)
	if err != nil {
		return leaseFile{}, err
	}
	l, err := decodeLease(b, id)
	if err != nil {
		return leaseFile{}, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// writeLease makes rec this broker's lease: written over the existing file in place and
// fdatasynced, so a renewal needs no free space; the file is made (through a rename) only
// when there is none. A write cut short leaves a torn record, which readers take for
// "unknown" and the next renewal makes whole.
func (f *File) writeLease(rec []byte) error {
	name := leaseName(f.self)
	path := filepath.Join(f.dir, name)
	w, err := f.fsys.OpenWrite(path)
	if errors.Is(err, fs.ErrNotExist) {
		return storage.WriteFileAtomic(f.fsys, f.dir, name, rec)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if _, err = w.Write(rec); err != nil {
		err = fmt.Errorf("write %s: %w", path, err)
	} else if err = w.Datasync(); err != nil {
		err = fmt.Errorf("fdatasync %s: %w", path, err)
	}
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	return err
}

// errLockLost is a renewal refused because this broker's lock file is gone or replaced.
var errLockLost = errors.New("lock file lost: this broker fenced itself; restart it")

// ErrInUse is the error of a broker whose id another live process holds.
var ErrInUse = errors.New("broker id in use by another process")

// Start takes this broker's lock (failing at once if another process holds it: two
// brokers with one id must never both run) and its lease, then renews the lease and
// watches the peers until Stop.
func (f *File) Start(ctx context.Context) error {
	if err := storage.MkdirDurably(f.fsys, f.dir); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	path := LockPath(f.dir, f.self)
	lf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, datamode.File())
	if err != nil {
		return fmt.Errorf("fence: open %s: %w", path, err)
	}
	// A peer probing this lock holds it for an instant: retry for a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err = unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			lf.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("%w: %s is locked: another broker runs with node.id %d on this data directory", ErrInUse, path, f.self)
			}
			return fmt.Errorf("fence: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			lf.Close()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	ino, err := fileIno(lf)
	if err != nil {
		lf.Close()
		return fmt.Errorf("fence: stat %s: %w", path, err)
	}
	f.mu.Lock()
	f.lock, f.lockIno, f.fenced = lf, ino, false
	f.mu.Unlock()
	if err := f.awaitPrevious(ctx); err != nil {
		f.release()
		return err
	}
	if err := f.renewOnce(); err != nil {
		f.release()
		return fmt.Errorf("fence: first lease write: %w", err)
	}
	f.watchPeers()
	rctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go f.loop(rctx)
	return nil
}

// awaitPrevious refuses to start while another process renews this id's lease. The lock
// just taken proves the previous holder gone only when the lease names this very inode
// (the kernel released it); when the lease names another (the lock file was deleted or
// replaced under it), the previous holder may still run: its lease must stand still for
// a lease duration first. Counters continue from the previous lease's.
func (f *File) awaitPrevious(ctx context.Context) error {
	prev, err := f.readLease(f.self)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		f.mu.Lock()
		f.counter = max(f.counter, prev.Counter)
		f.mu.Unlock()
		if prev.LockIno == 0 || prev.LockIno == f.lockIno {
			return nil
		}
	}
	f.log.Warn().Uint64("lease_lock_ino", prev.LockIno).Uint64("lock_ino", f.lockIno).Dur("wait", f.duration).
		Msg("fence_previous_lease_checked")
	deadline := time.Now().Add(f.duration)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.renew):
		}
		l, err := f.readLease(f.self)
		if err != nil {
			continue // unreadable: unknown, keep watching
		}
		if l.Counter != prev.Counter || l.PID != prev.PID {
			return fmt.Errorf("%w: the lease of node.id %d in %s is still renewed (pid %d) though its lock file was deleted or replaced",
				ErrInUse, f.self, f.dir, l.PID)
		}
	}
	f.mu.Lock()
	f.counter = max(f.counter, prev.Counter)
	f.mu.Unlock()
	return nil
}

// fileIno is the inode of an open file.
func fileIno(lf *os.File) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(lf.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// checkOwnLock fences this broker for good when its lock file is gone or is another
// inode than the one it holds: a second process with its id could lock that path. Any
// other error of the stat is not proof: the renewal goes on.
func (f *File) checkOwnLock() error {
	f.mu.Lock()
	fenced, lf := f.fenced, f.lock
	f.mu.Unlock()
	if fenced {
		return errLockLost
	}
	if lf == nil {
		return nil
	}
	path := LockPath(f.dir, f.self)
	var held, now unix.Stat_t
	err := unix.Stat(path, &now)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil
	}
	if ferr := unix.Fstat(int(lf.Fd()), &held); ferr != nil {
		return nil
	}
	if err == nil && now.Ino == held.Ino && now.Dev == held.Dev {
		return nil
	}
	f.mu.Lock()
	f.fenced, f.validTil = true, time.Time{}
	f.mu.Unlock()
	how := "deleted"
	if err == nil {
		how = "replaced"
	}
	f.log.Error().Str("path", path).Str("lock_file", how).
		Msg("fence_lock_file_lost")
	notify(f.ch)
	return errLockLost
}

// renewOnce writes the next counter; on success the lease is valid for a duration from
// the moment the write began.
func (f *File) renewOnce() error {
	start := time.Now()
	if err := f.checkOwnLock(); err != nil {
		return err
	}
	f.mu.Lock()
	f.counter++
	n, ino := f.counter, f.lockIno
	f.mu.Unlock()
	if err := f.writeLease(encodeLease(leaseFile{Broker: f.self, Counter: n, PID: os.Getpid(), LockIno: ino})); err != nil {
		return err
	}
	f.mu.Lock()
	if f.fenced {
		f.mu.Unlock()
		return errLockLost
	}
	was := time.Now().Before(f.validTil)
	if !was {
		f.term++
	}
	f.validTil = start.Add(f.duration - f.margin)
	f.mu.Unlock()
	if !was {
		notify(f.ch)
	}
	return nil
}

func (f *File) loop(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.renew)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := f.renewOnce(); err != nil {
			if !failing {
				f.log.Error().Err(err).Msg("lease_renew_failed")
			}
			failing = true
		} else if failing {
			failing = false
			f.log.Info().Msg("lease_renewed_again")
		}
		if !Valid(f) {
			notify(f.ch)
		}
		f.watchPeers()
	}
}

// watchPeers reads every peer's lease and probes its lock: the configured peers and any
// other broker with a lock or lease file here (one beyond the cluster size, while a helm upgrade
// shrinks the cluster: it still serves until it stops).
func (f *File) watchPeers() {
	now := time.Now()
	changed := false
	for _, p := range f.watched() {
		lapsed := f.peerLapsed(p, now)
		f.mu.Lock()
		s := f.seen[p]
		flipped := s.lapsed != lapsed
		s.lapsed = lapsed
		f.mu.Unlock()
		if flipped {
			changed = true
			f.log.Info().Int32("broker", p).Bool("lapsed", lapsed).Msg("peer_lease_changed")
		}
	}
	if changed {
		notify(f.ch)
	}
}

// watched is the configured peers and the ids of the other lock and lease files in the
// directory (a lease alone: a broker beyond the size whose lock file was deleted).
func (f *File) watched() []int32 {
	ids := f.peers
	names, err := f.fsys.ReadDirNames(f.dir)
	if err != nil {
		return ids
	}
	for _, n := range names {
		num, ok := strings.CutPrefix(n, "broker-")
		if !ok {
			continue
		}
		lock, isLock := strings.CutSuffix(num, ".lock")
		lease, isLease := strings.CutSuffix(num, ".lease")
		if !isLock && !isLease {
			continue
		}
		if isLock {
			num = lock
		} else {
			num = lease
		}
		id, err := strconv.ParseInt(num, 10, 32)
		if err != nil || int32(id) == f.self || slices.Contains(ids, int32(id)) ||
			(isLock && LockPath(f.dir, int32(id)) != filepath.Join(f.dir, n)) || (isLease && leaseName(int32(id)) != n) {
			continue
		}
		if len(ids) == len(f.peers) {
			ids = slices.Clone(f.peers)
		}
		ids = append(ids, int32(id))
	}
	return ids
}

// peerLapsed decides whether peer p is gone. Only a lock actually taken on the file its
// lease names proves it dead at once; otherwise its lease decides: lapsed once unchanged
// for a lease duration on this clock. An unreadable lease (torn, EIO) changes nothing.
// A peer with neither a lock file nor a lease never started.
func (f *File) peerLapsed(p int32, now time.Time) bool {
	l, rerr := f.readLease(p)
	f.mu.Lock()
	s := f.seen[p]
	if s == nil {
		s = &peerSeen{since: now, lapsed: true}
		f.seen[p] = s
	}
	if rerr == nil && (!s.known || s.counter != l.Counter) {
		s.counter, s.known, s.ino, s.since = l.Counter, true, l.LockIno, now
	}
	stale := now.Sub(s.since) >= f.duration
	known, ino := s.known, s.ino
	f.mu.Unlock()
	switch f.probeLock(p, ino) {
	case lockFree:
		return true
	case lockMissing:
		if !known && errors.Is(rerr, fs.ErrNotExist) {
			return true // never started
		}
	}
	return stale
}

// lockState is what a probe of a peer's lock file found.
type lockState int

const (
	lockUnknown lockState = iota // could not tell: an error, or a file the lease does not name
	lockHeld                     // a live process holds it
	lockFree                     // taken by this probe: its holder is gone
	lockMissing                  // no lock file
)

// probeLock tries to take peer p's lock file. A lock taken proves p gone only when the
// file is the inode p's lease names (ino; 0 when the lease names none).
func (f *File) probeLock(p int32, ino uint64) lockState {
	lf, err := f.openLock(LockPath(f.dir, p), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return lockMissing
	}
	if err != nil {
		return lockUnknown
	}
	defer lf.Close()
	err = unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return lockHeld
	}
	if err != nil {
		return lockUnknown
	}
	_ = unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	if got, err := fileIno(lf); err != nil || (ino != 0 && got != ino) {
		return lockUnknown
	}
	return lockFree
}

// ValidUntil is the end of this broker's write permission.
func (f *File) ValidUntil() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.validTil
}

// Term counts the times the lease was taken.
func (f *File) Term() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term
}

// Lapsed reports whether peer id is dead or has stopped renewing.
func (f *File) Lapsed(id int32) bool {
	if id == f.self {
		return !Valid(f)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.seen[id]
	return s == nil || s.lapsed
}

// Changes is signalled when this broker's lease or a peer's lapse changes.
func (f *File) Changes() <-chan struct{} { return f.ch }

// Stop ends renewal and releases the lock (peers see it lapsed at their next probe).
func (f *File) Stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	f.release()
}

func (f *File) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.validTil, f.lockIno = time.Time{}, 0
	if f.lock != nil {
		_ = unix.Flock(int(f.lock.Fd()), unix.LOCK_UN)
		f.lock.Close()
		f.lock = nil
	}
}
