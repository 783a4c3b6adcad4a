package partition

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// The buffers a fetch's reads fill (readPlan.run) come from pools, one per power-of-two
// size from readBufMin to readBufMax: a fresh buffer of a megabyte cost the reader as
// much as the read itself (the allocator clears it, the collector and the scavenger run
// more often). A buffer goes back only through its ReadBuffer's Release, which the
// connection calls once the response holding it is written; one never released is
// collected as any slice. Sizes outside the range are allocated as before.
const (
	readBufMinShift = 14 // 16 KiB
	readBufMaxShift = 24 // 16 MiB
)

var readBufPools [readBufMaxShift - readBufMinShift + 1]sync.Pool

// ReadBuffer is a pooled buffer a Fetched's Records lie in.
type ReadBuffer struct {
	b        *[]byte
	class    int
	released atomic.Bool
}

// readBuf is a buffer of n bytes, pooled when n is in the pools' range (buf nil
// otherwise).
func readBuf(n int64) ([]byte, *ReadBuffer) {
	if n <= 0 || n > 1<<readBufMaxShift {
		return make([]byte, max(n, 0)), nil
	}
	shift := bits.Len64(uint64(n - 1))
	if shift < readBufMinShift {
		return make([]byte, n), nil
	}
	class := shift - readBufMinShift
	if p, ok := readBufPools[class].Get().(*[]byte); ok {
		return (*p)[:n], &ReadBuffer{b: p, class: class}
	}
	b := make([]byte, 1<<shift)
	return b[:n], &ReadBuffer{b: &b, class: class}
}

// Release gives the buffer back for another read. The caller must hold no slice of it
// afterwards, nor may anything it handed the slice to. A second call does nothing.
func (r *ReadBuffer) Release() {
	if r == nil || !r.released.CompareAndSwap(false, true) {
		return
	}
	readBufPools[r.class].Put(r.b)
}
