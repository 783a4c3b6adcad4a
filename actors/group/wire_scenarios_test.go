package group_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/config"
	"kaas/internal/testwait"
)

// waitDescribed polls DescribeGroups until ok holds for g, within d.
func (w *wire) waitDescribed(g string, d time.Duration, what string, ok func(kmsg.DescribeGroupsResponseGroup) bool) kmsg.DescribeGroupsResponseGroup {
	w.t.Helper()
	var got kmsg.DescribeGroupsResponseGroup
	testwait.For(w.t, d, 2*time.Millisecond, func() error {
		if got = describe(w, 5, g).Groups[0]; !ok(got) {
			return fmt.Errorf("%s: group is %s with %d members", what, got.State, len(got.Members))
		}
		return nil
	})
	return got
}

func instances(ms []kmsg.JoinGroupResponseMember) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		if m.InstanceID != nil {
			out[*m.InstanceID] = true
		}
	}
	return out
}

// Scenarios 40, 41: a dynamic member joins a static group whose members do not rejoin:
// it leads generation 2 with all three members (static ones are kept). The follower
// leaves and nobody rejoins: the dynamic member is evicted and the group waits in
// PreparingRebalance with the static leader alone, at generation 2, until the leader's
// session expires; then it is Empty at generation 3.
func TestStaticLeaderStuckInRebalance(t *testing.T) {
	w := startWire(t, ptProfile)
	s := w.static2("g", 1000)
	c := wait[*kmsg.JoinGroupResponse](t, w.async(joinReq("g", joinOpts{version: 3, protocols: superset, session: 1000})), 5*time.Second)
	wantCode(t, "dynamic join", c.ErrorCode, 0)
	if c.LeaderID != c.MemberID || len(c.Members) != 3 || c.Generation != 2 {
		t.Fatalf("dynamic member: leader %s (self %s), %d members, generation %d", c.LeaderID, c.MemberID, len(c.Members), c.Generation)
	}
	if d := describe(w, 5, "g").Groups[0]; d.State != "CompletingRebalance" {
		t.Fatalf("after the join: %s", d.State)
	}
	l := w.do(leaveReq(0, "g", kmsg.LeaveGroupRequestMember{MemberID: s.follower})).(*kmsg.LeaveGroupResponse)
	wantCode(t, "follower leaves", l.ErrorCode, 0)
	d := w.waitDescribed("g", 3*time.Second, "stuck with the static leader", func(g kmsg.DescribeGroupsResponseGroup) bool {
		return g.State == "PreparingRebalance" && len(g.Members) == 1
	})
	if d.Members[0].MemberID != s.leader {
		t.Fatalf("left member %s, want the static leader %s", d.Members[0].MemberID, s.leader)
	}
	// Still generation 2, rebalancing (this heartbeat extends the leader's session).
	wantCode(t, "leader heartbeat", w.do(hbReq("g", s.leader, 2)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.RebalanceInProgress.Code)
	wantCode(t, "evicted member heartbeat", w.do(hbReq("g", c.MemberID, 2)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)

	// Scenario 41: no more action; the leader's session expires.
	w.waitDescribed("g", 5*time.Second, "empty after the leader's session", func(g kmsg.DescribeGroupsResponseGroup) bool {
		return g.State == "Empty" && len(g.Members) == 0
	})
	// Empty at generation 3: the next round is generation 4.
	j := wait[*kmsg.JoinGroupResponse](t, w.async(joinReq("g", joinOpts{version: 3, protocols: superset})), 5*time.Second)
	if j.ErrorCode != 0 || j.Generation != 4 {
		t.Fatalf("join after Empty: %s generation %d, want generation 4", codeName(j.ErrorCode), j.Generation)
	}
}

// Scenario 42: a new static member joins and the old follower rejoins, the static leader
// does not: after the rebalance timeout a rejoined member leads generation 2, and its
// member list holds all three instances (the old leader is kept until its session ends).
func TestStaticLeaderFailsToRejoin(t *testing.T) {
	w := startWire(t, ptProfile)
	s := w.static2("g", 1000)
	nm := w.async(joinReq("g", joinOpts{instance: "newMember", protocols: superset, session: 1000}))
	w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
	fj := w.async(staticJoin("g", s.follower, "follower", 5, superset))
	n := wait[*kmsg.JoinGroupResponse](t, nm, 5*time.Second)
	f := wait[*kmsg.JoinGroupResponse](t, fj, 5*time.Second)
	wantCode(t, "new member", n.ErrorCode, 0)
	wantCode(t, "follower", f.ErrorCode, 0)
	if n.Generation != 2 || f.Generation != 2 || n.LeaderID != f.LeaderID {
		t.Fatalf("generations %d %d, leaders %s %s", n.Generation, f.Generation, n.LeaderID, f.LeaderID)
	}
	if n.LeaderID != n.MemberID && n.LeaderID != f.MemberID {
		t.Fatalf("leader %s did not rejoin", n.LeaderID)
	}
	lead := n
	if f.LeaderID == f.MemberID {
		lead = f
	}
	if got := instances(lead.Members); len(lead.Members) != 3 || !got["leader"] || !got["follower"] || !got["newMember"] {
		t.Fatalf("leader's members %v (%d)", got, len(lead.Members))
	}
}

// Scenario 52: the follower's SyncGroup waits for the leader's; the leader never syncs:
// the follower gets REBALANCE_IN_PROGRESS once the leader is removed.
func TestLeaderFailureInSync(t *testing.T) {
	w := startWire(t, ptProfile)
	a := w.stable1("g")
	b := w.async(joinReq("g", joinOpts{version: 3}))
	w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
	ja := w.async(joinReq("g", joinOpts{version: 3, member: a}))
	jb := wait[*kmsg.JoinGroupResponse](t, b, 5*time.Second)
	wantCode(t, "leader rejoin", wait[*kmsg.JoinGroupResponse](t, ja, 5*time.Second).ErrorCode, 0)
	if jb.ErrorCode != 0 || jb.Generation != 2 || jb.LeaderID != a {
		t.Fatalf("follower join %+v", jb)
	}
	// Answered before the leader's sync, it would carry code 0.
	sf := w.async(syncReq("g", jb.MemberID, 2, nil))
	wantCode(t, "parked follower sync", wait[*kmsg.SyncGroupResponse](t, sf, 3*time.Second).ErrorCode, kerr.RebalanceInProgress.Code)
}

// Scenario 95: OffsetCommit v2-4 retention_time_ms. The offset is there at once; it
// expires at commit + retention in a simple group, while an offset committed without
// retention stays. In a Stable consumer group subscribed to the topic it stays; once the
// group is Empty, its explicit expiry applies at the next cleanup.
func TestCommitRetentionTime(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		ptProfile(c)
		c.OffsetsRetention = time.Minute
		c.OffsetsRetentionCheck = 20 * time.Millisecond
	})
	w.createTopics(2, "t", "u")
	commit := func(g, member string, gen int32, retention int64, p int32) {
		t.Helper()
		r := commitReq(g, 4, member, gen, map[string][]int32{"t": {p}})
		r.RetentionTimeMillis = retention
		allCodes(t, "commit "+g, commitCodes(w.do(r).(*kmsg.OffsetCommitResponse)), 0)
	}
	has := func(g string, p int32) bool {
		r := w.do(fetchReq(4, g, map[string][]int32{"t": {p}})).(*kmsg.OffsetFetchResponse)
		return r.Topics[0].Partitions[0].Offset >= 0
	}

	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"t"}
	jr := joinReq("c", joinOpts{version: 3, session: 10000})
	jr.Protocols[0].Metadata = meta.AppendTo(nil)
	j := wait[*kmsg.JoinGroupResponse](t, w.async(jr), 5*time.Second)
	wantCode(t, "sync", w.do(syncReq("c", j.MemberID, j.Generation, nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	commit("c", j.MemberID, j.Generation, 300, 0)

	commit("simple", "", -1, 300, 0)
	commit("simple", "", -1, -1, 1)
	if !has("simple", 0) || !has("c", 0) {
		t.Fatal("offsets committed with a retention are not there at once")
	}
	testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond("simple group's offset expires", func() bool { return !has("simple", 0) }))
	if !has("simple", 1) {
		t.Fatal("offset without retention expired")
	}
	// Past c's expiry time, and once c's own cleanup has run (it drops c's offset of
	// "u", a topic c does not subscribe to, committed after "t" with the same retention):
	// kept while Stable and subscribed.
	r := commitReq("c", 4, j.MemberID, j.Generation, map[string][]int32{"u": {0}})
	r.RetentionTimeMillis = 300
	allCodes(t, "commit c/u", commitCodes(w.do(r).(*kmsg.OffsetCommitResponse)), 0)
	testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond("c's offset of an unsubscribed topic expires", func() bool {
		r := w.do(fetchReq(4, "c", map[string][]int32{"u": {0}})).(*kmsg.OffsetFetchResponse)
		return r.Topics[0].Partitions[0].Offset < 0
	}))
	if !has("c", 0) {
		t.Fatal("Stable consumer group lost the offset of a subscribed topic")
	}
	wantCode(t, "leave", w.do(leaveReq(0, "c", kmsg.LeaveGroupRequestMember{MemberID: j.MemberID})).(*kmsg.LeaveGroupResponse).ErrorCode, 0)
	testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond("Empty group's offset expires", func() bool { return !has("c", 0) }))
}
