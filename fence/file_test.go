package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/storage"
)

func newTestFile(t *testing.T, dir string, self int32) *File {
	t.Helper()
	return NewFile(FileConfig{Dir: dir, Self: self, Peers: []int32{0, 1}, Duration: 600 * time.Millisecond,
		Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
}

// waitFor waits on f's change signal until cond holds (bounded).
func waitFor(t *testing.T, f Fence, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-f.Changes():
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestFileFenceSecondHolderOfOneIDRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a := newTestFile(t, dir, 0)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if !Valid(a) {
		t.Fatal("a started fence is not valid")
	}
	again := newTestFile(t, dir, 0)
	if err := again.Start(context.Background()); err == nil {
		again.Stop()
		t.Fatal("a second fence with the same id started")
	}
}

func TestFileFencePeerStoppedIsLapsedAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a, b := newTestFile(t, dir, 0), newTestFile(t, dir, 1)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "a alive", func() bool { return !b.Lapsed(0) })
	a.Stop() // its lock is released, as a kill -9 does
	waitFor(t, b, "a lapsed", func() bool { return b.Lapsed(0) })
}

// A paused holder keeps its lock but stops renewing: its peer sees it lapse after the
// lease duration, and by then the holder's own permission has ended.
func TestFileFencePausedHolderLapses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a, b := newTestFile(t, dir, 0), newTestFile(t, dir, 1)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "a alive", func() bool { return !b.Lapsed(0) })
	// Pause: the renew loop stops, the lock stays held.
	a.cancel()
	a.wg.Wait()
	waitFor(t, b, "paused a lapsed", func() bool { return b.Lapsed(0) })
	if Valid(a) {
		t.Fatal("the paused holder still thinks it may write after its peer saw it lapse")
	}
	if a.probeLock(0, 0) != lockHeld {
		t.Fatal("the paused holder's lock should still be held")
	}
}

func TestFileFenceTermGrowsAfterALapse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	a := newTestFile(t, dir, 0)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	term := a.Term()
	a.mu.Lock()
	a.validTil = time.Now().Add(-time.Millisecond) // as after a pause past the lease
	a.mu.Unlock()
	waitFor(t, a, "renewed", func() bool { return Valid(a) })
	if a.Term() != term+1 {
		t.Fatalf("term %d after a lapse and a renewal, want %d", a.Term(), term+1)
	}
}

// A broker beyond the configured peers (scaled away by a helm upgrade that shrinks the
// cluster, still stopping) is watched too: alive while it holds its lock and renews,
// lapsed once it stops. Before, any id outside the peers was lapsed at once.
func TestFileFenceWatchesBrokerBeyondPeers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	b := newTestFile(t, dir, 1) // peers 0 and 1
	beyond := NewFile(FileConfig{Dir: dir, Self: 3, Peers: []int32{0, 1, 2, 3}, Duration: 600 * time.Millisecond,
		Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
	if err := beyond.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "broker 3 alive", func() bool { return !b.Lapsed(3) })
	beyond.Stop()
	waitFor(t, b, "broker 3 lapsed", func() bool { return b.Lapsed(3) })
}

// syncBuffer is a log sink safe for the fence's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPair starts brokers 0 and 1 on long leases (a peer lapses only through its lock
// here, never through a slow renewal on a loaded machine).
func startPair(t *testing.T) (dir string, a, b *File) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "nodes")
	mk := func(id int32) *File {
		return NewFile(FileConfig{Dir: dir, Self: id, Peers: []int32{0, 1}, Duration: 20 * time.Second,
			Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
	}
	a, b = mk(0), mk(1)
	for _, f := range []*File{a, b} {
		if err := f.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Stop)
	}
	waitFor(t, b, "a alive", func() bool { return !b.Lapsed(0) })
	return dir, a, b
}

// A live peer whose lock file is deleted, or replaced by a new file nobody holds, is
// still alive: its lease is fresh and the lock it holds is on the old inode. Before,
// a failed open (or a lock taken on the new file) was read as "dead", its partition
// locks were broken and new leader epochs begun while it still acknowledged writes.
func TestFileFencePeerWithLockFileGoneStaysAlive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool
	}{{"deleted", false}, {"replaced", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _, b := startPair(t)
			path := LockPath(dir, 0)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if tc.replace {
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b.watchPeers()
			if b.Lapsed(0) {
				t.Fatalf("peer 0 with its lock file %s is taken for lapsed while its lease is fresh", tc.name)
			}
		})
	}
}

// Any other failure to open a peer's lock file (EMFILE, EIO, EACCES) is "unknown", never
// "dead": the lease decides.
func TestFileFencePeerLockOpenErrorIsNotDeath(t *testing.T) {
	_, _, b := startPair(t)
	b.openLock = func(string, int, os.FileMode) (*os.File, error) { return nil, syscall.EMFILE }
	b.watchPeers()
	if b.Lapsed(0) {
		t.Fatal("an EMFILE opening peer 0's lock file made it lapsed")
	}
}

// A broker whose own lock file is deleted or replaced no longer holds the lock a second
// process with its id would take: it fences itself, stops renewing and says so.
func TestFileFenceOwnerFencesItselfWhenItsLockFileGoes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool
	}{{"deleted", false}, {"replaced", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "nodes")
			var logs syncBuffer
			a := NewFile(FileConfig{Dir: dir, Self: 0, Peers: []int32{0, 1}, Duration: 20 * time.Second,
				Renew: 100 * time.Millisecond, Log: zerolog.New(&logs)})
			if err := a.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer a.Stop()
			a.cancel() // renewals from here on are the test's
			a.wg.Wait()
			path := LockPath(dir, 0)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if tc.replace {
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.renewOnce(); err == nil {
				t.Fatalf("a renewal with the lock file %s succeeded", tc.name)
			}
			if Valid(a) || !a.Lapsed(0) {
				t.Fatal("a broker that lost its lock file still may write")
			}
			if err := a.renewOnce(); err == nil || Valid(a) {
				t.Fatal("a fenced broker renewed again")
			}
			if !strings.Contains(logs.String(), `"message":"fence_lock_file_lost"`) {
				t.Fatalf("no fence_lock_file_lost event in %s", logs.String())
			}
		})
	}
}

// A second process for a broker id whose lock file was deleted takes a new lock file, but
// the lease of the first, still renewed, refuses it. The renewing first process is this
// test: each time the second reads the lease, it has moved on.
func TestFileFenceSecondProcessRefusedWhileLeaseRenews(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(dir, leaseName(0))
	var mu sync.Mutex
	counter := 7
	write := func() {
		mu.Lock()
		defer mu.Unlock()
		counter++
		b := fmt.Sprintf(`{"broker":0,"counter":%d,"pid":1,"lock_ino":1}`, counter)
		if err := os.WriteFile(lease, []byte(b), 0o644); err != nil {
			t.Error(err)
		}
	}
	write()
	fsys := storage.NewFaultFS(nil)
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpRead && path == lease {
			write()
		}
		return nil
	})
	second := newTestFile(t, dir, 0)
	second.fsys = fsys
	err := second.Start(context.Background())
	if err == nil {
		second.Stop()
		t.Fatal("a second process started while the first renews its lease")
	}
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("start: %v, want ErrInUse", err)
	}
	// Once the lease stops moving (the first process fenced itself or is gone) for a
	// lease duration, the id may start.
	fsys.SetBefore(nil)
	if err := second.Start(context.Background()); err != nil {
		t.Fatalf("start after the lease stopped: %v", err)
	}
	second.Stop()
}

// fullVolume makes fsys fail what a full volume fails: any new file, any write of a
// temporary file. Overwriting the blocks of an existing file still works.
func fullVolume(fsys *storage.FaultFS) {
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpCreate || (op == storage.OpWrite && strings.HasSuffix(path, storage.TmpSuffix)) {
			return syscall.ENOSPC
		}
		return nil
	})
}

// On a full volume the lease is still renewed (in place: no new blocks), its peers see
// it move, and a broker restarts on it. Before, each renewal wrote a new temporary file,
// failed with ENOSPC, and every broker's lease lapsed: reads stopped with the writes.
func TestFileFenceRenewsOnAFullVolume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	fsys := storage.NewFaultFS(nil)
	mk := func(id int32) *File {
		f := NewFile(FileConfig{Dir: dir, Self: id, Peers: []int32{0, 1}, Duration: 20 * time.Second,
			Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
		f.fsys = fsys
		return f
	}
	a, b := mk(0), mk(1)
	for _, f := range []*File{a, b} {
		if err := f.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
	}
	a.cancel() // renewals from here on are the test's
	a.wg.Wait()
	fullVolume(fsys)
	before := a.ValidUntil()
	if err := a.renewOnce(); err != nil {
		t.Fatalf("renewal on a full volume: %v", err)
	}
	if !a.ValidUntil().After(before) || !Valid(a) {
		t.Fatal("a renewal on a full volume did not extend the lease")
	}
	b.watchPeers()
	b.mu.Lock()
	seen := b.seen[0].counter
	b.mu.Unlock()
	if seen != a.counter || b.Lapsed(0) {
		t.Fatalf("peer read counter %d (lapsed %v), want %d", seen, b.Lapsed(0), a.counter)
	}
	// A restart on the full volume.
	a.Stop()
	again := mk(0)
	if err := again.Start(context.Background()); err != nil {
		t.Fatalf("restart on a full volume: %v", err)
	}
	again.Stop()
}

// A renewal that fails extends nothing; a record cut short in its middle (a write torn
// by a crash or a full NFS server) is read by a peer as unknown: it keeps what it knew,
// the last counter, and does not take the holder for lapsed. The next renewal writes a
// whole record.
func TestFileFenceTornLeaseKeepsWhatIsInForce(t *testing.T) {
	dir, a, b := startPair(t)
	a.cancel()
	a.wg.Wait()
	fsys := storage.NewFaultFS(nil)
	a.fsys = fsys
	b.watchPeers()
	b.mu.Lock()
	known := b.seen[0].counter
	b.mu.Unlock()
	before := a.ValidUntil()
	fsys.FailNext(storage.OpWrite, syscall.ENOSPC)
	if err := a.renewOnce(); err == nil {
		t.Fatal("a renewal whose write failed succeeded")
	}
	if a.ValidUntil() != before {
		t.Fatal("a failed renewal extended the lease")
	}
	// The first bytes of a record with another counter over the one in place.
	path := filepath.Join(dir, leaseName(0))
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := encodeLease(leaseFile{Broker: 0, Counter: known + 1000, PID: 1, LockIno: 1})
	if _, err := w.WriteAt(next[:30], 0); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := a.readLease(0); !errors.Is(err, errLeaseTorn) {
		t.Fatalf("reading a torn record: %v, want errLeaseTorn", err)
	}
	b.watchPeers()
	b.mu.Lock()
	got := b.seen[0].counter
	b.mu.Unlock()
	if got != known || b.Lapsed(0) {
		t.Fatalf("peer after a torn record: counter %d (lapsed %v), want %d kept", got, b.Lapsed(0), known)
	}
	if err := a.renewOnce(); err != nil {
		t.Fatal(err)
	}
	if l, err := a.readLease(0); err != nil || l.Counter != a.counter {
		t.Fatalf("after a whole renewal: %+v, %v", l, err)
	}
}

// A record that parses but whose checksum does not match (two renewals' halves) is torn.
func TestLeaseRecordChecksum(t *testing.T) {
	rec := encodeLease(leaseFile{Broker: 2, Counter: 41, PID: 7, LockIno: 99})
	if len(rec) != leaseSize {
		t.Fatalf("record of %d bytes, want %d", len(rec), leaseSize)
	}
	if l, err := decodeLease(rec, 2); err != nil || l.Counter != 41 || l.LockIno != 99 {
		t.Fatalf("decode: %+v, %v", l, err)
	}
	bad := bytes.Replace(rec, []byte(`"counter":41`), []byte(`"counter":42`), 1)
	if _, err := decodeLease(bad, 2); !errors.Is(err, errLeaseTorn) {
		t.Fatalf("a record with another counter than its checksum: %v", err)
	}
	if _, err := decodeLease(rec[:30], 2); !errors.Is(err, errLeaseTorn) {
		t.Fatalf("a record cut short: %v", err)
	}
	if _, err := decodeLease(rec, 3); !errors.Is(err, errLeaseTorn) {
		t.Fatalf("another broker's record: %v", err)
	}
	// A lease of a version before the checksum is read.
	if l, err := decodeLease([]byte(`{"broker":2,"counter":5,"pid":1}`), 2); err != nil || l.Counter != 5 {
		t.Fatalf("legacy record: %+v, %v", l, err)
	}
}

// A broker beyond the configured peers whose lock file is deleted is still watched
// through its lease: alive while it renews, lapsed once it stops. Before, it was found
// by its lock file only, and stayed as last seen (alive) for good.
func TestFileFenceWatchesBrokerBeyondPeersByItsLease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes")
	b := newTestFile(t, dir, 1) // peers 0 and 1
	beyond := NewFile(FileConfig{Dir: dir, Self: 3, Peers: []int32{0, 1, 2, 3}, Duration: 600 * time.Millisecond,
		Renew: 100 * time.Millisecond, Log: zerolog.Nop()})
	if err := beyond.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer beyond.Stop()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, b, "broker 3 alive", func() bool { return !b.Lapsed(3) })
	beyond.cancel() // it stops renewing (paused, or fenced by the deleted lock file)
	beyond.wg.Wait()
	if err := os.Remove(LockPath(dir, 3)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "broker 3 lapsed", func() bool { return b.Lapsed(3) })
}
