package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
//     same id cannot take it. A peer whose lock a broker can take is dead: Lapsed at once.
//   - broker-<id>.lease, a small file rewritten (atomically, fsynced) every renew
//     interval with a counter. A paused process (SIGSTOP, a frozen VM, a partitioned
//     NFS client) keeps its flock, but stops renewing: a peer that sees the counter
//     unchanged for a whole lease duration on its own clock treats it as Lapsed.
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

	mu       sync.Mutex
	lock     *os.File
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
		fsys: storage.OSFS{}, seen: map[int32]*peerSeen{}, ch: make(chan struct{}, 1),
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
}

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
	f.mu.Lock()
	f.lock = lf
	f.mu.Unlock()
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

// renewOnce writes the next counter; on success the lease is valid for a duration from
// the moment the write began.
func (f *File) renewOnce() error {
	start := time.Now()
	f.mu.Lock()
	f.counter++
	n := f.counter
	f.mu.Unlock()
	b, _ := json.Marshal(leaseFile{Broker: f.self, Counter: n, PID: os.Getpid()})
	if err := storage.WriteFileAtomic(f.fsys, f.dir, leaseName(f.self), b); err != nil {
		return err
	}
	f.mu.Lock()
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
// other broker with a lock file here (one beyond the cluster size, while a helm upgrade
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

// watched is the configured peers and the ids of the other lock files in the directory.
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
		if num, ok = strings.CutSuffix(num, ".lock"); !ok {
			continue
		}
		id, err := strconv.ParseInt(num, 10, 32)
		if err != nil || int32(id) == f.self || slices.Contains(f.peers, int32(id)) || LockPath(f.dir, int32(id)) != filepath.Join(f.dir, n) {
			continue
		}
		if len(ids) == len(f.peers) {
			ids = slices.Clone(f.peers)
		}
		ids = append(ids, int32(id))
	}
	return ids
}

func (f *File) peerLapsed(p int32, now time.Time) bool {
	var counter uint64
	if b, err := os.ReadFile(filepath.Join(f.dir, leaseName(p))); err == nil {
		var l leaseFile
		if json.Unmarshal(b, &l) == nil {
			counter = l.Counter
		}
	}
	f.mu.Lock()
	s := f.seen[p]
	if s == nil {
		s = &peerSeen{counter: counter, since: now, lapsed: true}
		f.seen[p] = s
		f.mu.Unlock()
		return f.lockFree(p)
	} else if s.counter != counter {
		s.counter, s.since = counter, now
	}
	stale := now.Sub(s.since) >= f.duration
	f.mu.Unlock()
	if stale {
		return true
	}
	return f.lockFree(p)
}

// lockFree reports whether peer p's lock file can be taken: it belongs to no live process.
func (f *File) lockFree(p int32) bool {
	lf, err := os.OpenFile(LockPath(f.dir, p), os.O_RDWR, 0)
	if err != nil {
		return true // never started
	}
	defer lf.Close()
	if unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		_ = unix.Flock(int(lf.Fd()), unix.LOCK_UN)
		return true
	}
	return false
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
	f.validTil = time.Time{}
	if f.lock != nil {
		_ = unix.Flock(int(f.lock.Fd()), unix.LOCK_UN)
		f.lock.Close()
		f.lock = nil
	}
}
