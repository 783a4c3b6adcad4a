package conn

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget is a count of bytes shared by every connection of a broker: the bytes reserved
// by request frames being read (queued.max.request.bytes), or the bytes of responses
// built and not yet written (queued.max.response.bytes). It is built once at start and
// handed to every connection, like a buffer pool; its count is its own, behind a mutex.
// A nil *Budget has no limit and counts nothing.
type Budget struct {
	limit int64
	gauge prometheus.Gauge // may be nil

	mu      sync.Mutex
	used    int64
	freed   chan struct{} // closed (and replaced) when bytes are released; nil until waited on
	onFree  []func()      // called once, from Release, then dropped
	waiting prometheus.Gauge
}

// NewBudget makes a budget of limit bytes; gauge (optional) follows the bytes in use and
// waiting (optional) the callers blocked in Acquire.
func NewBudget(limit int64, gauge, waiting prometheus.Gauge) *Budget {
	return &Budget{limit: limit, gauge: gauge, waiting: waiting}
}

// Limit is the budget's size.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 1<<63 - 1
	}
	return b.limit
}

// Used is the bytes counted now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Free is the bytes left (zero or less when the budget is spent).
func (b *Budget) Free() int64 {
	if b == nil {
		return 1<<63 - 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit - b.used
}

// Acquire takes n bytes, waiting while they would take the count past the limit. A
// request larger than the whole budget is granted when nothing else is counted, so it
// waits but is never refused. It returns false, having taken nothing, when cancel closes.
func (b *Budget) Acquire(n int64, cancel <-chan struct{}) bool {
	if b == nil || n <= 0 {
		return true
	}
	counted := false
	defer func() {
		if counted && b.waiting != nil {
			b.waiting.Dec()
		}
	}()
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.setGauge()
			b.mu.Unlock()
			return true
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		if !counted && b.waiting != nil {
			counted = true
			b.waiting.Inc()
		}
		select {
		case <-freed:
		case <-cancel:
			return false
		}
	}
}

// Add counts n bytes whatever the limit (a response already built).
func (b *Budget) Add(n int64) {
	if b == nil || n == 0 {
		return
	}
	if n < 0 {
		b.Release(-n)
		return
	}
	b.mu.Lock()
	b.used += n
	b.setGauge()
	b.mu.Unlock()
}

// Release gives n bytes back and wakes whoever waits for them.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.setGauge()
	freed := b.freed
	b.freed = nil
	var fns []func()
	if b.used < b.limit {
		fns = b.onFree
		b.onFree = nil
	}
	b.mu.Unlock()
	if freed != nil {
		close(freed)
	}
	for _, f := range fns {
		f()
	}
}

// OnFree calls f once when bytes are next released with the count under the limit, or
// at once when it is under the limit now. f must not block (it sends a message).
func (b *Budget) OnFree(f func()) {
	if b == nil {
		f()
		return
	}
	b.mu.Lock()
	if b.used < b.limit {
		b.mu.Unlock()
		f()
		return
	}
	b.onFree = append(b.onFree, f)
	b.mu.Unlock()
}

func (b *Budget) setGauge() {
	if b.gauge != nil {
		b.gauge.Set(float64(b.used))
	}
}
