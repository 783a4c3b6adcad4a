package group_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/testwait"
)

// Scenario 28 over the wire: the protocol vote.
func TestProtocolVote(t *testing.T) {
	w := startWire(t, ptProfile)
	var chs []<-chan kmsg.Response
	for _, ps := range [][]string{{"range", "roundrobin"}, {"roundrobin", "range"}, {"roundrobin", "range"}} {
		chs = append(chs, w.async(joinReq("g", joinOpts{version: 3, protocols: ps})))
	}
	for _, ch := range chs {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
		if j.Protocol == nil || *j.Protocol != "roundrobin" {
			t.Fatalf("protocol %v, want roundrobin", j.Protocol)
		}
	}
}

// Scenarios 17, 18: protocol type and protocol checks against the group.
func TestInconsistentProtocol(t *testing.T) {
	w := startWire(t, ptProfile)
	a := w.async(joinReq("g", joinOpts{version: 3, protocols: []string{"range"}}))
	w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
	j := w.do(joinReq("g", joinOpts{ptype: "connect"})).(*kmsg.JoinGroupResponse)
	wantCode(t, "other protocol type", j.ErrorCode, kerr.InconsistentGroupProtocol.Code)
	j = w.do(joinReq("g", joinOpts{protocols: []string{"roundrobin"}})).(*kmsg.JoinGroupResponse)
	wantCode(t, "no common protocol", j.ErrorCode, kerr.InconsistentGroupProtocol.Code)
	wantCode(t, "first member", wait[*kmsg.JoinGroupResponse](t, a, 5*time.Second).ErrorCode, 0)
}

// Scenario 29/30: group.max.size.
func TestGroupMaxSize(t *testing.T) {
	w := startWire(t, ptProfile)
	var chs []<-chan kmsg.Response
	for range 5 {
		chs = append(chs, w.async(joinReq("g", joinOpts{version: 3, rebalance: 100})))
	}
	ok, full := 0, 0
	for _, ch := range chs {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
		switch j.ErrorCode {
		case 0:
			ok++
		case kerr.GroupMaxSizeReached.Code:
			full++
			if j.MemberID != "" {
				t.Fatalf("rejected member id %q", j.MemberID)
			}
		default:
			t.Fatalf("join: %s", codeName(j.ErrorCode))
		}
	}
	if ok != 4 || full != 1 {
		t.Fatalf("%d joined, %d rejected; want 4 and 1", ok, full)
	}
	j := w.do(joinReq("g", joinOpts{version: 3})).(*kmsg.JoinGroupResponse)
	wantCode(t, "fifth member later", j.ErrorCode, kerr.GroupMaxSizeReached.Code)
}

// Scenario 38: a dynamic member that does not rejoin within the rebalance timeout is
// evicted; Heartbeat tells it REBALANCE_IN_PROGRESS, then UNKNOWN_MEMBER_ID.
func TestEvictionOnRebalanceTimeout(t *testing.T) {
	w := startWire(t, ptProfile)
	a := w.stable1("g")
	b := w.async(joinReq("g", joinOpts{version: 3}))
	// b's join travels on its own connection: wait until it has started the rebalance.
	w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
	wantCode(t, "heartbeat during rebalance", w.do(hbReq("g", a, 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.RebalanceInProgress.Code)
	j := wait[*kmsg.JoinGroupResponse](t, b, 5*time.Second)
	wantCode(t, "new member", j.ErrorCode, 0)
	if j.Generation != 2 || j.LeaderID != j.MemberID || len(j.Members) != 1 {
		t.Fatalf("join %+v", j)
	}
	wantCode(t, "evicted heartbeat", w.do(hbReq("g", a, 1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
}

// Scenario 25, 26: the leader rejoining a Stable group rebalances at once; an unchanged
// follower's rejoin does not.
func TestRejoinStable(t *testing.T) {
	w := startWire(t, ptProfile)
	a := w.stable1("g")
	j := wait[*kmsg.JoinGroupResponse](t, w.async(joinReq("g", joinOpts{version: 3, member: a})), time.Second)
	wantCode(t, "leader rejoin", j.ErrorCode, 0)
	if j.Generation != 2 {
		t.Fatalf("generation %d", j.Generation)
	}
	b := w.async(joinReq("g", joinOpts{version: 3}))
	// b's join travels on its own connection: a rejoins once b has started the rebalance.
	w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
	ja := w.async(joinReq("g", joinOpts{version: 3, member: a}))
	jb := wait[*kmsg.JoinGroupResponse](t, b, 5*time.Second)
	wait[*kmsg.JoinGroupResponse](t, ja, 5*time.Second)
	again := w.do(joinReq("g", joinOpts{version: 3, member: jb.MemberID})).(*kmsg.JoinGroupResponse)
	wantCode(t, "unchanged follower", again.ErrorCode, 0)
	if again.Generation != jb.Generation || len(again.Members) != 0 {
		t.Fatalf("follower rejoin %+v", again)
	}
}

// Scenarios 53-56: members that never send SyncGroup are removed when the rebalance
// timeout passes.
func TestSyncTimeout(t *testing.T) {
	type run struct {
		name        string
		leaderSyncs bool
		followSync  bool
		leaderHB    int16
		followerHB  int16
	}
	for _, r := range []run{
		{"nobody", false, false, kerr.UnknownMemberID.Code, kerr.UnknownMemberID.Code},
		{"leader only", true, false, kerr.RebalanceInProgress.Code, kerr.UnknownMemberID.Code},
		{"followers only", false, true, kerr.UnknownMemberID.Code, kerr.RebalanceInProgress.Code},
		{"all", true, true, 0, 0},
	} {
		t.Run(r.name, func(t *testing.T) {
			w := startWire(t, ptProfile)
			var chs []<-chan kmsg.Response
			for range 3 {
				chs = append(chs, w.async(joinReq("g", joinOpts{version: 3, session: 5000, rebalance: 300})))
			}
			var leader string
			var followers []string
			var gen int32
			for _, ch := range chs {
				j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
				gen, leader = j.Generation, j.LeaderID
				if j.MemberID != j.LeaderID {
					followers = append(followers, j.MemberID)
				}
			}
			var fsyncs []<-chan kmsg.Response
			if r.followSync {
				for _, f := range followers {
					fsyncs = append(fsyncs, w.async(syncReq("g", f, gen, nil)))
				}
			}
			if r.leaderSyncs {
				wantCode(t, "leader sync", w.do(syncReq("g", leader, gen, nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
			}
			for _, ch := range fsyncs {
				want := int16(0)
				if !r.leaderSyncs {
					want = kerr.RebalanceInProgress.Code
				}
				wantCode(t, "follower sync", wait[*kmsg.SyncGroupResponse](t, ch, 5*time.Second).ErrorCode, want)
			}
			start := time.Now()
			testwait.For(t, 5*time.Second, 5*time.Millisecond, func() error {
				lh := w.do(hbReq("g", leader, gen)).(*kmsg.HeartbeatResponse).ErrorCode
				fh := w.do(hbReq("g", followers[0], gen)).(*kmsg.HeartbeatResponse).ErrorCode
				if lh == r.leaderHB && fh == r.followerHB && (r.leaderHB != 0 || time.Since(start) > 400*time.Millisecond) {
					return nil
				}
				return fmt.Errorf("heartbeats %s/%s, want %s/%s", codeName(lh), codeName(fh), codeName(r.leaderHB), codeName(r.followerHB))
			})
		})
	}
}

// Scenarios 43, 46, 47, 49, 50, 51: SyncGroup checks and assignments.
func TestSyncGroup(t *testing.T) {
	w := startWire(t, ptProfile)
	wantCode(t, "unknown group", w.do(syncReq("nope", "m", 1, nil)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.UnknownMemberID.Code)
	m, ch := w.dynJoin("g", joinOpts{})
	j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
	wantCode(t, "unknown member", w.do(syncReq("g", "blah", j.Generation, nil)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.UnknownMemberID.Code)
	wantCode(t, "generation", w.do(syncReq("g", m, j.Generation+1, nil)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.IllegalGeneration.Code)
	// v5: type and name required, and checked.
	s5 := syncReq("g", m, j.Generation, nil)
	s5.Version = 5
	wantCode(t, "v5 null fields", w.do(s5).(*kmsg.SyncGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)
	wrong, consumer, rng := "whatever", "consumer", "range"
	s5.ProtocolType, s5.Protocol = &wrong, &rng
	wantCode(t, "v5 wrong type", w.do(s5).(*kmsg.SyncGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)
	s5.ProtocolType, s5.Protocol = &consumer, &wrong
	wantCode(t, "v5 wrong name", w.do(s5).(*kmsg.SyncGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)
	// The leader leaves itself out: it gets an empty assignment.
	s5.Protocol = &rng
	s5.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "someone-else", MemberAssignment: []byte{9}}}
	r := w.do(s5).(*kmsg.SyncGroupResponse)
	wantCode(t, "v5 sync", r.ErrorCode, 0)
	if len(r.MemberAssignment) != 0 || r.ProtocolType == nil || *r.ProtocolType != "consumer" || r.Protocol == nil || *r.Protocol != "range" {
		t.Fatalf("v5 sync %+v", r)
	}
	s0 := syncReq("g", m, j.Generation, nil)
	s0.Version = 0
	wantCode(t, "v0 sync when Stable", w.do(s0).(*kmsg.SyncGroupResponse).ErrorCode, 0)
}
