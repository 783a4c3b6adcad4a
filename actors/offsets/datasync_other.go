//go:build !linux

package offsets

import "os"

// datasync is a full fsync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }
