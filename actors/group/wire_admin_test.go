package group_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

func leaveReq(version int16, g string, members ...kmsg.LeaveGroupRequestMember) *kmsg.LeaveGroupRequest {
	r := kmsg.NewPtrLeaveGroupRequest()
	r.Version = version
	r.Group = g
	if version < 3 {
		r.MemberID = members[0].MemberID
	} else {
		r.Members = members
	}
	return r
}

func inst(s string) *string { return &s }

// Scenarios 82-85: LeaveGroup codes per member at every version; v0-2 hoist the first.
func TestLeaveGroup(t *testing.T) {
	w := startWire(t, ptProfile)
	l := w.do(leaveReq(0, "unknown", kmsg.LeaveGroupRequestMember{MemberID: "memberId"})).(*kmsg.LeaveGroupResponse)
	wantCode(t, "v0 unknown group", l.ErrorCode, kerr.UnknownMemberID.Code)
	l = w.do(leaveReq(3, "unknown", kmsg.LeaveGroupRequestMember{InstanceID: inst("leader")}, kmsg.LeaveGroupRequestMember{InstanceID: inst("follower")})).(*kmsg.LeaveGroupResponse)
	if l.ErrorCode != 0 || len(l.Members) != 2 || l.Members[0].ErrorCode != kerr.UnknownMemberID.Code || l.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("v3 unknown group %+v", l)
	}

	s := w.static2("g", 5000)
	l = w.do(leaveReq(5, "g",
		kmsg.LeaveGroupRequestMember{InstanceID: inst("unknown-instance")},
		kmsg.LeaveGroupRequestMember{MemberID: "invalid-member", InstanceID: inst("follower")},
		kmsg.LeaveGroupRequestMember{InstanceID: inst("leader"), Reason: inst("shutting down")},
	)).(*kmsg.LeaveGroupResponse)
	got := []int16{l.Members[0].ErrorCode, l.Members[1].ErrorCode, l.Members[2].ErrorCode}
	if l.ErrorCode != 0 || got[0] != kerr.UnknownMemberID.Code || got[1] != kerr.FencedInstanceID.Code || got[2] != 0 {
		t.Fatalf("v5 batch: %v", got)
	}
	if l.Members[2].InstanceID == nil || *l.Members[2].InstanceID != "leader" {
		t.Fatalf("member echo %+v", l.Members[2])
	}
	// The follower is alone and rebalancing; it leaves with v1 by id: the group is Empty.
	l = w.do(leaveReq(1, "g", kmsg.LeaveGroupRequestMember{MemberID: s.follower})).(*kmsg.LeaveGroupResponse)
	wantCode(t, "v1 leave", l.ErrorCode, 0)
	d := describe(w, 5, "g")
	if d.Groups[0].State != "Empty" || len(d.Groups[0].Members) != 0 {
		t.Fatalf("after leave: %+v", d.Groups[0])
	}
	lg := kmsg.NewPtrListGroupsRequest()
	lg.Version = 4
	lg.StatesFilter = []string{"Empty"}
	if gs := w.do(lg).(*kmsg.ListGroupsResponse).Groups; len(gs) != 1 || gs[0].Group != "g" {
		t.Fatalf("list Empty: %+v", gs)
	}
}

// Scenarios 105-110: DescribeGroups.
func TestDescribeGroups(t *testing.T) {
	w := startWire(t, ptProfile)
	for _, v := range []int16{0, 5} {
		g := describe(w, v, "unknown").Groups[0]
		if g.ErrorCode != 0 || g.State != "Dead" || len(g.Members) != 0 {
			t.Fatalf("v%d unknown: %+v", v, g)
		}
	}
	g := describe(w, 6, "unknown").Groups[0]
	if g.ErrorCode != kerr.GroupIDNotFound.Code || g.State != "Dead" || g.ErrorMessage == nil {
		t.Fatalf("v6 unknown: %+v", g)
	}
	// CompletingRebalance: no protocol, members without metadata or assignment.
	m, ch := w.dynJoin("g", joinOpts{})
	j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
	g = describe(w, 5, "g").Groups[0]
	if g.State != "CompletingRebalance" || g.Protocol != "" || len(g.Members) != 1 || len(g.Members[0].ProtocolMetadata) != 0 {
		t.Fatalf("completing: %+v", g)
	}
	s := w.do(syncReq("g", m, j.Generation, map[string][]byte{m: {1, 2}})).(*kmsg.SyncGroupResponse)
	wantCode(t, "sync", s.ErrorCode, 0)
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.Version = 5
	r.Groups = []string{"g", "unknown"}
	r.IncludeAuthorizedOperations = true
	resp := w.do(r).(*kmsg.DescribeGroupsResponse)
	g = resp.Groups[0]
	if g.State != "Stable" || g.Protocol != "range" || g.ProtocolType != "consumer" || g.AuthorizedOperations != 3400 {
		t.Fatalf("stable: %+v", g)
	}
	mm := g.Members[0]
	if mm.MemberID != m || mm.ClientID != "kaas-test" || mm.ClientHost != "/127.0.0.1" || string(mm.MemberAssignment) != "\x01\x02" || mm.ProtocolMetadata == nil {
		t.Fatalf("member: %+v", mm)
	}
	if resp.Groups[1].Group != "unknown" || resp.Groups[1].State != "Dead" {
		t.Fatalf("second group %+v", resp.Groups[1])
	}
	if g := describe(w, 5, "g").Groups[0]; g.AuthorizedOperations != -2147483648 {
		t.Fatalf("authorized operations not asked: %d", g.AuthorizedOperations)
	}
}

// ListGroups filters, and groups that exist only as offsets files, also after a restart.
func TestListGroups(t *testing.T) {
	c := brokertest.Config(t)
	ptProfile(&c)
	w := &wire{t: t, b: brokertest.StartWith(t, c), cfg: c}
	w.createTopics(1, "t")
	w.stable1("stable")
	m, ch := w.dynJoin("completing", joinOpts{})
	wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
	_ = m
	oc := w.do(commitReq("simple", 8, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "simple commit", oc.Topics[0].Partitions[0].ErrorCode, 0)

	list := func(version int16, states, types []string) map[string]string {
		r := kmsg.NewPtrListGroupsRequest()
		r.Version = version
		r.StatesFilter = states
		r.TypesFilter = types
		resp := w.do(r).(*kmsg.ListGroupsResponse)
		wantCode(t, "list", resp.ErrorCode, 0)
		out := map[string]string{}
		for _, g := range resp.Groups {
			out[g.Group] = g.GroupState + "/" + g.ProtocolType
			if version >= 5 && g.GroupType != "classic" {
				t.Fatalf("group type %q", g.GroupType)
			}
		}
		return out
	}
	all := list(0, nil, nil)
	if len(all) != 3 || all["stable"] != "/consumer" || all["simple"] != "/" {
		t.Fatalf("v0 list %v", all)
	}
	if got := list(4, []string{"stable", "EMPTY"}, nil); len(got) != 2 || got["stable"] != "Stable/consumer" || got["simple"] != "Empty/" {
		t.Fatalf("v4 states filter %v", got)
	}
	if got := list(5, nil, []string{"Classic"}); len(got) != 3 {
		t.Fatalf("v5 classic %v", got)
	}
	if got := list(5, nil, []string{"consumer"}); len(got) != 0 {
		t.Fatalf("v5 consumer type %v", got)
	}

	// Restart on the same data dir: the group that committed is listed as Empty.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	w.b = brokertest.StartWith(t, c)
	got := list(4, nil, nil)
	if got["simple"] != "Empty/" {
		t.Fatalf("after restart %v", got)
	}
}

// Scenarios 111, 112: DeleteGroups.
func TestDeleteGroups(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(1, "t")
	m := w.stable1("g")
	oc := w.do(commitReq("g", 8, m, 1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "commit", oc.Topics[0].Partitions[0].ErrorCode, 0)
	del := func(version int16, groups ...string) []int16 {
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Version = version
		r.Groups = groups
		var out []int16
		for _, g := range w.do(r).(*kmsg.DeleteGroupsResponse).Groups {
			out = append(out, g.ErrorCode)
		}
		return out
	}
	got := del(2, "g", "nope", "g")
	if len(got) != 2 || got[0] != kerr.NonEmptyGroup.Code || got[1] != kerr.GroupIDNotFound.Code {
		t.Fatalf("delete %v", got)
	}
	wantCode(t, "leave", w.do(leaveReq(0, "g", kmsg.LeaveGroupRequestMember{MemberID: m})).(*kmsg.LeaveGroupResponse).ErrorCode, 0)
	if got := del(0, "g"); got[0] != 0 {
		t.Fatalf("delete empty group: %s", codeName(got[0]))
	}
	if g := describe(w, 5, "g").Groups[0]; g.State != "Dead" {
		t.Fatalf("after delete %+v", g)
	}
	f := fetchReq(7, "g", map[string][]int32{"t": {0}})
	if p := w.do(f).(*kmsg.OffsetFetchResponse).Topics[0].Partitions[0]; p.Offset != -1 {
		t.Fatalf("offset after delete %d", p.Offset)
	}
	if got := del(1, "g"); got[0] != kerr.GroupIDNotFound.Code {
		t.Fatalf("second delete %s", codeName(got[0]))
	}
}

// A group that exists only as its file after a restart is listed with the protocol type
// it had: Apache loads an Empty former consumer group as "consumer", a simple group as "",
// and a group saved with members as Stable (§5.2).
func TestListGroupsProtocolTypeAfterRestart(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(1, "t")
	for _, g := range []string{"left", "stable"} {
		m := w.stable1(g)
		allCodes(t, "commit "+g, commitCodes(w.do(commitReq(g, 8, m, 1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)), 0)
		if g == "left" {
			wantCode(t, "leave", w.do(leaveReq(0, g, kmsg.LeaveGroupRequestMember{MemberID: m})).(*kmsg.LeaveGroupResponse).ErrorCode, 0)
		}
	}
	allCodes(t, "simple commit", commitCodes(w.do(commitReq("simple", 8, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)), 0)
	list := func() map[string]string {
		r := kmsg.NewPtrListGroupsRequest()
		r.Version = 4
		out := map[string]string{}
		for _, g := range w.do(r).(*kmsg.ListGroupsResponse).Groups {
			out[g.Group] = g.GroupState + "/" + g.ProtocolType
		}
		return out
	}
	want := map[string]string{"left": "Empty/consumer", "stable": "Stable/consumer", "simple": "Empty/"}
	w.restart()
	// Twice: the first listing reads the files, the second answers from what it learnt.
	for i := range 2 {
		got := list()
		for g, s := range want {
			if got[g] != s {
				t.Fatalf("listing %d after restart: %s is %q, want %q (%v)", i, g, got[g], s, got)
			}
		}
	}
	// A listed group that wakes up and changes is listed as it now is.
	w.stable1("simple")
	if got := list()["simple"]; got != "Stable/consumer" {
		t.Fatalf("simple group turned consumer group: %q", got)
	}
}
