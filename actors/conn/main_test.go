package conn

import (
	"testing"

	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
)

// TestMain checks that the connections the tests close leave no goroutine behind: no
// reader, writer, actor or timer.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, actortest.LeakOptions()...)
}
