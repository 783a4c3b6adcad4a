//go:build !linux

package commitbench

import (
	"testing"
	"time"
)

// diskFloor is measured on Linux only (fdatasync).
func diskFloor(b *testing.B, dir string, d time.Duration) (fsyncs, datasyncs, cycles float64) {
	b.Log("disk floor: measured on Linux only")
	return 0, 0, 0
}
