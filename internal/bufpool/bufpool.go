// Package bufpool lends byte buffers by size, one pool per power of two from 16 KiB to
// 64 MiB: the buffers a fetch's reads fill (actors/partition) and the frames a Fetch
// response is encoded into (actors/conn). A fresh buffer of a megabyte cost as much as
// the read or the encoding it held (the allocator clears it, the collector and the
// scavenger run more often). A buffer goes back only through its Buffer's Release, once
// nothing reads it; one never released is collected as any slice. Sizes outside the
// range are allocated as before.
package bufpool

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

const (
	minShift = 14 // 16 KiB
	maxShift = 26 // 64 MiB
)

var pools [maxShift - minShift + 1]sync.Pool

// Buffer is a pooled buffer lent by Get.
type Buffer struct {
	b        *[]byte
	class    int
	released atomic.Bool
}

// Get is a buffer of n bytes, of stale contents, and its Buffer when it is pooled (nil
// when n is outside the pools' range: then a new, cleared slice).
func Get(n int64) ([]byte, *Buffer) {
	if n <= 0 || n > 1<<maxShift {
		return make([]byte, max(n, 0)), nil
	}
	shift := bits.Len64(uint64(n - 1))
	if shift < minShift {
		return make([]byte, n), nil
	}
	class := shift - minShift
	if p, ok := pools[class].Get().(*[]byte); ok {
		return (*p)[:n], &Buffer{b: p, class: class}
	}
	b := make([]byte, 1<<shift)
	return b[:n], &Buffer{b: &b, class: class}
}

// Release gives the buffer back for another use. The caller must hold no slice of it
// afterwards, nor may anything it handed the slice to. A second call, or a call on nil,
// does nothing.
func (r *Buffer) Release() {
	if r == nil || !r.released.CompareAndSwap(false, true) {
		return
	}
	pools[r.class].Put(r.b)
}
