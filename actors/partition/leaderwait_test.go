package partition

import (
	"sync/atomic"
	"testing"
	"time"

	"kaas/actors/actor"
)

// describeHeld sends a Describe of topic that may wait wait for its leader, answered on
// the returned channel (synchronously, in the manager's turn).
func (h *harness) describeHeld(topic string, wait time.Duration) chan *Described {
	ch := make(chan *Described, 1)
	h.sys.Send(h.pid, &Describe{Names: []string{topic}, WaitLeader: wait,
		Reply: actor.PromiseFunc(func(v any) { ch <- v.(*Described) })})
	return ch
}

// In a cluster, a Describe that may wait for a leader is held while a partition of its
// topic has none (it is moving), and answered with the new leader once there is one,
// so Metadata names the broker that took the partition over instead of answering
// LEADER_NOT_AVAILABLE, after which clients wait out their metadata age (franz-go 5 s:
// the kill failover bench measured every partition delivering again after 5.0-5.3 s).
// Past its wait it is answered as things stand; a Describe that may not wait is
// answered at once.
func TestDescribeWaitsForALeader(t *testing.T) {
	var leader atomic.Int32
	h := newHarness(t, t.TempDir(), asBroker(0, &leader, nil))
	if ti := h.create("moving", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}

	leader.Store(-1) // broker 0 is gone; broker 2 has not opened the partition yet
	held := h.describeHeld("moving", time.Minute)
	if ti := h.describe("moving"); ti.Partitions[0].Leader != -1 {
		t.Fatalf("a Describe that may not wait: leader %d, want -1 at once", ti.Partitions[0].Leader)
	}
	select {
	case d := <-held:
		t.Fatalf("answered while no broker leads the partition: %+v", d.Topics)
	default: // the manager answered the later Describe, so it has handled this one
	}
	leader.Store(2)
	select {
	case d := <-held:
		if p := d.Topics[0].Partitions[0]; d.Topics[0].ErrorCode != 0 || p.Leader != 2 || p.Replica != 2 {
			t.Fatalf("held Describe answered %+v, want leader 2", d.Topics[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held Describe was not answered once broker 2 led the partition")
	}

	leader.Store(-1)
	select {
	case d := <-h.describeHeld("moving", 50*time.Millisecond):
		if p := d.Topics[0].Partitions[0]; p.Leader != -1 {
			t.Fatalf("answered past its wait with leader %d, want -1", p.Leader)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Describe past its wait was not answered")
	}

	held = h.describeHeld("moving", time.Minute)
	h.stop()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("a held Describe was not answered when the manager stopped")
	}
}
