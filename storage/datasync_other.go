//go:build !linux

package storage

import (
	"errors"
	"os"
)

// datasync is a full fsync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }

// syncfs is not available: callers fsync each file instead.
func syncfs(*os.File) error { return errors.ErrUnsupported }
