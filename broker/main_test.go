package broker_test

import (
	"testing"

	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
)

// TestMain checks that brokers stopped by the tests leave no goroutine behind: no
// connection reader or writer, actor, timer or HTTP server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, actortest.LeakOptions()...)
}
