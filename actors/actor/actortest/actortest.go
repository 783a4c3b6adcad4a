// Package actortest holds what tests of actors share: the goleak options that ignore
// protoactor-go's own short-lived background goroutines.
package actortest

import "go.uber.org/goleak"

// LeakOptions are extra goleak options for tests that start actor systems: protoactor's
// dead-letter throttle runs a goroutine for its interval (a second) after the first dead
// letter — a late reply to a stopped actor — whatever the test does.
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}, extra...)
}
