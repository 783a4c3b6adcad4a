package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func datasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

func syncfs(d *os.File) error {
	for {
		err := unix.Syncfs(int(d.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "syncfs", Path: d.Name(), Err: err}
			}
			return nil
		}
	}
}
