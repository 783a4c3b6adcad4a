package group

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func sp(s string) *string { return &s }

func TestValidateConsumerHeartbeat(t *testing.T) {
	join := HeartbeatShape{Version: 1, Group: "g", MemberID: "m", RebalanceTimeout: 1000, Subscribed: []string{"t"}, OwnedEmpty: true}
	with := func(f func(*HeartbeatShape)) HeartbeatShape { s := join; f(&s); return s }
	assignors := []string{"uniform", "range"}
	for _, c := range []struct {
		name string
		r    HeartbeatShape
		want int16
	}{
		{"join", join, 0},
		{"v0 join without member id", with(func(s *HeartbeatShape) { s.Version, s.MemberID = 0, "" }), 0},
		{"v1 join without member id", with(func(s *HeartbeatShape) { s.MemberID = "" }), kerr.InvalidRequest.Code},
		{"v0 leave without member id", with(func(s *HeartbeatShape) { s.Version, s.MemberID, s.MemberEpoch = 0, "", -1 }), kerr.InvalidRequest.Code},
		{"empty group", with(func(s *HeartbeatShape) { s.Group = "" }), kerr.InvalidRequest.Code},
		{"empty instance", with(func(s *HeartbeatShape) { s.InstanceID = sp("") }), kerr.InvalidRequest.Code},
		{"empty rack", with(func(s *HeartbeatShape) { s.RackID = sp("") }), kerr.InvalidRequest.Code},
		{"join, no rebalance timeout", with(func(s *HeartbeatShape) { s.RebalanceTimeout = -1 }), kerr.InvalidRequest.Code},
		{"join, owned null", with(func(s *HeartbeatShape) { s.OwnedNull, s.OwnedEmpty = true, true }), kerr.InvalidRequest.Code},
		{"join, owned", with(func(s *HeartbeatShape) { s.OwnedEmpty = false }), kerr.InvalidRequest.Code},
		{"join, no subscription", with(func(s *HeartbeatShape) { s.Subscribed = nil }), kerr.InvalidRequest.Code},
		{"join, empty subscription", with(func(s *HeartbeatShape) { s.Subscribed = []string{} }), 0},
		{"-2 without instance", with(func(s *HeartbeatShape) { s.MemberEpoch = -2 }), kerr.InvalidRequest.Code},
		{"-2 with instance", with(func(s *HeartbeatShape) { s.MemberEpoch, s.InstanceID = -2, sp("i") }), 0},
		{"-3", with(func(s *HeartbeatShape) { s.MemberEpoch = -3 }), kerr.InvalidRequest.Code},
		{"keepalive", HeartbeatShape{Version: 1, Group: "g", MemberID: "m", MemberEpoch: 4, RebalanceTimeout: -1, OwnedNull: true, OwnedEmpty: true}, 0},
		{"range", with(func(s *HeartbeatShape) { s.ServerAssignor = sp("range") }), 0},
		{"unknown assignor", with(func(s *HeartbeatShape) { s.ServerAssignor = sp("cooperative-sticky") }), kerr.UnsupportedAssignor.Code},
		{"regex only", with(func(s *HeartbeatShape) { s.Subscribed, s.Regex = nil, sp("t.*") }), 0},
		{"bad regex (the group refuses it)", with(func(s *HeartbeatShape) { s.Regex = sp("(") }), 0},
	} {
		if got, msg := ValidateConsumerHeartbeat(c.r, assignors); got != c.want {
			t.Errorf("%s: %d (%s), want %d", c.name, got, msg, c.want)
		}
	}
}

func a(kv ...any) assignment {
	out := assignment{}
	for i := 0; i < len(kv); i += 2 {
		for _, p := range kv[i+1].([]int32) {
			out.add(kv[i].(string), p)
		}
	}
	return out
}

func TestReconcile(t *testing.T) {
	none := func(string, int32) bool { return false }
	held := func(t string, p int32) bool { return t == "t" && p == 3 }
	for _, c := range []struct {
		name               string
		state              memberState
		epoch              int32
		assigned, revoking assignment
		target             assignment
		owned              assignment
		other              func(string, int32) bool
		want               reconciled
	}{
		{"stable at target", memberStable, 5, a("t", []int32{0}), assignment{}, a("t", []int32{0}), nil, none,
			reconciled{memberStable, 5, a("t", []int32{0}), assignment{}}},
		{"new member, free partitions", memberStable, 0, assignment{}, assignment{}, a("t", []int32{0, 1}), assignment{}, none,
			reconciled{memberStable, 6, a("t", []int32{0, 1}), assignment{}}},
		{"must revoke first, keeps its epoch", memberStable, 5, a("t", []int32{0, 1, 2}), assignment{}, a("t", []int32{0, 4}),
			a("t", []int32{0, 1, 2}), none, reconciled{memberUnrevoked, 5, a("t", []int32{0}), a("t", []int32{1, 2})}},
		{"still revoking (keepalive counts as owning)", memberUnrevoked, 5, a("t", []int32{0}), a("t", []int32{1, 2}), a("t", []int32{0, 4}),
			nil, none, reconciled{memberUnrevoked, 5, a("t", []int32{0}), a("t", []int32{1, 2})}},
		{"revoked, gets the new one", memberUnrevoked, 5, a("t", []int32{0}), a("t", []int32{1, 2}), a("t", []int32{0, 4}),
			a("t", []int32{0}), none, reconciled{memberStable, 6, a("t", []int32{0, 4}), assignment{}}},
		{"partition still held by another", memberStable, 5, a("t", []int32{0}), assignment{}, a("t", []int32{0, 3}),
			a("t", []int32{0}), held, reconciled{memberUnreleased, 6, a("t", []int32{0}), assignment{}}},
		{"client already dropped the revoked ones", memberStable, 5, a("t", []int32{0, 1}), assignment{}, a("t", []int32{0}),
			a("t", []int32{0}), none, reconciled{memberStable, 6, a("t", []int32{0}), assignment{}}},
	} {
		got := reconcile(c.state, c.epoch, c.assigned, c.revoking, c.target, 6, c.owned, c.other)
		if c.name == "stable at target" {
			got = reconcile(c.state, c.epoch, c.assigned, c.revoking, c.target, 5, c.owned, c.other)
		}
		if got.state != c.want.state || got.epoch != c.want.epoch || !got.assigned.equal(c.want.assigned) || !got.revoking.equal(c.want.revoking) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestEpochChecks(t *testing.T) {
	owned, assigned := a("t", []int32{0}), a("t", []int32{0, 1})
	for _, c := range []struct {
		name                  string
		got, epoch, prevEpoch int32
		owned                 assignment
		want                  int16
	}{
		{"same", 5, 5, 4, owned, 0},
		{"ahead", 6, 5, 4, owned, kerr.FencedMemberEpoch.Code},
		{"previous, owned within", 4, 5, 4, owned, 0},
		{"previous, owned null", 4, 5, 4, nil, kerr.FencedMemberEpoch.Code},
		{"previous, owned beyond", 4, 5, 4, a("t", []int32{2}), kerr.FencedMemberEpoch.Code},
		{"older", 3, 5, 4, owned, kerr.FencedMemberEpoch.Code},
	} {
		if got := epochCheck(c.got, c.epoch, c.prevEpoch, c.owned, assigned); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	stale := kerr.StaleMemberEpoch.Code
	for _, c := range []struct {
		name       string
		got, epoch int32
		holds      bool
		since      int32
		want       int16
	}{
		{"member's epoch", 5, 5, false, 0, 0},
		{"above", 6, 5, true, 1, stale},
		{"older, held since then (KIP-1251)", 3, 5, true, 3, 0},
		{"older, held since later", 3, 5, true, 4, stale},
		{"older, not held", 3, 5, false, 1, stale},
	} {
		if got := commitEpochCheck(c.got, c.epoch, c.holds, c.since); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
