package partition

import "testing"

// A read buffer comes from its size's pool when pooled, is as long as asked, and goes
// back once however many times it is released.
func TestReadBufPools(t *testing.T) {
	for _, n := range []int64{1, 100, 16<<10 - 1, 16 << 10, 16<<10 + 1, 1 << 20, 3<<20 + 5, 16 << 20, 16<<20 + 1} {
		b, rb := readBuf(n)
		if int64(len(b)) != n {
			t.Fatalf("readBuf(%d): %d bytes", n, len(b))
		}
		pooled := n > 1<<(readBufMinShift-1) && n <= 1<<readBufMaxShift // above 8 KiB, rounded up to 16 KiB and up
		if (rb != nil) != pooled {
			t.Fatalf("readBuf(%d): pooled %v, want %v", n, rb != nil, pooled)
		}
		if rb != nil && int64(cap(*rb.b)) < n {
			t.Fatalf("readBuf(%d): class of %d bytes", n, cap(*rb.b))
		}
		rb.Release()
		rb.Release() // a second release does nothing
	}
}
