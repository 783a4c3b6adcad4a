package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2) on f. It runs through f's RawConn, which holds the file
// descriptor while the call runs: a Close on another goroutine (a partition stopping
// while its segment syncs) waits for it instead of racing it, and the number is never
// one the system has given to another file since.
func datasync(f *os.File) error {
	return onFD(f, "fdatasync", func(fd int) error { return syscall.Fdatasync(fd) })
}

func syncfs(d *os.File) error {
	return onFD(d, "syncfs", unix.Syncfs)
}

// onFD runs call on f's descriptor, again while it is interrupted (EINTR).
func onFD(f *os.File, op string, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: err}
	}
	var callErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if callErr = call(int(fd)); callErr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: err}
	}
	if callErr != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: callErr}
	}
	return nil
}
