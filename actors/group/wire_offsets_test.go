package group_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func commitCodes(r *kmsg.OffsetCommitResponse) []int16 {
	var out []int16
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			out = append(out, p.ErrorCode)
		}
	}
	return out
}

func allCodes(t *testing.T, what string, got []int16, want int16) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("%s: no partitions", what)
	}
	for _, c := range got {
		wantCode(t, what, c, want)
	}
}

// Scenarios 86-93: OffsetCommit validation against the group.
func TestOffsetCommitValidation(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(2, "t")
	parts := map[string][]int32{"t": {0, 1}}
	allCodes(t, "v8 unknown group with generation", commitCodes(w.do(commitReq("nope", 8, "memberId", 1, parts)).(*kmsg.OffsetCommitResponse)), kerr.IllegalGeneration.Code)
	allCodes(t, "v9 unknown group with generation", commitCodes(w.do(commitReq("nope", 9, "memberId", 1, parts)).(*kmsg.OffsetCommitResponse)), kerr.GroupIDNotFound.Code)
	// Simple commits, without looking at member or instance (scenario 88).
	allCodes(t, "simple commit", commitCodes(w.do(commitReq("simple", 2, "", -1, parts)).(*kmsg.OffsetCommitResponse)), 0)
	oc := commitReq("simple", 7, "unknown", -1, parts)
	oc.InstanceID = inst("instance-id")
	allCodes(t, "simple commit with member and instance", commitCodes(w.do(oc).(*kmsg.OffsetCommitResponse)), 0)
	if g := describe(w, 5, "simple").Groups[0]; g.State != "Empty" || g.ProtocolType != "" {
		t.Fatalf("simple group: %+v", g)
	}

	// Scenario 89: CompletingRebalance.
	m, ch := w.dynJoin("g", joinOpts{})
	j := wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
	allCodes(t, "completing", commitCodes(w.do(commitReq("g", 8, m, j.Generation, parts)).(*kmsg.OffsetCommitResponse)), kerr.RebalanceInProgress.Code)
	allCodes(t, "no member", commitCodes(w.do(commitReq("g", 8, "", j.Generation, parts)).(*kmsg.OffsetCommitResponse)), kerr.UnknownMemberID.Code)
	allCodes(t, "generation", commitCodes(w.do(commitReq("g", 8, m, j.Generation+1, parts)).(*kmsg.OffsetCommitResponse)), kerr.IllegalGeneration.Code)
	allCodes(t, "simple on a live group", commitCodes(w.do(commitReq("g", 8, "", -1, parts)).(*kmsg.OffsetCommitResponse)), kerr.UnknownMemberID.Code)
	wantCode(t, "sync", w.do(syncReq("g", m, j.Generation, nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	allCodes(t, "stable", commitCodes(w.do(commitReq("g", 8, m, j.Generation, parts)).(*kmsg.OffsetCommitResponse)), 0)

	// Scenario 90: after the member leaves, simple commits work again.
	wantCode(t, "leave", w.do(leaveReq(0, "g", kmsg.LeaveGroupRequestMember{MemberID: m})).(*kmsg.LeaveGroupResponse).ErrorCode, 0)
	allCodes(t, "after leave", commitCodes(w.do(commitReq("g", 8, "", -1, parts)).(*kmsg.OffsetCommitResponse)), 0)

	// Scenario 92: the group id "" is a valid simple group for commits and fetches.
	allCodes(t, "empty id", commitCodes(w.do(commitReq("", 8, "", -1, parts)).(*kmsg.OffsetCommitResponse)), 0)

	// Scenario 93: metadata too large for one partition; the other is written.
	big := commitReq("big", 8, "", -1, map[string][]int32{"t": {0, 1}})
	long := strings.Repeat("x", 4097)
	big.Topics[0].Partitions[0].Metadata = &long
	got := commitCodes(w.do(big).(*kmsg.OffsetCommitResponse))
	if got[0] != kerr.OffsetMetadataTooLarge.Code || got[1] != 0 {
		t.Fatalf("metadata too large: %v", got)
	}
}

// Scenarios 96-99: OffsetFetch shapes at v1, v7 and v8.
func TestOffsetFetch(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(2, "t", "u")
	allCodes(t, "commit", commitCodes(w.do(commitReq("g", 8, "", -1, map[string][]int32{"t": {0, 1}, "u": {0}})).(*kmsg.OffsetCommitResponse)), 0)
	r7 := w.do(fetchReq(7, "g", map[string][]int32{"t": {0, 5}})).(*kmsg.OffsetFetchResponse)
	p := r7.Topics[0].Partitions
	if r7.ErrorCode != 0 || p[0].Offset != 100 || p[0].LeaderEpoch != 7 || *p[0].Metadata != "md" || p[1].Offset != -1 || p[1].LeaderEpoch != -1 {
		t.Fatalf("v7 fetch %+v", r7)
	}
	all := w.do(fetchReq(7, "g", nil)).(*kmsg.OffsetFetchResponse)
	if len(all.Topics) != 2 || all.Topics[0].Topic != "t" || len(all.Topics[0].Partitions) != 2 || all.Topics[1].Topic != "u" {
		t.Fatalf("v7 all %+v", all.Topics)
	}
	r1 := w.do(fetchReq(1, "unknown", map[string][]int32{"t": {0}})).(*kmsg.OffsetFetchResponse)
	if r1.Topics[0].Partitions[0].Offset != -1 || r1.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("v1 unknown %+v", r1)
	}
	r8 := kmsg.NewPtrOffsetFetchRequest()
	r8.Version = 8
	r8.Groups = []kmsg.OffsetFetchRequestGroup{
		{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{1}}}},
		{Group: "unknown", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "foo", Partitions: []int32{0, 1}}}},
		{Group: "unknown2"},
		{Group: "g"},
	}
	resp := w.do(r8).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 4 {
		t.Fatalf("v8 groups %d", len(resp.Groups))
	}
	if g := resp.Groups[0]; g.Group != "g" || g.Topics[0].Partitions[0].Offset != 101 {
		t.Fatalf("v8 g %+v", g)
	}
	if g := resp.Groups[1]; g.ErrorCode != 0 || len(g.Topics[0].Partitions) != 2 || g.Topics[0].Partitions[1].Offset != -1 {
		t.Fatalf("v8 unknown %+v", g)
	}
	if g := resp.Groups[2]; g.ErrorCode != 0 || len(g.Topics) != 0 {
		t.Fatalf("v8 unknown all %+v", g)
	}
	if g := resp.Groups[3]; len(g.Topics) != 2 {
		t.Fatalf("v8 all %+v", g)
	}
}

// Scenarios 113-115: OffsetDelete.
func TestOffsetDelete(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(1, "foo", "bar")
	od := func(g string, parts map[string][]int32) *kmsg.OffsetDeleteResponse {
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = g
		for topic, ps := range parts {
			rt := kmsg.NewOffsetDeleteRequestTopic()
			rt.Topic = topic
			for _, p := range ps {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: p})
			}
			r.Topics = append(r.Topics, rt)
		}
		return w.do(r).(*kmsg.OffsetDeleteResponse)
	}
	wantCode(t, "unknown group", od("nope", map[string][]int32{"foo": {0}}).ErrorCode, kerr.GroupIDNotFound.Code)

	// A non-consumer group with members.
	ch := w.async(joinReq("other", joinOpts{version: 3, ptype: "My Protocol"}))
	wait[*kmsg.JoinGroupResponse](t, ch, 5*time.Second)
	wantCode(t, "non-consumer", od("other", map[string][]int32{"foo": {0}}).ErrorCode, kerr.NonEmptyGroup.Code)

	// A consumer group subscribed to "bar", Stable, with offsets on foo and bar.
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"bar"}
	jr := joinReq("g", joinOpts{version: 3})
	jr.Protocols[0].Metadata = meta.AppendTo(nil)
	j := wait[*kmsg.JoinGroupResponse](t, w.async(jr), 5*time.Second)
	wantCode(t, "sync", w.do(syncReq("g", j.MemberID, j.Generation, nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	allCodes(t, "commit", commitCodes(w.do(commitReq("g", 8, j.MemberID, j.Generation, map[string][]int32{"foo": {0}, "bar": {0}})).(*kmsg.OffsetCommitResponse)), 0)
	r := od("g", map[string][]int32{"foo": {0}, "bar": {0}})
	codes := map[string]int16{}
	for _, t := range r.Topics {
		codes[t.Topic] = t.Partitions[0].ErrorCode
	}
	if r.ErrorCode != 0 || codes["foo"] != 0 || codes["bar"] != kerr.GroupSubscribedToTopic.Code {
		t.Fatalf("stable consumer group: %d %v", r.ErrorCode, codes)
	}
	f := w.do(fetchReq(7, "g", map[string][]int32{"foo": {0}, "bar": {0}})).(*kmsg.OffsetFetchResponse)
	for _, tp := range f.Topics {
		if (tp.Topic == "foo") != (tp.Partitions[0].Offset == -1) {
			t.Fatalf("after delete: %s at %d", tp.Topic, tp.Partitions[0].Offset)
		}
	}
	// Empty: everything may go.
	wantCode(t, "leave", w.do(leaveReq(0, "g", kmsg.LeaveGroupRequestMember{MemberID: j.MemberID})).(*kmsg.LeaveGroupResponse).ErrorCode, 0)
	r = od("g", map[string][]int32{"bar": {0}})
	if r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("empty group delete %+v", r)
	}
}

// Scenarios 94, 116: partitions missing from the topic catalogue get
// UNKNOWN_TOPIC_OR_PARTITION before the coordinator sees the request; the others are
// committed or deleted. An OffsetCommit with no partition left gets no coordinator
// check at all; an OffsetDelete still asks the group.
func TestOffsetsUnknownPartitions(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(2, "t")
	oc := commitReq("g", 8, "", -1, map[string][]int32{"t": {0, 5, 1}})
	extra := kmsg.NewOffsetCommitRequestTopic()
	extra.Topic = "nope"
	extra.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}
	oc.Topics = append(oc.Topics, extra)
	got := commitCodes(w.do(oc).(*kmsg.OffsetCommitResponse))
	unknown := kerr.UnknownTopicOrPartition.Code
	if len(got) != 4 || got[0] != 0 || got[1] != unknown || got[2] != 0 || got[3] != unknown {
		t.Fatalf("mixed commit: %v", got)
	}
	if got := w.committedTopics("g"); len(got) != 1 || got["t"] != 2 {
		t.Fatalf("committed: %v", got)
	}
	// Only unknown partitions, to an unknown group with a generation: the group would
	// say ILLEGAL_GENERATION, but it is never asked.
	allCodes(t, "only unknown", commitCodes(w.do(commitReq("nope", 8, "m", 1, map[string][]int32{"nope": {0}, "t": {2}})).(*kmsg.OffsetCommitResponse)), unknown)

	od := func(g string, parts ...[2]any) *kmsg.OffsetDeleteResponse {
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = g
		for _, p := range parts {
			rt := kmsg.NewOffsetDeleteRequestTopic()
			rt.Topic = p[0].(string)
			rt.Partitions = []kmsg.OffsetDeleteRequestTopicPartition{{Partition: p[1].(int32)}}
			r.Topics = append(r.Topics, rt)
		}
		return w.do(r).(*kmsg.OffsetDeleteResponse)
	}
	r := od("g", [2]any{"nope", int32(0)}, [2]any{"t", int32(0)}, [2]any{"t", int32(9)})
	if r.ErrorCode != 0 || len(r.Topics) != 3 || r.Topics[0].Partitions[0].ErrorCode != unknown ||
		r.Topics[1].Partitions[0].ErrorCode != 0 || r.Topics[2].Partitions[0].ErrorCode != unknown {
		t.Fatalf("mixed delete: %+v", r)
	}
	if got := w.committedTopics("g"); got["t"] != 1 {
		t.Fatalf("after delete: %v", got)
	}
	// The group is asked although no partition is left: its error is reported.
	wantCode(t, "unknown group, unknown topic", od("absent", [2]any{"nope", int32(0)}).ErrorCode, kerr.GroupIDNotFound.Code)
}

// Any int64 a client commits is stored and fetched back as sent, as Apache does (its
// OffsetCommit has no range check on the offset): kafkajs's admin.resetOffsets({earliest:
// true}) commits -2 and its consumers resolve it on their next fetch, so a refusal
// (OFFSET_OUT_OF_RANGE) crashed them. The values survive a broker restart.
func TestOffsetCommitKeepsAnyOffset(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(6, "t")
	values := []struct {
		offset int64
		epoch  int32
	}{{-2, -1}, {-1, -1}, {math.MinInt64, 3}, {math.MaxInt64, math.MaxInt32}, {-1000, -5}, {0, math.MinInt32}}
	commit := commitReq("reset", 8, "", -1, map[string][]int32{"t": {0, 1, 2, 3, 4, 5}})
	for i := range commit.Topics[0].Partitions {
		p := &commit.Topics[0].Partitions[i]
		p.Offset, p.LeaderEpoch = values[p.Partition].offset, values[p.Partition].epoch
	}
	allCodes(t, "commit", commitCodes(w.do(commit).(*kmsg.OffsetCommitResponse)), 0)
	check := func(when string) {
		t.Helper()
		r := w.do(fetchReq(7, "reset", map[string][]int32{"t": {0, 1, 2, 3, 4, 5}})).(*kmsg.OffsetFetchResponse)
		wantCode(t, when+": fetch", r.ErrorCode, 0)
		for _, p := range r.Topics[0].Partitions {
			want := values[p.Partition]
			if p.ErrorCode != 0 || p.Offset != want.offset || p.LeaderEpoch != want.epoch || *p.Metadata != "md" {
				t.Fatalf("%s: partition %d fetched %+v, want offset %d, leader epoch %d", when, p.Partition, p, want.offset, want.epoch)
			}
		}
	}
	check("before the restart")
	w.restart()
	check("after the restart")
}
