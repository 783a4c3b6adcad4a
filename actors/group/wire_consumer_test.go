package group_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// Wire conformance of the consumer group protocol (KIP-848) at exact versions: the codes
// Apache 4.2 answers (apache-kip848.md §1.3, §1.4, §1.5, §1.8, §1.9).

// Request validation, before any group is touched (§1.3).
func TestConsumerHeartbeatValidation(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(3, "t")
	bad := []struct {
		name string
		g    string
		o    hbOpts
		want int16
	}{
		{"v1 empty member id", "g", hbOpts{topics: []string{"t"}}, kerr.InvalidRequest.Code},
		{"v0 epoch 5 empty member id", "g", hbOpts{version: -1, epoch: 5}, kerr.InvalidRequest.Code},
		{"empty group id", "", hbOpts{member: "m", topics: []string{"t"}}, kerr.InvalidRequest.Code},
		{"empty instance id", "g", hbOpts{member: "m", topics: []string{"t"}, instance: strp("")}, kerr.InvalidRequest.Code},
		{"empty rack id", "g", hbOpts{member: "m", topics: []string{"t"}, rack: strp("")}, kerr.InvalidRequest.Code},
		{"join without rebalance timeout", "g", hbOpts{member: "m", topics: []string{"t"}, rebalance: -1}, kerr.InvalidRequest.Code},
		{"join with owned partitions", "g", hbOpts{member: "m", topics: []string{"t"},
			owned: []kmsg.ConsumerGroupHeartbeatRequestTopic{{Partitions: []int32{0}}}}, kerr.InvalidRequest.Code},
		{"join without a subscription", "g", hbOpts{member: "m"}, kerr.InvalidRequest.Code},
		{"epoch -2 without instance id", "g", hbOpts{member: "m", epoch: -2}, kerr.InvalidRequest.Code},
		{"epoch -3", "g", hbOpts{member: "m", epoch: -3}, kerr.InvalidRequest.Code},
		{"unknown assignor", "g", hbOpts{member: "m", topics: []string{"t"}, assignor: strp("sticky")}, kerr.UnsupportedAssignor.Code},
	}
	for _, c := range bad {
		r := w.cgh(c.g, c.o)
		wantCode(t, c.name, r.ErrorCode, c.want)
		if r.ErrorMessage == nil {
			t.Errorf("%s: no error message", c.name)
		}
	}
	// A join with a null owned list is refused too (TopicPartitions must be empty).
	req := cghReq("g", hbOpts{member: "m", topics: []string{"t"}})
	req.Topics = nil
	wantCode(t, "join with null owned", w.do(req).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode, kerr.InvalidRequest.Code)
	// v0 join without a member id: the coordinator names it.
	r := w.cgh("g0", hbOpts{version: -1, topics: []string{"t"}})
	wantCode(t, "v0 join", r.ErrorCode, 0)
	if r.MemberID == nil || *r.MemberID == "" || r.MemberEpoch != 1 {
		t.Fatalf("v0 join: member %v epoch %d, want a generated id at epoch 1", r.MemberID, r.MemberEpoch)
	}
	// An empty subscription is allowed (KAFKA-18095).
	wantCode(t, "empty subscription", w.cgh("g1", hbOpts{member: newMemberID(), topics: []string{}}).ErrorCode, 0)
}

// Group and member errors inside the coordinator (§1.4).
func TestConsumerHeartbeatStateErrors(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.GroupConsumerMaxSize = 2
	})
	w.createTopics(4, "t")
	wantCode(t, "unknown group", w.cgh("nope", hbOpts{member: "m", epoch: 3}).ErrorCode, kerr.GroupIDNotFound.Code)
	a := w.join("g", "t")
	if a.epoch != 1 || count(a.own) != 4 {
		t.Fatalf("first member: epoch %d, %v", a.epoch, a.own)
	}
	wantCode(t, "unknown member", w.cgh("g", hbOpts{member: "x", epoch: 1}).ErrorCode, kerr.UnknownMemberID.Code)
	wantCode(t, "epoch ahead", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch + 1, owned: w.owned(a.own)}).ErrorCode, kerr.FencedMemberEpoch.Code)
	b := w.join("g", "t")
	wantCode(t, "group.consumer.max.size", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupMaxSizeReached.Code)
	w.settle("g", a, b)
	// b changes its subscription: one more epoch, so a has an epoch two behind its own.
	b.apply(w.cgh("g", hbOpts{member: b.id, epoch: b.epoch, topics: []string{"t", "u"}, owned: w.owned(b.own)}))
	w.settle("g", a, b)
	if a.epoch != 3 {
		t.Fatalf("a at epoch %d, want 3", a.epoch)
	}
	// An epoch behind that is not the previous one is fenced; the previous one is
	// accepted while what the member owns is within its assignment (a lost response).
	wantCode(t, "epoch behind", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch - 2, owned: w.owned(a.own)}).ErrorCode, kerr.FencedMemberEpoch.Code)
	prev := w.cgh("g", hbOpts{member: a.id, epoch: a.epoch - 1, owned: w.owned(a.own)})
	wantCode(t, "previous epoch, owned within", prev.ErrorCode, 0)
	if prev.MemberEpoch != a.epoch {
		t.Fatalf("previous epoch answered epoch %d, want %d", prev.MemberEpoch, a.epoch)
	}
	wantCode(t, "previous epoch, owned unknown (null)", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch - 1}).ErrorCode, kerr.FencedMemberEpoch.Code)
	// A known member rejoining at epoch 0 is accepted (KAFKA-19233, Apache 4.2).
	r := w.cgh("g", hbOpts{member: a.id, topics: []string{"t"}})
	wantCode(t, "rejoin", r.ErrorCode, 0)
	a.own = map[string][]int32{}
	a.apply(r)
	// Leave with -1: echoes the member with epoch -1; the member is gone.
	r = w.cgh("g", hbOpts{member: b.id, epoch: -1})
	wantCode(t, "leave", r.ErrorCode, 0)
	if r.MemberEpoch != -1 || r.MemberID == nil || *r.MemberID != b.id {
		t.Fatalf("leave answered %v epoch %d", r.MemberID, r.MemberEpoch)
	}
	wantCode(t, "after leave", w.cgh("g", hbOpts{member: b.id, epoch: b.epoch}).ErrorCode, kerr.UnknownMemberID.Code)
	wantCode(t, "leave again", w.cgh("g", hbOpts{member: b.id, epoch: -1}).ErrorCode, kerr.UnknownMemberID.Code)
	d := w.settle("g", a)
	if len(d.Members) != 1 || count(a.own) != 4 {
		t.Fatalf("after the leave: %d members, a owns %v", len(d.Members), a.own)
	}
}

// A consumer-protocol join to a classic group with members whose metadata is not the
// consumer embedded protocol's: no upgrade, GROUP_ID_NOT_FOUND (online migration is
// wire_migration_test.go); an empty classic group (offsets only) is taken over. A
// classic JoinGroup to a consumer-protocol group with members joins it as a classic
// member of the consumer embedded protocol (MEMBER_ID_REQUIRED first), and is refused
// with another protocol type.
func TestConsumerHeartbeatAndClassicGroups(t *testing.T) {
	w := startWire(t, func(c *config.Config) { consumerProfile(c); ptProfile(c) })
	w.createTopics(2, "t")
	w.stable1("classic")
	wantCode(t, "join a classic group", w.cgh("classic", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupIDNotFound.Code)
	wantCode(t, "describe a classic group", w.cgDescribe(0, "classic").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
	wantCode(t, "simple commit", w.do(commitReq("simple", 9, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
	m := w.join("simple", "t")
	if m.epoch < 1 || count(m.own) != 2 {
		t.Fatalf("join of an empty classic group: epoch %d, %v", m.epoch, m.own)
	}
	j := w.do(joinReq("simple", joinOpts{version: 5, member: "", protocols: []string{"range"}})).(*kmsg.JoinGroupResponse)
	wantCode(t, "classic join of a consumer-protocol group", j.ErrorCode, kerr.MemberIDRequired.Code)
	j = w.do(joinReq("simple", joinOpts{version: 5, member: "", ptype: "connect", protocols: []string{"range"}})).(*kmsg.JoinGroupResponse)
	wantCode(t, "connect join of a consumer-protocol group", j.ErrorCode, kerr.InconsistentGroupProtocol.Code)
}

// Static membership the KIP-848 way (§1.5).
func TestConsumerStaticMembership(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(4, "t")
	a := w.join("g", "t")
	b := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i1")}
	b.apply(w.cgh("g", hbOpts{member: b.id, topics: []string{"t"}, instance: b.inst}))
	w.settle("g", a, b)
	kept := b.own
	// A second member with the instance id while it is held: UNRELEASED_INSTANCE_ID.
	wantCode(t, "duplicate instance", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}, instance: strp("i1")}).ErrorCode,
		kerr.UnreleasedInstanceID.Code)
	// Even under its own member id, a join at epoch 0 while the instance is held is
	// refused (Apache throwIfInstanceIdIsUnreleased).
	wantCode(t, "same member rejoining while held", w.cgh("g", hbOpts{member: b.id, topics: []string{"t"}, instance: strp("i1")}).ErrorCode,
		kerr.UnreleasedInstanceID.Code)
	// A heartbeat with the instance id of another member: FENCED_INSTANCE_ID.
	wantCode(t, "instance of another member", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, instance: strp("i1")}).ErrorCode,
		kerr.FencedInstanceID.Code)
	wantCode(t, "unknown instance", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, instance: strp("nobody")}).ErrorCode,
		kerr.UnknownMemberID.Code)
	// Leave with -2: the member stays at -2 with its partitions; the group epoch stays.
	before := w.cgDescribe(1, "g").Groups[0].Epoch
	r := w.cgh("g", hbOpts{member: b.id, epoch: -2, instance: b.inst})
	wantCode(t, "static leave", r.ErrorCode, 0)
	if r.MemberEpoch != -2 {
		t.Fatalf("static leave answered epoch %d, want -2", r.MemberEpoch)
	}
	d := w.cgDescribe(1, "g").Groups[0]
	if d.Epoch != before {
		t.Fatalf("static leave moved the group epoch %d → %d", before, d.Epoch)
	}
	a.beat()
	if count(a.own) != 2 {
		t.Fatalf("the remaining member took the static member's partitions: %v", a.own)
	}
	// The replacement with the same instance id inherits the assignment.
	c := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i1")}
	r = w.cgh("g", hbOpts{member: c.id, topics: []string{"t"}, instance: c.inst})
	c.apply(r)
	if !samePartitions(c.own, kept) {
		t.Fatalf("replacement got %v, the static member had %v", c.own, kept)
	}
	d = w.cgDescribe(1, "g").Groups[0]
	if d.Epoch != before || len(d.Members) != 2 {
		t.Fatalf("after the replacement: epoch %d (was %d), %d members", d.Epoch, before, len(d.Members))
	}
}

func samePartitions(a, b map[string][]int32) bool {
	if count(a) != count(b) {
		return false
	}
	for t, ps := range a {
		for _, p := range ps {
			if !slices.Contains(b[t], p) {
				return false
			}
		}
	}
	return true
}

// Revocation before assignment: a partition moves only once its owner stopped reporting
// it; the owner keeps its epoch meanwhile, the newcomer waits at the new epoch.
func TestConsumerRevocationBeforeAssignment(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(4, "t")
	a := w.join("g", "t")
	if count(a.own) != 4 {
		t.Fatalf("a owns %v", a.own)
	}
	b := w.join("g", "t")
	if count(b.own) != 0 || b.epoch != 2 {
		t.Fatalf("newcomer got %v at epoch %d before a revoked", b.own, b.epoch)
	}
	// a still reports all four: it is told to keep two, at its old epoch.
	r := w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, owned: w.owned(a.own)})
	wantCode(t, "a", r.ErrorCode, 0)
	if r.MemberEpoch != 1 || count(w.assigned(r)) != 2 {
		t.Fatalf("a: epoch %d assignment %v, want epoch 1 with 2 partitions", r.MemberEpoch, w.assigned(r))
	}
	if d := w.cgDescribe(1, "g").Groups[0]; d.State != "Reconciling" {
		t.Fatalf("group %s, want Reconciling", d.State)
	}
	// b asks again: still nothing, a has not let go.
	b.beat()
	if count(b.own) != 0 {
		t.Fatalf("b got %v while a still owns them", b.own)
	}
	// a stops reporting the two: it moves to epoch 2; b then gets them.
	a.own = w.assigned(r)
	a.beat()
	if a.epoch != 2 {
		t.Fatalf("a at epoch %d after revoking, want 2", a.epoch)
	}
	b.beat()
	if count(b.own) != 2 {
		t.Fatalf("b got %v after a revoked", b.own)
	}
	noDoubleOwner(t, a, b)
	w.settle("g", a, b)
}

// A member that does not revoke within its rebalance timeout is fenced; one that stops
// heartbeating is fenced at its session timeout; both leave their partitions to others.
func TestConsumerTimeouts(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.GroupConsumerSessionTimeout = 400 * time.Millisecond
	})
	w.createTopics(4, "t")
	a := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}}
	a.apply(w.cgh("g", hbOpts{member: a.id, topics: []string{"t"}, rebalance: 150}))
	b := w.join("g", "t")
	r := w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, owned: w.owned(a.own)}) // told to revoke two
	wantCode(t, "a", r.ErrorCode, 0)
	// a never revokes, and b keeps heartbeating: a is fenced after 150 ms.
	testwait.For(t, 5*time.Second, 20*time.Millisecond, func() error {
		b.beat()
		if count(b.own) != 4 {
			return errorOf("b owns %v", b.own)
		}
		return nil
	})
	wantCode(t, "fenced a", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, owned: w.owned(a.own)}).ErrorCode, kerr.UnknownMemberID.Code)
	// c joins and then goes silent: its session expires and b gets everything back.
	c := w.join("g", "t")
	w.settle("g", b, c)
	testwait.For(t, 5*time.Second, 20*time.Millisecond, func() error {
		b.beat()
		if d := w.cgDescribe(1, "g").Groups[0]; len(d.Members) != 1 || count(b.own) != 4 {
			return errorOf("%d members, b owns %v", len(d.Members), b.own)
		}
		return nil
	})
	_ = c
}

// A topic created after the subscription, and partitions added, are assigned.
func TestConsumerTopicCreatedLater(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(1, "early")
	a := w.join("g", "early", "late")
	if count(a.own) != 1 {
		t.Fatalf("a owns %v", a.own)
	}
	w.createTopics(2, "late")
	w.settle("g", a)
	if len(a.own["late"]) != 2 {
		t.Fatalf("after the topic was created a owns %v", a.own)
	}
}

// OffsetCommit v9 and OffsetFetch v9 with member epochs (§1.8, KIP-1251).
func TestConsumerOffsetsMemberEpochs(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(4, "t")
	a := w.join("g", "t")
	commit := func(version int16, member string, epoch int32, ps ...int32) int16 {
		r := w.do(commitReq("g", version, member, epoch, map[string][]int32{"t": ps})).(*kmsg.OffsetCommitResponse)
		return r.Topics[0].Partitions[0].ErrorCode
	}
	wantCode(t, "own epoch", commit(9, a.id, a.epoch, 0), 0)
	wantCode(t, "epoch above", commit(9, a.id, a.epoch+1, 0), kerr.StaleMemberEpoch.Code)
	wantCode(t, "unknown member", commit(9, "x", a.epoch, 0), kerr.UnknownMemberID.Code)
	wantCode(t, "admin commit to a group with members", commit(9, "", -1, 0), kerr.UnknownMemberID.Code)
	wantCode(t, "v8 from a consumer-protocol member", commit(8, a.id, a.epoch, 0), kerr.UnsupportedVersion.Code)
	// b joins: the group epoch moves; a, still at epoch 1 while it revokes, commits at 1.
	b := w.join("g", "t")
	r := w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, owned: w.owned(a.own)})
	keep := w.assigned(r)
	a.own = keep
	a.beat() // revoked: a is at epoch 2 now
	if a.epoch != 2 {
		t.Fatalf("a at %d", a.epoch)
	}
	// KIP-1251: epoch 1 is still good for a partition a has held since epoch 1.
	wantCode(t, "older epoch, partition held since", commit(9, a.id, 1, keep["t"][0]), 0)
	w.settle("g", a, b)
	// A partition b was given at epoch 2 is not committable by b at epoch 1.
	wantCode(t, "older epoch, partition given later", commit(9, b.id, 1, b.own["t"][0]), kerr.StaleMemberEpoch.Code)
	// OffsetFetch v9: group-level codes.
	fetch := func(member *string, epoch int32) int16 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 9
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group, g.MemberID, g.MemberEpoch = "g", member, epoch
		req.Groups = append(req.Groups, g)
		return w.do(req).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode
	}
	wantCode(t, "fetch at the member's epoch", fetch(&a.id, a.epoch), 0)
	wantCode(t, "fetch stale", fetch(&a.id, a.epoch-1), kerr.StaleMemberEpoch.Code)
	wantCode(t, "fetch with a member id and -1", fetch(&a.id, -1), kerr.StaleMemberEpoch.Code)
	wantCode(t, "fetch unknown member", fetch(strp("x"), 1), kerr.UnknownMemberID.Code)
	wantCode(t, "admin fetch", fetch(nil, -1), 0)
}

// ConsumerGroupDescribe, ListGroups v5 and DescribeGroups v6 of a consumer-protocol group
// (§1.9).
func TestConsumerDescribeAndList(t *testing.T) {
	w := startWire(t, func(c *config.Config) { consumerProfile(c); ptProfile(c) })
	w.createTopics(3, "t")
	a := w.join("g", "t")
	w.settle("g", a)
	for _, v := range []int16{0, 1} {
		d := w.cgDescribe(v, "g", "nope").Groups
		wantCode(t, "describe", d[0].ErrorCode, 0)
		if d[0].State != "Stable" || d[0].Epoch != 1 || d[0].AssignmentEpoch != 1 || d[0].AssignorName != "uniform" || len(d[0].Members) != 1 {
			t.Fatalf("v%d: %+v", v, d[0])
		}
		m := d[0].Members[0]
		if m.MemberID != a.id || m.MemberEpoch != 1 || len(m.Assignment.TopicPartitions) != 1 ||
			m.Assignment.TopicPartitions[0].Topic != "t" || len(m.TargetAssignment.TopicPartitions[0].Partitions) != 3 ||
			!slices.Equal(m.SubscribedTopics, []string{"t"}) {
			t.Fatalf("v%d member: %+v", v, m)
		}
		if v == 1 && m.MemberType != 1 {
			t.Fatalf("member type %d", m.MemberType)
		}
		wantCode(t, "describe unknown", d[1].ErrorCode, kerr.GroupIDNotFound.Code)
	}
	w.stable1("classic")
	list := func(types ...string) map[string]string {
		r := kmsg.NewPtrListGroupsRequest()
		r.Version = 5
		r.TypesFilter = types
		out := map[string]string{}
		for _, g := range w.do(r).(*kmsg.ListGroupsResponse).Groups {
			out[g.Group] = g.GroupType + "/" + g.ProtocolType + "/" + g.GroupState
		}
		return out
	}
	if got := list("CONSUMER"); len(got) != 1 || got["g"] != "consumer/consumer/Stable" {
		t.Fatalf("types CONSUMER: %v", got)
	}
	if got := list("classic"); len(got) != 1 || got["classic"] == "" {
		t.Fatalf("types classic: %v", got)
	}
	if got := list(); len(got) != 2 {
		t.Fatalf("no filter: %v", got)
	}
	d6 := describe(w, 6, "g").Groups[0]
	wantCode(t, "DescribeGroups v6", d6.ErrorCode, kerr.GroupIDNotFound.Code)
	d5 := describe(w, 5, "g").Groups[0]
	wantCode(t, "DescribeGroups v5", d5.ErrorCode, 0)
	if d6.State != "Dead" || d5.State != "Dead" {
		t.Fatalf("DescribeGroups states %q %q, want Dead", d6.State, d5.State)
	}
}

// Without consumer in group.coordinator.rebalance.protocols the keys are not advertised
// and a heartbeat is UNSUPPORTED_VERSION, so clients fall back to classic.
func TestConsumerProtocolDisabled(t *testing.T) {
	for _, on := range []bool{true, false} {
		w := startWire(t, func(c *config.Config) {
			if !on {
				c.GroupRebalanceProtocols = []string{"classic"}
			}
		})
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		req.ClientSoftwareName, req.ClientSoftwareVersion = "t", "1"
		has := map[int16]bool{}
		for _, k := range w.do(req).(*kmsg.ApiVersionsResponse).ApiKeys {
			has[k.ApiKey] = true
		}
		if has[68] != on || has[69] != on {
			t.Fatalf("protocol on=%v: advertises 68 %v, 69 %v", on, has[68], has[69])
		}
		want := int16(0)
		if !on {
			want = kerr.UnsupportedVersion.Code
		}
		wantCode(t, "heartbeat", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{}}).ErrorCode, want)
	}
}

// A restart over the same data keeps the group epoch, the target and every member at its
// epoch with its partitions: members carry on without being fenced.
func TestConsumerStateSurvivesRestart(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(4, "t")
	a := w.join("g", "t")
	b := w.join("g", "t")
	before := w.settle("g", a, b)
	w.restart()
	after := w.cgDescribe(1, "g").Groups[0]
	wantCode(t, "describe after restart", after.ErrorCode, 0)
	if after.Epoch != before.Epoch || after.AssignmentEpoch != before.AssignmentEpoch || len(after.Members) != 2 {
		t.Fatalf("after restart: epoch %d/%d members %d, before %d/%d", after.Epoch, after.AssignmentEpoch, len(after.Members),
			before.Epoch, before.AssignmentEpoch)
	}
	ea, eb := a.epoch, b.epoch
	ownA := a.own
	a.beat()
	b.beat()
	if a.epoch != ea || b.epoch != eb || !samePartitions(a.own, ownA) {
		t.Fatalf("after restart a %d→%d b %d→%d, a owns %v (was %v)", ea, a.epoch, eb, b.epoch, a.own, ownA)
	}
	wantCode(t, "commit after restart", w.do(commitReq("g", 9, a.id, a.epoch, map[string][]int32{"t": a.own["t"][:1]})).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode, 0)
}

// Regular-expression subscriptions (v1): whole-name RE2 matching, a topic created later
// that matches is assigned, a bad expression is INVALID_REGULAR_EXPRESSION.
func TestConsumerRegexSubscription(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(2, "orders", "orders-eu", "audit")
	r := w.cgh("g", hbOpts{member: newMemberID(), regex: strp("(")})
	wantCode(t, "bad regex", r.ErrorCode, kerr.InvalidRegularExpression.Code)
	// The refused join left no group behind.
	wantCode(t, "describe after a refused join", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
	a := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}}
	// "orders" matches only whole names: not orders-eu; "aud" matches nothing.
	a.apply(w.cgh("g", hbOpts{member: a.id, regex: strp("orders|aud")}))
	w.settle("g", a)
	if len(a.own) != 1 || len(a.own["orders"]) != 2 {
		t.Fatalf("orders|aud resolved to %v", a.own)
	}
	d := w.cgDescribe(1, "g").Groups[0]
	if m := d.Members[0]; m.SubscribedTopicRegex == nil || *m.SubscribedTopicRegex != "orders|aud" {
		t.Fatalf("describe: regex %v", m.SubscribedTopicRegex)
	}
	// A new regex, then a topic created later that matches it.
	a.apply(w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, regex: strp("orders.*"), owned: w.owned(a.own)}))
	w.settle("g", a)
	if len(a.own) != 2 {
		t.Fatalf("orders.* resolved to %v", a.own)
	}
	w.createTopics(1, "orders-us")
	w.settle("g", a)
	if len(a.own["orders-us"]) != 1 {
		t.Fatalf("the topic created later was not assigned: %v", a.own)
	}
	// A bad regex from a member: refused, nothing changed.
	wantCode(t, "bad regex from a member", w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, regex: strp("[")}).ErrorCode,
		kerr.InvalidRegularExpression.Code)
	// Names and a regex together; an empty regex drops what it matched.
	a.apply(w.cgh("g", hbOpts{member: a.id, epoch: a.epoch, regex: strp(""), topics: []string{"audit"}, owned: w.owned(a.own)}))
	w.settle("g", a)
	if len(a.own) != 1 || len(a.own["audit"]) != 2 {
		t.Fatalf("after dropping the regex: %v", a.own)
	}
}

// The same after a crash: the broker's data copied while it runs (as a kill -9 leaves
// it), with the group file not yet checkpointed, so the state comes back from the
// offsets journal's replay.
func TestConsumerStateSurvivesCrash(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.OffsetsCheckpointInterval = time.Hour
	})
	w.createTopics(4, "t")
	a := w.join("g", "t")
	b := w.join("g", "t")
	before := w.settle("g", a, b)
	img := t.TempDir()
	brokertest.CopyTree(t, w.cfg.DataDir, img)
	if _, err := os.Stat(filepath.Join(offsets.Dir(img), offsets.FileName("g"))); !os.IsNotExist(err) {
		t.Fatalf("the group file was written before its checkpoint (%v): the journal is not what is tested", err)
	}
	w.cfg.DataDir = img
	w.b = brokertest.StartWith(t, w.cfg)
	after := w.cgDescribe(1, "g").Groups[0]
	wantCode(t, "describe after the crash", after.ErrorCode, 0)
	if after.Epoch != before.Epoch || after.AssignmentEpoch != before.AssignmentEpoch || len(after.Members) != 2 {
		t.Fatalf("after the crash: epoch %d/%d members %d, before %d/%d", after.Epoch, after.AssignmentEpoch, len(after.Members),
			before.Epoch, before.AssignmentEpoch)
	}
	ea, eb, ownA, ownB := a.epoch, b.epoch, a.own, b.own
	a.beat()
	b.beat()
	if a.epoch != ea || b.epoch != eb || !samePartitions(a.own, ownA) || !samePartitions(b.own, ownB) {
		t.Fatalf("after the crash a %d→%d %v→%v, b %d→%d %v→%v", ea, a.epoch, ownA, a.own, eb, b.epoch, ownB, b.own)
	}
}

// A static member away with epoch -2 keeps its partitions only for its session: when it
// expires without a replacement, the others get them.
func TestConsumerStaticLeaveExpires(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.GroupConsumerSessionTimeout = 300 * time.Millisecond
	})
	w.createTopics(4, "t")
	a := w.join("g", "t")
	b := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i1")}
	b.apply(w.cgh("g", hbOpts{member: b.id, topics: []string{"t"}, instance: b.inst}))
	w.settle("g", a, b)
	wantCode(t, "static leave", w.cgh("g", hbOpts{member: b.id, epoch: -2, instance: b.inst}).ErrorCode, 0)
	testwait.For(t, 5*time.Second, 20*time.Millisecond, func() error {
		a.beat()
		if count(a.own) != 4 {
			return errorOf("a owns %v", a.own)
		}
		return nil
	})
	if d := w.cgDescribe(1, "g").Groups[0]; len(d.Members) != 1 {
		t.Fatalf("%d members after the static member's session", len(d.Members))
	}
	// The instance id is free again: a new member with it joins as new.
	c := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i1")}
	r := w.cgh("g", hbOpts{member: c.id, topics: []string{"t"}, instance: c.inst})
	wantCode(t, "join with the freed instance id", r.ErrorCode, 0)
}

// ServerAssignor per member: the group uses the assignor most members ask for, and range
// gives contiguous co-partitioned ranges.
func TestConsumerRangeAssignor(t *testing.T) {
	w := startWire(t, consumerProfile)
	w.createTopics(4, "x", "y")
	join := func(assignor string) *member {
		m := &member{w: w, group: "g", id: "m-" + assignor + "-" + newMemberID(), own: map[string][]int32{}}
		m.apply(w.cgh("g", hbOpts{member: m.id, topics: []string{"x", "y"}, assignor: strp(assignor)}))
		return m
	}
	a, b := join("range"), join("range")
	c := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}}
	c.apply(w.cgh("g", hbOpts{member: c.id, topics: []string{"x", "y"}}))
	d := w.settle("g", a, b, c)
	if d.AssignorName != "range" {
		t.Fatalf("assignor %q, want range (two members of three ask for it)", d.AssignorName)
	}
	for _, m := range []*member{a, b, c} {
		if !slices.Equal(m.own["x"], m.own["y"]) {
			t.Fatalf("range is not co-partitioned: %s owns %v", m.id, m.own)
		}
		for i := 1; i < len(m.own["x"]); i++ {
			if m.own["x"][i] != m.own["x"][i-1]+1 {
				t.Fatalf("range not contiguous: %s owns %v", m.id, m.own)
			}
		}
	}
	noDoubleOwner(t, a, b, c)
}

// A heartbeat writes only what changed (a delta of the members it moved, journaled as a
// "consumer" op); a crash with the group file not checkpointed replays the deltas over
// it, and a restart reads the file the deltas were folded into: both bring back every
// member at its epoch with its assignment and target, exactly, also mid-reconciliation.
func TestConsumerDeltaStateSurvivesCrash(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.OffsetsCheckpointInterval = time.Hour
	})
	w.createTopics(12, "t")
	var ms []*member
	for range 6 {
		ms = append(ms, w.join("g", "t"))
	}
	w.settle("g", ms...)
	// One leaves, two join: a new target; only some members heartbeat after it, so the
	// group is mid-reconciliation (members revoking, others not yet told).
	gone := ms[0]
	wantCode(t, "leave", w.cgh("g", hbOpts{member: gone.id, epoch: -1}).ErrorCode, 0)
	ms = append(ms[1:], w.join("g", "t"), w.join("g", "t"))
	ms[0].beat()
	ms[1].beat()
	before := memberStates(w.cgDescribe(1, "g").Groups[0])
	if len(before) != 7 {
		t.Fatalf("%d members before the crash, want 7", len(before))
	}
	img := t.TempDir()
	brokertest.CopyTree(t, w.cfg.DataDir, img)
	if _, err := os.Stat(filepath.Join(offsets.Dir(img), offsets.FileName("g"))); !os.IsNotExist(err) {
		t.Fatalf("the group file was written before its checkpoint (%v): the journal is not what is tested", err)
	}
	if n := countInTree(t, img, `"consumer":{"meta"`); n == 0 {
		t.Fatal("no consumer delta in the journal: every save wrote the whole state")
	}
	// Restart over the copy (a crash: the journal's deltas replayed), then over the
	// original after a clean stop (the file holds the state the deltas made).
	orig, origDir := w.b, w.cfg.DataDir
	w.cfg.DataDir = img
	w.b = brokertest.StartWith(t, w.cfg)
	if after := memberStates(w.cgDescribe(1, "g").Groups[0]); !reflect.DeepEqual(after, before) {
		t.Fatalf("after the crash:\n%v\nbefore:\n%v", after, before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	w.b, w.cfg.DataDir = orig, origDir
	w.restart()
	if after := memberStates(w.cgDescribe(1, "g").Groups[0]); !reflect.DeepEqual(after, before) {
		t.Fatalf("after the restart:\n%v\nbefore:\n%v", after, before)
	}
	// And the members carry on from there.
	w.settle("g", ms...)
	noDoubleOwner(t, ms...)
}

// memberStates is every member's epoch, state, assignment and target as described.
func memberStates(d kmsg.ConsumerGroupDescribeResponseGroup) map[string]string {
	out := map[string]string{}
	for _, m := range d.Members {
		out[m.MemberID] = fmt.Sprintf("epoch %d assigned %v target %v", m.MemberEpoch, describedParts(m.Assignment), describedParts(m.TargetAssignment))
	}
	return out
}

func describedParts(a kmsg.Assignment) []int32 {
	var ps []int32
	for _, t := range a.TopicPartitions {
		ps = append(ps, t.Partitions...)
	}
	slices.Sort(ps)
	return ps
}

// countInTree counts s in every file under dir.
func countInTree(t *testing.T, dir, s string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n += bytes.Count(b, []byte(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
