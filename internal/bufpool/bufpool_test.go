package bufpool

import "testing"

// A buffer comes from its size's pool when pooled, is as long as asked, and goes back
// once however many times it is released.
func TestPools(t *testing.T) {
	for _, n := range []int64{1, 100, 16<<10 - 1, 16 << 10, 16<<10 + 1, 1 << 20, 3<<20 + 5, 64 << 20, 64<<20 + 1} {
		b, rb := Get(n)
		if int64(len(b)) != n {
			t.Fatalf("Get(%d): %d bytes", n, len(b))
		}
		pooled := n > 1<<(minShift-1) && n <= 1<<maxShift // above 8 KiB, rounded up to 16 KiB and up
		if (rb != nil) != pooled {
			t.Fatalf("Get(%d): pooled %v, want %v", n, rb != nil, pooled)
		}
		if rb != nil && int64(cap(*rb.b)) < n {
			t.Fatalf("Get(%d): class of %d bytes", n, cap(*rb.b))
		}
		rb.Release()
		rb.Release() // a second release does nothing
	}
}
