// Package actortest holds what tests of actors share: the goleak options that ignore
// protoactor-go's own short-lived background goroutines, and a synctest bubble that lets
// them end.
package actortest

import (
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// LeakOptions are extra goleak options for tests that start actor systems: protoactor's
// dead-letter throttle runs a goroutine for its interval (a second) after the first dead
// letter — a late reply to a stopped actor — whatever the test does.
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}, extra...)
}

// DeadLetterThrottleInterval is protoactor's default (actor.Config).
const DeadLetterThrottleInterval = time.Second

// Bubble is synctest.Test for tests of actors. After f (and what it defers) it lets the
// fake clock run past protoactor's dead-letter throttle interval: the first dead letter
// of an interval (a late reply to an actor that has stopped) starts a goroutine that
// waits out the interval, and no goroutine may outlive its bubble. On the fake clock the
// wait takes no real time.
func Bubble(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		f(t)
		time.Sleep(DeadLetterThrottleInterval)
	})
}
