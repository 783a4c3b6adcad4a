package logs

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Limiter lets the first event through, then at most one per interval; each event it lets
// through after others were held back carries their number in a "suppressed" field. One
// Limiter stands for one kind of event (one message): a failing disk makes every write
// fail, and one line a second saying so, with a count, tells the operator as much as
// hundreds do. Safe for concurrent use; the zero value is not usable, use NewLimiter.
type Limiter struct {
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time // when the last event was let through; zero: none yet
	suppressed int
}

// NewLimiter lets one event through per interval.
func NewLimiter(interval time.Duration) *Limiter {
	return &Limiter{interval: interval, now: time.Now}
}

// Allow reports whether an event happening now is to be logged, and if so how many
// events it held back since the last one it let through.
func (l *Limiter) Allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

// Event returns e with the count of held-back events added when it is let through
// (Allow), and nil otherwise: every method of a nil *zerolog.Event does nothing, so
//
//	lim.Event(log.Error()).Err(err).Msg("offsets_journal_write_failed")
//
// logs at most one line per interval.
func (l *Limiter) Event(e *zerolog.Event) *zerolog.Event {
	if e == nil {
		return nil
	}
	ok, n := l.Allow()
	if !ok {
		e.Discard()
		return nil
	}
	if n > 0 {
		e = e.Int("suppressed", n)
	}
	return e
}
