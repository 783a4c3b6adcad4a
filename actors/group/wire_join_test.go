package group_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Wire tests of issue 3, each citing the scenario of §9 of the reference it follows.

var uuidRE = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`

func TestFindCoordinator(t *testing.T) {
	w := startWire(t, nil)
	port := w.b.Env().Registry // the listener's advertised endpoint
	self, _ := port.Broker(w.b.Env().NodeID)
	ep := self.Endpoints["PLAINTEXT"]
	for _, v := range []int16{0, 3} {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.Version = v
		r.CoordinatorKey = "g"
		resp := w.do(r).(*kmsg.FindCoordinatorResponse)
		if resp.ErrorCode != 0 || resp.NodeID != w.b.Env().NodeID || resp.Host != ep.Host || resp.Port != ep.Port {
			t.Fatalf("v%d: %+v, want node %d at %s:%d", v, resp, w.b.Env().NodeID, ep.Host, ep.Port)
		}
	}
	// Scenario 6: an unknown key type is INVALID_REQUEST, top-level below v4, per key from v4.
	r := kmsg.NewPtrFindCoordinatorRequest()
	r.Version = 3
	r.CoordinatorType = 5
	r.CoordinatorKey = "g"
	resp := w.do(r).(*kmsg.FindCoordinatorResponse)
	wantCode(t, "v3 key type 5", resp.ErrorCode, kerr.InvalidRequest.Code)
	if resp.NodeID != -1 || resp.Port != -1 || resp.Host != "" {
		t.Fatalf("v3 error shape: %+v", resp)
	}
	for _, v := range []int16{4, 6} {
		for _, kt := range []int8{0, 1, 2, 5} {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.Version = v
			r.CoordinatorType = kt
			r.CoordinatorKeys = []string{"a", "b"}
			resp := w.do(r).(*kmsg.FindCoordinatorResponse)
			if len(resp.Coordinators) != 2 || resp.Coordinators[0].Key != "a" || resp.Coordinators[1].Key != "b" {
				t.Fatalf("v%d: keys %+v", v, resp.Coordinators)
			}
			for _, c := range resp.Coordinators {
				want := int16(0)
				if kt > 1 {
					want = kerr.InvalidRequest.Code
				}
				wantCode(t, "v4+ key", c.ErrorCode, want)
				if want == 0 && (c.NodeID != w.b.Env().NodeID || c.Port != ep.Port) {
					t.Fatalf("v%d coordinator %+v", v, c)
				}
				if want != 0 && (c.NodeID != -1 || c.Port != -1) {
					t.Fatalf("v%d error shape %+v", v, c)
				}
			}
		}
	}
}

func TestJoinValidation(t *testing.T) {
	w := startWire(t, ptProfile)
	// Scenario 7.
	j := w.do(joinReq("", joinOpts{})).(*kmsg.JoinGroupResponse)
	wantCode(t, "empty group id", j.ErrorCode, kerr.InvalidGroupID.Code)
	// Scenarios 8, 9.
	j = w.do(joinReq("g", joinOpts{session: 9})).(*kmsg.JoinGroupResponse)
	wantCode(t, "session 9", j.ErrorCode, kerr.InvalidSessionTimeout.Code)
	j = w.do(joinReq("g", joinOpts{session: 600001})).(*kmsg.JoinGroupResponse)
	wantCode(t, "session 600001", j.ErrorCode, kerr.InvalidSessionTimeout.Code)
	// Scenario 12.
	j = w.do(joinReq("unknown", joinOpts{member: "memberId"})).(*kmsg.JoinGroupResponse)
	wantCode(t, "unknown member, new group", j.ErrorCode, kerr.UnknownMemberID.Code)
	// Scenario 15, 16.
	for _, o := range []joinOpts{{ptype: "x", protocols: []string{}}, {instance: "i", protocols: []string{}}} {
		j = w.do(joinReq("g2", o)).(*kmsg.JoinGroupResponse)
		wantCode(t, "empty protocols", j.ErrorCode, kerr.InconsistentGroupProtocol.Code)
	}
	// Scenario 20: an error at v7+ has a null protocol type.
	r := joinReq("unknown", joinOpts{member: "fake-id", instance: "leader"})
	r.Version = 9
	j = w.do(r).(*kmsg.JoinGroupResponse)
	wantCode(t, "v9 unknown", j.ErrorCode, kerr.UnknownMemberID.Code)
	if j.ProtocolType != nil || j.Protocol != nil || j.Generation != -1 {
		t.Fatalf("v9 error shape: %+v", j)
	}
}

// Scenario 13: KIP-394 MEMBER_ID_REQUIRED with an id "<client.id>-<uuid>"; below v4 there
// is no such step.
func TestMemberIDRequired(t *testing.T) {
	w := startWire(t, ptProfile)
	for _, v := range []int16{4, 9} {
		r := joinReq("g", joinOpts{})
		r.Version = v
		j := w.do(r).(*kmsg.JoinGroupResponse)
		wantCode(t, "new member", j.ErrorCode, kerr.MemberIDRequired.Code)
		if !regexp.MustCompile(`^kaas-test-` + uuidRE + `$`).MatchString(j.MemberID) {
			t.Fatalf("member id %q", j.MemberID)
		}
		if j.Generation != -1 || j.LeaderID != "" || len(j.Members) != 0 {
			t.Fatalf("shape %+v", j)
		}
	}
	r := joinReq("g3", joinOpts{version: 3})
	j := wait[*kmsg.JoinGroupResponse](t, w.async(r), 5*time.Second)
	wantCode(t, "v3 join", j.ErrorCode, 0)
	if j.Generation != 1 || j.LeaderID != j.MemberID || len(j.Members) != 1 {
		t.Fatalf("v3 join %+v", j)
	}
	// v0 has neither rebalance timeout nor protocol type in the response.
	r0 := joinReq("g0", joinOpts{})
	r0.Version = 0
	j = wait[*kmsg.JoinGroupResponse](t, w.async(r0), 5*time.Second)
	wantCode(t, "v0 join", j.ErrorCode, 0)
	if j.Protocol == nil || *j.Protocol != "range" {
		t.Fatalf("v0 protocol %v", j.Protocol)
	}
}

// Scenarios 34-37: a pending member blocks the join phase until it joins, leaves or
// expires after its session timeout.
func TestPendingMemberBlocksRound(t *testing.T) {
	// setup: a and b Stable at generation 1; a pending member with session timeout
	// session; then a and b rejoin, the leader first (requests on separate connections
	// are ordered by waiting for their effect).
	setup := func(t *testing.T, session int32) (*wire, []string, []<-chan kmsg.Response, string) {
		w := startWire(t, ptProfile)
		a, ja := w.dynJoin("g", joinOpts{rebalance: 5000})
		b, jb := w.dynJoin("g", joinOpts{rebalance: 5000})
		ra := wait[*kmsg.JoinGroupResponse](t, ja, 5*time.Second)
		rb := wait[*kmsg.JoinGroupResponse](t, jb, 5*time.Second)
		leader := ra.LeaderID
		gen := ra.Generation
		assign := map[string][]byte{a: {}, b: {}}
		var syncs []<-chan kmsg.Response
		for _, m := range []string{a, b} {
			s := syncReq("g", m, gen, nil)
			if m == leader {
				s = syncReq("g", m, gen, assign)
			}
			syncs = append(syncs, w.async(s))
		}
		for _, s := range syncs {
			wantCode(t, "sync", wait[*kmsg.SyncGroupResponse](t, s, 5*time.Second).ErrorCode, 0)
		}
		_ = rb
		// Both rejoin (PreparingRebalance) and a third member is pending.
		p := w.do(joinReq("g", joinOpts{version: 5, session: session})).(*kmsg.JoinGroupResponse)
		wantCode(t, "pending", p.ErrorCode, kerr.MemberIDRequired.Code)
		ch := make([]<-chan kmsg.Response, 2)
		first, second := 0, 1
		if leader == b {
			first, second = 1, 0
		}
		ids := []string{a, b}
		ch[first] = w.async(joinReq("g", joinOpts{version: 5, member: ids[first], rebalance: 5000}))
		w.waitDescribed("g", 5*time.Second, "rebalance", func(g kmsg.DescribeGroupsResponseGroup) bool { return g.State == "PreparingRebalance" })
		ch[second] = w.async(joinReq("g", joinOpts{version: 5, member: ids[second], rebalance: 5000}))
		return w, ids, ch, p.MemberID
	}
	t.Run("joins", func(t *testing.T) {
		// A join phase completed with the member pending would make generation 2
		// without it, and its join below generation 3.
		w, _, _, p := setup(t, 2000)
		j := wait[*kmsg.JoinGroupResponse](t, w.async(joinReq("g", joinOpts{version: 5, member: p, rebalance: 5000})), 5*time.Second)
		wantCode(t, "pending joins", j.ErrorCode, 0)
		if j.Generation != 2 {
			t.Fatalf("generation %d", j.Generation)
		}
		d := describe(w, 5, "g")
		if len(d.Groups[0].Members) != 3 || d.Groups[0].State != "CompletingRebalance" {
			t.Fatalf("describe %+v", d.Groups[0])
		}
	})
	t.Run("expires", func(t *testing.T) {
		_, _, ch, _ := setup(t, 300)
		for _, c := range ch {
			j := wait[*kmsg.JoinGroupResponse](t, c, 5*time.Second)
			wantCode(t, "rejoin", j.ErrorCode, 0)
		}
	})
	t.Run("leaves", func(t *testing.T) {
		w, _, ch, p := setup(t, 2000)
		lr := kmsg.NewPtrLeaveGroupRequest()
		lr.Version = 3
		lr.Group = "g"
		unknown := "unknown-instance"
		lr.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: &unknown}, {MemberID: p}}
		l := w.do(lr).(*kmsg.LeaveGroupResponse)
		if l.ErrorCode != 0 || l.Members[0].ErrorCode != kerr.UnknownMemberID.Code || l.Members[1].ErrorCode != 0 {
			t.Fatalf("leave %+v", l)
		}
		j := wait[*kmsg.JoinGroupResponse](t, ch[0], time.Second)
		wantCode(t, "rejoin", j.ErrorCode, 0)
	})
}
