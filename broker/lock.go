package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"kaas/datamode"
)

// dataLockName is the lock every broker of a data directory holds while it runs. A
// broker of the dev registry — a broker alone — holds it exclusively, so a second broker
// pointed at the same directory refuses to start instead of writing what the first one
// owns (two writers of one offset journal and one log each overwrote the other's
// acknowledged data). The lock is flock(2) on an open file: the kernel drops it when the
// process exits, however it exits, so a broker killed with -9 never blocks its own
// restart. Local filesystems honour it, and so does NFSv4 (as a byte-range lock).
const dataLockName = "data.lock"

// dataLock is the held lock; release closes it.
type dataLock struct{ f *os.File }

// errDataDirInUse is the error of a start on a directory another broker holds.
var errDataDirInUse = errors.New("data directory in use by another broker")

// lockDataDir takes the data directory's lock (clusterDir is <data.dir>/__cluster) for
// this broker alone. The file says who holds it, for the error a second broker gives.
func lockDataDir(clusterDir string, nodeID int32, shared bool) (*dataLock, error) {
	path := filepath.Join(clusterDir, dataLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, datamode.File())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	how := unix.LOCK_EX
	if shared {
		// The brokers of a cluster share the directory (each fences its own id); a
		// dev broker, alone by definition, still cannot start beside them.
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (%s); with the dev registry a data directory serves one broker: stop the other broker or give this one its own --data.dir",
				errDataDirInUse, path, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if shared {
		return &dataLock{f: f}, nil
	}
	host, _ := os.Hostname()
	info := "node " + strconv.Itoa(int(nodeID)) + ", pid " + strconv.Itoa(os.Getpid()) + ", host " + host
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info+"\n"), 0)
	}
	return &dataLock{f: f}, nil
}

func (l *dataLock) release() {
	if l != nil && l.f != nil {
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
