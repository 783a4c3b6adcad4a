// Package testwait is the one way kaas's tests wait for a condition they can only poll:
// a file, a metric, a log line, another process's answer. It is nats-server's checkFor:
// call the condition every poll until it returns nil, and fail with the last error it
// returned when the timeout passes first. A test that can wait on an event (a channel, a
// subscription, a reply) waits on that instead, and a test of timers runs in a synctest
// bubble (actors/actor/actortest.Bubble); see docs/architecture.md, Testing layers.
package testwait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// For calls cond every poll until it returns nil, and fails t (Fatal) with cond's last
// error once timeout has passed and cond still fails. cond runs at least once, and its
// last call ends at or after the deadline, so a condition met just in time is not
// missed. For must be called from the goroutine running the test, as t.Fatal must;
// other goroutines use Until.
func For(t testing.TB, timeout, poll time.Duration, cond func() error) {
	t.Helper()
	if err := Until(timeout, poll, cond); err != nil {
		t.Fatal(err)
	}
}

// Until is For that returns instead of failing: nil once cond returns nil, or an error
// carrying cond's last error (errors.Is and As see it) once timeout has passed.
func Until(timeout, poll time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(min(poll, time.Until(deadline)))
	}
}

// Cond is a yes/no condition as For's: while cond is false its error is what, the thing
// waited for.
func Cond(what string, cond func() bool) func() error {
	return func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	}
}
