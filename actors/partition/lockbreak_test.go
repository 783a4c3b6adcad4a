package partition

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A leader that broke the lock of a paused broker holds the partition as firmly as one
// that took it free: once the paused broker resumes and lets its lock go, a third broker
// that also believes it leads (its view of ownership moved on first) waits for the
// leader that broke the lock, rather than taking the freed lock and writing the same
// offsets beside it.
func TestBrokenLockHeldAgainstTheNextLeader(t *testing.T) {
	dir := t.TempDir()
	var leader0 atomic.Int32
	old := newHarness(t, dir, asBroker(0, &leader0, nil))
	old.createWith("t", 3, "a")
	// Broker 0 is paused, as far as the others can tell: it keeps its lock.
	var leader1 atomic.Int32
	leader1.Store(1)
	x := newHarness(t, dir, asBroker(1, &leader1, func(id int32) bool { return id == 0 }))
	if r := x.produceOnceLed("t", 0, []byte("x1")); r.BaseOffset != 3 {
		t.Fatalf("first produce on the leader that broke the lock at %d, want 3", r.BaseOffset)
	}
	// Broker 0 resumes and stops; broker 2's view gives it the partition while broker 1
	// still leads it.
	old.stop()
	var leader2 atomic.Int32
	leader2.Store(2)
	y := newHarness(t, dir, asBroker(2, &leader2, func(int32) bool { return false }))
	defer y.stop()
	r := y.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("y1")))
	if r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("broker 2 produced while broker 1 leads: %+v, want NOT_LEADER_OR_FOLLOWER", r)
	}
	if r := x.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("x2"))); r.ErrorCode != 0 || r.BaseOffset != 4 {
		t.Fatalf("broker 1's second produce: %+v, want offset 4", r)
	}
	// Broker 1 lets the partition go; broker 2 then takes it and goes on past 4.
	x.stop()
	if r := y.produceOnceLed("t", 0, []byte("y2")); r.BaseOffset != 5 {
		t.Fatalf("broker 2's first produce at %d, want 5", r.BaseOffset)
	}
	_, _, values := y.batchesFrom("t", 0, 0)
	if want := []string{"a", "a", "a", "x1", "x2", "y2"}; !slices.Equal(values, want) {
		t.Fatalf("broker 2 serves %v, want %v", values, want)
	}
}
