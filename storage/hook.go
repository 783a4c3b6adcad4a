package storage

import (
	"io/fs"
	"sync/atomic"
)

// Hook, when installed with SetHook, runs before each write-side step OSFS takes
// (create, open, write, sync, close, rename, remove, syncdir, syncfs, mkdir, truncate,
// lock) and before each positioned read or size of an open file (read, stat): it may
// sleep (a slow disk) or return an error, which fails the step as FaultFS does (a failed
// write writes half of its buffer first). It is the chaos suite's way into the broker's
// real storage without changing what the broker is built with; never set in production,
// where it costs an atomic load and a nil check per step.
type Hook func(op Op, path string) error

var hook atomic.Pointer[Hook]

// SetHook installs h for every OSFS of the process until the returned func is called.
// Tests only.
func SetHook(h Hook) (restore func()) {
	old := hook.Swap(&h)
	return func() { hook.Store(old) }
}

// hooked runs the installed hook for op on path; nil when none is installed.
func hooked(op Op, path string) error {
	h := hook.Load()
	if h == nil {
		return nil
	}
	if err := (*h)(op, path); err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
}
