package group_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var superset = []string{"range", "roundrobin"}

type static2 struct {
	leader, follower string
	gen              int32
}

// static2 is the reference's static2: instances "leader" and "follower" with the
// superset protocols, joined and synced at generation 1 (leader assignment 0x00,
// follower 0x01).
func (w *wire) static2(g string, session int32) static2 {
	w.t.Helper()
	if session == 0 {
		session = 500
	}
	jl := w.async(joinReq(g, joinOpts{instance: "leader", protocols: superset, session: session}))
	// The leader is the first member: the follower joins only once the leader is in.
	w.waitDescribed(g, 5*time.Second, "leader joined", func(d kmsg.DescribeGroupsResponseGroup) bool { return len(d.Members) == 1 })
	jf := w.async(joinReq(g, joinOpts{instance: "follower", protocols: superset, session: session}))
	l := wait[*kmsg.JoinGroupResponse](w.t, jl, 5*time.Second)
	f := wait[*kmsg.JoinGroupResponse](w.t, jf, 5*time.Second)
	wantCode(w.t, "leader join", l.ErrorCode, 0)
	wantCode(w.t, "follower join", f.ErrorCode, 0)
	if l.LeaderID != l.MemberID {
		w.t.Fatalf("leader %s is not %s", l.LeaderID, l.MemberID)
	}
	sf := w.async(syncReq(g, f.MemberID, f.Generation, nil))
	sl := w.do(syncReq(g, l.MemberID, l.Generation, map[string][]byte{l.MemberID: {0}, f.MemberID: {1}})).(*kmsg.SyncGroupResponse)
	wantCode(w.t, "leader sync", sl.ErrorCode, 0)
	wantCode(w.t, "follower sync", wait[*kmsg.SyncGroupResponse](w.t, sf, 5*time.Second).ErrorCode, 0)
	return static2{leader: l.MemberID, follower: f.MemberID, gen: l.Generation}
}

func staticJoin(g, member, instance string, version int16, protocols []string) *kmsg.JoinGroupRequest {
	return joinReq(g, joinOpts{version: version, member: member, instance: instance, protocols: protocols})
}

func staticSync(g, member, instance string, gen int32) *kmsg.SyncGroupRequest {
	r := syncReq(g, member, gen, nil)
	r.InstanceID = &instance
	return r
}

func TestStaticMembership(t *testing.T) {
	t.Run("fencing", func(t *testing.T) {
		w := startWire(t, ptProfile)
		w.createTopics(2, "t")
		s := w.static2("g", 0)
		// Scenario 67, 77, 78: join.
		j := w.do(staticJoin("g", "unknown_member", "leader", 5, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "join unknown member id", j.ErrorCode, kerr.FencedInstanceID.Code)
		j = w.do(staticJoin("g", s.follower, "leader", 5, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "join follower id as leader", j.ErrorCode, kerr.FencedInstanceID.Code)
		j = w.do(staticJoin("g", s.leader, "unknown_instance", 5, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "join unknown instance", j.ErrorCode, kerr.UnknownMemberID.Code)
		// Scenario 79: sync; 66: heartbeat.
		sy := w.do(staticSync("g", "invalid", "leader", s.gen)).(*kmsg.SyncGroupResponse)
		wantCode(t, "sync", sy.ErrorCode, kerr.FencedInstanceID.Code)
		hb := hbReq("g", "invalidMember", s.gen)
		leader := "leader"
		hb.InstanceID = &leader
		wantCode(t, "heartbeat", w.do(hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.FencedInstanceID.Code)
		// Scenario 79: commit.
		oc := commitReq("g", 8, "invalidMember", s.gen, map[string][]int32{"t": {0, 1}})
		oc.InstanceID = &leader
		for _, p := range w.do(oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
			wantCode(t, "commit", p.ErrorCode, kerr.FencedInstanceID.Code)
		}
		// Scenario 84: leave.
		lr := kmsg.NewPtrLeaveGroupRequest()
		lr.Version = 5
		lr.Group = "g"
		lr.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "some_member", InstanceID: &leader}}
		l := w.do(lr).(*kmsg.LeaveGroupResponse)
		wantCode(t, "leave", l.Members[0].ErrorCode, kerr.FencedInstanceID.Code)
	})

	// Scenario 68/69: a follower replaced in Stable with its protocols unchanged: same
	// generation, no rebalance, its assignment; the old id is fenced.
	t.Run("replace follower in Stable", func(t *testing.T) {
		w := startWire(t, ptProfile)
		s := w.static2("g", 0)
		j := w.do(staticJoin("g", "", "follower", 5, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "rejoin", j.ErrorCode, 0)
		if j.Generation != s.gen || len(j.Members) != 0 || j.MemberID == s.follower ||
			!regexp.MustCompile(`^follower-`+uuidRE+`$`).MatchString(j.MemberID) {
			t.Fatalf("rejoin %+v", j)
		}
		if d := describe(w, 5, "g"); d.Groups[0].State != "Stable" {
			t.Fatalf("state %s", d.Groups[0].State)
		}
		sy := w.do(staticSync("g", j.MemberID, "follower", s.gen)).(*kmsg.SyncGroupResponse)
		wantCode(t, "sync", sy.ErrorCode, 0)
		if string(sy.MemberAssignment) != "\x01" {
			t.Fatalf("assignment %x", sy.MemberAssignment)
		}
		old := w.do(staticJoin("g", s.follower, "follower", 5, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "old id join", old.ErrorCode, kerr.FencedInstanceID.Code)
		wantCode(t, "old id sync", w.do(staticSync("g", s.follower, "follower", s.gen)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.FencedInstanceID.Code)
	})

	// Scenario 70: the leader replaced in Stable: v9 skip_assignment with every member;
	// v8 the old leader id and no members.
	t.Run("replace leader v9 and v8", func(t *testing.T) {
		w := startWire(t, ptProfile)
		s := w.static2("g", 0)
		j := w.do(staticJoin("g", "", "leader", 9, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "v9 rejoin", j.ErrorCode, 0)
		if !j.SkipAssignment || j.LeaderID != j.MemberID || len(j.Members) != 2 || j.Generation != s.gen {
			t.Fatalf("v9 rejoin %+v", j)
		}
		j8 := w.do(staticJoin("g", "", "leader", 8, superset)).(*kmsg.JoinGroupResponse)
		wantCode(t, "v8 rejoin", j8.ErrorCode, 0)
		if j8.SkipAssignment || j8.LeaderID != j.MemberID || len(j8.Members) != 0 {
			t.Fatalf("v8 rejoin %+v (leader should be the previous id %s)", j8, j.MemberID)
		}
		wantCode(t, "old leader sync", w.do(staticSync("g", s.leader, "leader", s.gen)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.FencedInstanceID.Code)
		wantCode(t, "old id, no instance", w.do(syncReq("g", s.leader, s.gen, nil)).(*kmsg.SyncGroupResponse).ErrorCode, kerr.UnknownMemberID.Code)
	})

	// Scenario 80: a fresh id on every rejoin.
	t.Run("new id each rejoin", func(t *testing.T) {
		w := startWire(t, ptProfile)
		w.static2("g", 0)
		prev := ""
		for range 5 {
			j := w.do(staticJoin("g", "", "leader", 5, superset)).(*kmsg.JoinGroupResponse)
			wantCode(t, "rejoin", j.ErrorCode, 0)
			if !strings.HasPrefix(j.MemberID, "leader-") || j.MemberID == prev {
				t.Fatalf("member id %q after %q", j.MemberID, prev)
			}
			prev = j.MemberID
		}
	})

	// Scenario 76: a duplicate static member during CompletingRebalance fences the parked
	// SyncGroup and rebalances.
	t.Run("replace in CompletingRebalance", func(t *testing.T) {
		w := startWire(t, ptProfile)
		s := w.static2("g", 1000)
		jl := w.async(staticJoin("g", s.leader, "leader", 5, superset))
		w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
		jf := w.async(staticJoin("g", s.follower, "follower", 5, superset))
		l := wait[*kmsg.JoinGroupResponse](t, jl, 5*time.Second)
		f := wait[*kmsg.JoinGroupResponse](t, jf, 5*time.Second)
		if l.Generation != 2 || f.Generation != 2 {
			t.Fatalf("generations %d %d", l.Generation, f.Generation)
		}
		// Answered before the leader's sync, it would carry code 0.
		parked := w.async(staticSync("g", f.MemberID, "follower", 2))
		dup := w.async(staticJoin("g", "", "follower", 5, superset))
		wantCode(t, "parked sync", wait[*kmsg.SyncGroupResponse](t, parked, 5*time.Second).ErrorCode, kerr.FencedInstanceID.Code)
		if d := describe(w, 5, "g"); d.Groups[0].State != "PreparingRebalance" {
			t.Fatalf("state %s", d.Groups[0].State)
		}
		wantCode(t, "leader rejoin", wait[*kmsg.JoinGroupResponse](t, w.async(staticJoin("g", l.MemberID, "leader", 5, superset)), 5*time.Second).ErrorCode, 0)
		j := wait[*kmsg.JoinGroupResponse](t, dup, 5*time.Second)
		wantCode(t, "duplicate", j.ErrorCode, 0)
		if j.Generation != 3 {
			t.Fatalf("generation %d", j.Generation)
		}
	})

	// Scenario 39: a static member that misses the rejoin is kept until its session
	// expires; the round completes without it.
	t.Run("static member kept", func(t *testing.T) {
		w := startWire(t, ptProfile)
		s := w.static2("g", 5000)
		b := w.async(joinReq("g", joinOpts{version: 3, rebalance: 300}))
		w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
		fj := w.async(staticJoin("g", s.follower, "follower", 5, superset))
		j := wait[*kmsg.JoinGroupResponse](t, b, 5*time.Second)
		wantCode(t, "new member", j.ErrorCode, 0)
		wait[*kmsg.JoinGroupResponse](t, fj, time.Second)
		if j.Generation != 2 {
			t.Fatalf("generation %d", j.Generation)
		}
		d := describe(w, 5, "g")
		if len(d.Groups[0].Members) != 3 {
			t.Fatalf("members %d, want 3 (static leader kept)", len(d.Groups[0].Members))
		}
		hb := hbReq("g", s.leader, 1)
		wantCode(t, "old generation heartbeat", w.do(hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.IllegalGeneration.Code)
	})
}
