package group

import (
	"regexp"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The consumer group protocol's pure decisions (KIP-848, Apache 4.2): request
// validation, and a member's next assignment (CurrentAssignmentBuilder). Table tests in
// consumer_logic_test.go.

// Special member epochs of ConsumerGroupHeartbeat.
const (
	epochLeave       int32 = -1 // a member leaves
	epochStaticLeave int32 = -2 // a static member leaves for now, keeping its assignment
)

// HeartbeatShape is what ValidateConsumerHeartbeat reads of a request.
type HeartbeatShape struct {
	Version          int16
	Group            string
	MemberID         string
	MemberEpoch      int32
	InstanceID       *string
	RackID           *string
	RebalanceTimeout int32
	Subscribed       []string
	Regex            *string
	ServerAssignor   *string
	OwnedNull        bool
	OwnedEmpty       bool
}

// ValidateConsumerHeartbeat checks a ConsumerGroupHeartbeat before any group sees it, as
// Apache's GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid does, in
// its order: INVALID_REQUEST (42) for a missing or malformed field, UNSUPPORTED_ASSIGNOR
// (112) for an assignor not in group.consumer.assignors. A regular expression that does
// not compile is the group's to refuse (INVALID_REGULAR_EXPRESSION), as in Apache.
func ValidateConsumerHeartbeat(r HeartbeatShape, assignors []string) (int16, string) {
	invalid := kerr.InvalidRequest.Code
	if r.MemberID == "" && (r.Version >= 1 || r.MemberEpoch != 0) {
		return invalid, "MemberId can't be empty."
	}
	if r.Group == "" {
		return invalid, "GroupId can't be empty."
	}
	if r.InstanceID != nil && *r.InstanceID == "" {
		return invalid, "InstanceId can't be empty."
	}
	if r.RackID != nil && *r.RackID == "" {
		return invalid, "RackId can't be empty."
	}
	switch {
	case r.MemberEpoch == 0:
		if r.RebalanceTimeout == -1 {
			return invalid, "RebalanceTimeoutMs must be provided in first request."
		}
		if r.OwnedNull || !r.OwnedEmpty {
			return invalid, "TopicPartitions must be empty when (re-)joining."
		}
		if r.Subscribed == nil && r.Regex == nil {
			return invalid, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
		}
	case r.MemberEpoch == epochStaticLeave:
		if r.InstanceID == nil {
			return invalid, "InstanceId can't be null."
		}
	case r.MemberEpoch < epochStaticLeave:
		return invalid, "MemberEpoch is invalid."
	}
	if r.ServerAssignor != nil && !slices.Contains(assignors, *r.ServerAssignor) {
		return kerr.UnsupportedAssignor.Code, "ServerAssignor " + *r.ServerAssignor + " is not supported. Supported assignors: " + joinNames(assignors) + "."
	}
	return 0, ""
}

func joinNames(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ", "
		}
		out += v
	}
	return out
}

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

// assignment is topic → sorted partitions. An empty topic is never kept.
type assignment map[string][]int32

func (a assignment) clone() assignment {
	out := make(assignment, len(a))
	for t, ps := range a {
		out[t] = slices.Clone(ps)
	}
	return out
}

func (a assignment) has(t string, p int32) bool {
	_, ok := slices.BinarySearch(a[t], p)
	return ok
}

func (a assignment) add(t string, p int32) {
	ps := a[t]
	i, ok := slices.BinarySearch(ps, p)
	if !ok {
		a[t] = slices.Insert(ps, i, p)
	}
}

func (a assignment) remove(t string, p int32) {
	ps := a[t]
	if i, ok := slices.BinarySearch(ps, p); ok {
		ps = slices.Delete(ps, i, i+1)
		if len(ps) == 0 {
			delete(a, t)
		} else {
			a[t] = ps
		}
	}
}

func (a assignment) count() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a assignment) equal(b assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for t, ps := range a {
		if !slices.Equal(ps, b[t]) {
			return false
		}
	}
	return true
}

// each calls f for every partition, topics in name order.
func (a assignment) each(f func(t string, p int32)) {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		for _, p := range a[t] {
			f(t, p)
		}
	}
}

// subsetOf: every partition of a is in b.
func (a assignment) subsetOf(b assignment) bool {
	for t, ps := range a {
		for _, p := range ps {
			if !b.has(t, p) {
				return false
			}
		}
	}
	return true
}

// intersects: a and b share a partition.
func (a assignment) intersects(b assignment) bool {
	for t, ps := range a {
		for _, p := range ps {
			if b.has(t, p) {
				return true
			}
		}
	}
	return false
}

// memberState is a consumer-protocol member's reconciliation state (Apache MemberState).
type memberState uint8

const (
	memberStable memberState = iota
	// memberUnrevoked: the member keeps its epoch and must stop reporting the partitions
	// it is revoking before it gets anything new.
	memberUnrevoked
	// memberUnreleased: the member is at the new epoch but waits for partitions another
	// member still owns.
	memberUnreleased
)

func (s memberState) String() string {
	switch s {
	case memberUnrevoked:
		return "unrevoked_partitions"
	case memberUnreleased:
		return "unreleased_partitions"
	default:
		return "stable"
	}
}

// memberStates lists the states, the label values of kaas_consumer_group_members.
var memberStates = []string{"stable", "unrevoked_partitions", "unreleased_partitions", "left"}

// reconciled is a member's next step towards its target.
type reconciled struct {
	state    memberState
	epoch    int32
	assigned assignment // what the member is told it owns
	revoking assignment // what it must give up first
}

// reconcile is Apache's CurrentAssignmentBuilder.build: the member's next state given
// its current one, the target at targetEpoch, the partitions it reports owning (owned
// nil: not reported, as in a keepalive heartbeat; counts as still owning), and who else
// holds a partition (heldByOther). Revocation always comes first: a partition is never
// given to a member while another still holds it, and a member revoking keeps its epoch
// and is told only what it retains.
func reconcile(state memberState, epoch int32, assigned, revoking, target assignment, targetEpoch int32,
	owned assignment, heldByOther func(t string, p int32) bool) reconciled {
	ownsAny := func(a assignment) bool {
		if owned == nil {
			return len(a) > 0
		}
		return a.intersects(owned)
	}
	switch state {
	case memberStable:
		if epoch == targetEpoch {
			return reconciled{state: memberStable, epoch: epoch, assigned: assigned, revoking: revoking}
		}
	case memberUnrevoked:
		if ownsAny(revoking) {
			return reconciled{state: memberUnrevoked, epoch: epoch, assigned: assigned, revoking: revoking}
		}
	}
	// computeNextAssignment
	retain, revoke, next := assignment{}, assignment{}, assignment{}
	unreleased := false
	for t, ps := range assigned {
		for _, p := range ps {
			if target.has(t, p) {
				retain.add(t, p)
			} else {
				revoke.add(t, p)
			}
		}
	}
	for t, ps := range target {
		for _, p := range ps {
			if assigned.has(t, p) {
				continue
			}
			if heldByOther(t, p) {
				unreleased = true
				continue
			}
			next.add(t, p)
		}
	}
	if len(revoke) > 0 && ownsAny(revoke) {
		return reconciled{state: memberUnrevoked, epoch: epoch, assigned: retain, revoking: revoke}
	}
	for t, ps := range next {
		for _, p := range ps {
			retain.add(t, p)
		}
	}
	if unreleased {
		return reconciled{state: memberUnreleased, epoch: targetEpoch, assigned: retain, revoking: assignment{}}
	}
	return reconciled{state: memberStable, epoch: targetEpoch, assigned: retain, revoking: assignment{}}
}

// epochCheck is Apache's throwIfMemberEpochIsInvalid for a heartbeat with an epoch > 0:
// an epoch ahead of the member's is FENCED_MEMBER_EPOCH; one behind is too, unless it is
// the member's previous epoch and what it owns is within its assignment (its last
// response was lost: it did not apply it yet). owned nil is not a subset.
func epochCheck(got, epoch, prevEpoch int32, owned, assigned assignment) int16 {
	switch {
	case got > epoch:
		return kerr.FencedMemberEpoch.Code
	case got < epoch:
		if got == prevEpoch && owned != nil && owned.subsetOf(assigned) {
			return 0
		}
		return kerr.FencedMemberEpoch.Code
	}
	return 0
}

// commitEpochCheck is the member-epoch check of an OffsetCommit v9+ to a
// consumer-protocol group, per partition as KIP-1251 relaxes it: the member's own epoch
// is always accepted; an older one only for a partition the member still holds and was
// given at that epoch or before (since), so commits racing an epoch bump are not refused
// with STALE_MEMBER_EPOCH. An epoch above the member's is always stale.
func commitEpochCheck(got, epoch int32, holds bool, since int32) int16 {
	switch {
	case got == epoch:
		return 0
	case got < epoch && holds && since <= got:
		return 0
	}
	return kerr.StaleMemberEpoch.Code
}

// compileRegex compiles a SubscribedTopicRegex to match whole topic names, as Apache's
// RE2/J matcher(topic).matches() does. Go's regexp implements the same RE2 syntax; its
// Unicode tables are Go's, and RE2/J's Java-only classes (\p{javaLowerCase}) are refused.
func compileRegex(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}
