package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func pendingJoin(g string) *JoinGroup {
	j := joinMsg(g, "", 30*time.Minute, time.Minute)
	j.RequireKnownMemberID = true
	return j
}

// KIP-394 pending members are bounded per group (group.max.pending.members: the next
// empty-id JoinGroup gets GROUP_MAX_SIZE_REACHED) and per broker
// (group.max.pending.members.total: COORDINATOR_LOAD_IN_PROGRESS, which clients retry).
// A pending member that rejoins, expires or leaves frees its place.
func TestPendingMembersBounded(t *testing.T) {
	budget := NewPendingBudget(5)
	bubble(t, func(s *Settings) { s.MaxPendingMembers = 3; s.Pending = budget }, func(t *testing.T, h *harness) {
		var ids []string
		for i := range 3 {
			r := call[*JoinResult](h, pendingJoin("a"))
			if r.ErrorCode != kerr.MemberIDRequired.Code {
				t.Fatalf("join %d: %d", i, r.ErrorCode)
			}
			ids = append(ids, r.MemberID)
		}
		if r := call[*JoinResult](h, pendingJoin("a")); r.ErrorCode != kerr.GroupMaxSizeReached.Code || r.MemberID != "" {
			t.Fatalf("4th pending member of a: %+v, want GROUP_MAX_SIZE_REACHED", r)
		}
		// The broker holds 3 of its 5; group b gets 2, then the broker is full.
		for i := range 2 {
			if r := call[*JoinResult](h, pendingJoin("b")); r.ErrorCode != kerr.MemberIDRequired.Code {
				t.Fatalf("b join %d: %d", i, r.ErrorCode)
			}
		}
		if r := call[*JoinResult](h, pendingJoin("b")); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			t.Fatalf("pending member past the broker's bound: %d, want COORDINATOR_LOAD_IN_PROGRESS", r.ErrorCode)
		}
		// One of a's pending members leaves: b may add one.
		if r := call[*LeaveResult](h, &LeaveGroup{Group: "a", Members: []LeaveMember{{MemberID: ids[0]}}}); r.ErrorCode != 0 {
			t.Fatalf("leave %+v", r)
		}
		if r := call[*JoinResult](h, pendingJoin("b")); r.ErrorCode != kerr.MemberIDRequired.Code {
			t.Fatalf("after a leave: %d", r.ErrorCode)
		}
		// They all expire after their session timeout: the broker's places are free again.
		time.Sleep(30*time.Minute + time.Second)
		if n := budget.Count(); n != 0 {
			t.Fatalf("%d pending members counted after they all expired", n)
		}
		for i := range 3 {
			if r := call[*JoinResult](h, pendingJoin("c")); r.ErrorCode != kerr.MemberIDRequired.Code {
				t.Fatalf("c join %d: %d", i, r.ErrorCode)
			}
		}
	})
	if n := budget.Count(); n != 0 {
		t.Fatalf("%d pending members counted after the groups stopped", n)
	}
}
