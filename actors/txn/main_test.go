package txn

import (
	"testing"

	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, actortest.LeakOptions()...)
}
