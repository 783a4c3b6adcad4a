package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// shrinkMaxSize lowers a live group's group.max.size, as a broker restarted with a smaller
// setting finds a group loaded with its members in Apache. kaas keeps no members across a
// restart and reads its settings at start, so only a test can make a group larger than
// its maximum.
type shrinkMaxSize struct {
	group string
	max   int
}

func (m *shrinkMaxSize) GroupID() string                 { return m.group }
func (m *shrinkMaxSize) withReply(actor.Promise) Request { return m }
func (m *shrinkMaxSize) fail(int16)                      {}
func (m *shrinkMaxSize) AnswerCrash(*actor.Crashed)      {}
func (m *shrinkMaxSize) inject(g *groupActor)            { g.cfg.Settings.MaxSize = m.max }

// Scenario 32: a Stable group of 6 whose maximum is now 4 rebalances; all 6 rejoin in
// order: the first 4 are accepted (they are counted as they rejoin), the last 2 get
// GROUP_MAX_SIZE_REACHED and are removed (GCT::testLastJoiningMembersAreKickedOutWhen
// ReJoiningGroupWithMaxSize).
func TestLastRejoiningMembersKickedOutOverMaxSize(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 50 * time.Millisecond; s.MaxSize = 10 }, func(t *testing.T, h *harness) {
		var ws []*actor.Waiter
		for range 6 {
			ws = append(ws, h.send(joinMsg("g", "", time.Minute, time.Second)))
		}
		ids := make([]string, 6)
		var leader string
		for i, w := range ws {
			r := get[*JoinResult](t, w)
			if r.ErrorCode != 0 || r.Generation != 1 {
				t.Fatalf("join %d: %+v", i, r)
			}
			ids[i], leader = r.MemberID, r.Leader
		}
		if leader != ids[0] {
			t.Fatalf("leader %s, want the first member %s", leader, ids[0])
		}
		for _, id := range ids {
			if r := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: id, Generation: 1}); r.ErrorCode != 0 {
				t.Fatalf("sync %s: %d", id, r.ErrorCode)
			}
		}
		h.sys.Send(h.mgr, &shrinkMaxSize{group: "g", max: 4})

		// The leader's rejoin starts the rebalance; the others follow in order.
		ws = ws[:0]
		for _, id := range ids {
			ws = append(ws, h.send(joinMsg("g", id, time.Minute, time.Second)))
		}
		for i, w := range ws {
			r := get[*JoinResult](t, w)
			switch {
			case i < 4 && (r.ErrorCode != 0 || r.Generation != 2):
				t.Fatalf("member %d: %+v, want generation 2", i, r)
			case i >= 4 && r.ErrorCode != kerr.GroupMaxSizeReached.Code:
				t.Fatalf("member %d: error %d, want GROUP_MAX_SIZE_REACHED", i, r.ErrorCode)
			}
		}
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if len(d.Members) != 4 || d.State != "CompletingRebalance" {
			t.Fatalf("after the rebalance: %s with %d members", d.State, len(d.Members))
		}
		for _, m := range d.Members {
			if m.MemberID == ids[4] || m.MemberID == ids[5] {
				t.Fatalf("rejected member %s still in the group", m.MemberID)
			}
		}
	})
}
