package storage

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Usage is the size of the volume holding dir and the bytes still usable on it by this
// process (statfs: blocks and blocks available to unprivileged users, times the fragment
// size), as Apache's DescribeLogDirs reads a log dir's FileStore. A size that does not
// fit an int64 is math.MaxInt64 (Apache's adjustForLargeFileSystems). statfs may block
// on a network volume: callers run it off any actor's Receive.
func Usage(dir string) (total, usable int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1, -1, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bytes := func(blocks uint64) int64 {
		frsize := uint64(st.Frsize)
		if frsize == 0 {
			frsize = uint64(st.Bsize)
		}
		if blocks != 0 && frsize > math.MaxInt64/blocks {
			return math.MaxInt64
		}
		return int64(blocks * frsize)
	}
	return bytes(st.Blocks), bytes(st.Bavail), nil
}
