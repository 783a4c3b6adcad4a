package partition

import (
	"math"
	"runtime"
	"sync"
	"time"
)

// Throttle bounds the bytes a second the log cleaner reads and writes
// (log.cleaner.io.max.bytes.per.second), every compacted partition's passes together, as
// Apache's Throttler bounds its cleaner threads: bytes are counted as they go, and
// once a check interval has passed, a pass that went faster than the rate sleeps until
// the interval's bytes fit it. It is used by the passes' background jobs only, never in
// an actor's turn: a sleep holds a job, not a partition.
type Throttle struct {
	rate float64 // bytes a second; +Inf or MaxFloat64: none

	mu       sync.Mutex
	start    time.Time
	observed float64

	now   func() time.Time    // time.Now but in tests
	sleep func(time.Duration) // time.Sleep but in tests
}

// throttleCheck is how often the rate is checked (Apache's checkIntervalMs, 300).
const throttleCheck = 300 * time.Millisecond

// NewThrottle is a throttle at rate bytes a second; nil (no bound) when the rate is
// Apache's default, Double.MAX_VALUE, or more.
func NewThrottle(rate float64) *Throttle {
	if rate >= math.MaxFloat64 || math.IsInf(rate, 1) || rate <= 0 {
		return nil
	}
	return &Throttle{rate: rate, start: time.Now(), now: time.Now, sleep: time.Sleep}
}

// wait counts n bytes read or written, and sleeps when the interval's bytes went past
// the rate.
func (t *Throttle) wait(n int) {
	if t == nil || n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observed += float64(n)
	elapsed := t.now().Sub(t.start)
	if elapsed <= throttleCheck {
		return
	}
	if t.observed/elapsed.Seconds() > t.rate {
		if d := time.Duration(t.observed/t.rate*float64(time.Second)) - elapsed; d > 0 {
			t.sleep(d)
		}
	}
	t.start, t.observed = t.now(), 0
}

// pace is called by a pass for each batch it reads (and the one it writes): the
// throttle, then a yield to the goroutines waiting for a processor. A pass is a
// CPU-bound loop of reads from the page cache; without the yield it holds its
// processor for the scheduler's whole 10 ms slice, and on a two-core broker every hop
// of a produce (connection, partition actor, fsync, writer) could wait behind it.
func (j *cleanJob) pace(n int) {
	j.throttle.wait(n)
	runtime.Gosched()
}
