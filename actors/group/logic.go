package group

import (
	"bytes"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
)

// The decisions of the group coordinator that need no actor: each is a plain function of
// its inputs, table-tested in logic_test.go.

// state is a classic group's state, as DescribeGroups and ListGroups name it.
//
//	         first join              every member joined           leader's SyncGroup
//	Empty ─────────────▶ PreparingRebalance ─────────────▶ CompletingRebalance ─────────▶ Stable
//	  ▲                    │   ▲      ▲   (or rebalance timeout)    │                       │
//	  │ join completes     │   │      └─────────────────────────────┘                       │
//	  └────────────────────┘   │       join with new protocols, leave, session expiry,      │
//	    with no members        │       a member that never sent SyncGroup                   │
//	                           └────────────────────────────────────────────────────────────┘
//	                             leader rejoins, protocols change, leave, session expiry
//
//	Dead: from any state when the group is deleted or its last offset expires; the
//	actor stops and the group is forgotten.
//
// Allowed previous states (Apache GroupMetadata / ClassicGroupState): PreparingRebalance
// ← Empty, CompletingRebalance, Stable; CompletingRebalance ← PreparingRebalance; Stable
// ← CompletingRebalance; Empty ← PreparingRebalance.
type state int8

const (
	stateEmpty state = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

func (s state) String() string { return stateNames[s] }

// canRebalance: the states from which PreparingRebalance may be entered.
func (s state) canRebalance() bool {
	return s == stateEmpty || s == stateCompletingRebalance || s == stateStable
}

// consumerProtocol is the protocol type of Kafka consumers (ConsumerProtocol.PROTOCOL_TYPE).
const consumerProtocol = "consumer"

// newMemberJoinTimeout is how long a new member's first join may stay parked before it is
// dropped (Apache GroupCoordinator.NewMemberJoinTimeoutMs, KAFKA-7610).
const newMemberJoinTimeout = 5 * time.Minute

// validSessionTimeout checks a JoinGroup's session timeout against
// group.min/max.session.timeout.ms (INVALID_SESSION_TIMEOUT otherwise). The rebalance
// timeout is not checked, as in Apache.
func validSessionTimeout(d, min, max time.Duration) bool {
	return d >= min && d <= max
}

// selectProtocol is the protocol vote (Apache GroupMetadata.selectProtocol): the
// candidates are the protocols every member supports; each member votes for the first
// candidate in its own preference order; most votes wins. Apache breaks a tie by hash-map
// order; here the candidate listed first by the first member wins, so the outcome is
// deterministic. ok is false when no protocol is common to all.
func selectProtocol(members [][]Protocol) (name string, ok bool) {
	if len(members) == 0 {
		return "", false
	}
	count := map[string]int{}
	for _, ps := range members {
		for i, p := range ps {
			// A member lists a handful of protocols: a scan finds a repeat without a map
			// per member (10,000 members make one vote).
			if !listedBefore(ps[:i], p.Name) {
				count[p.Name]++
			}
		}
	}
	candidate := func(n string) bool { return count[n] == len(members) }
	votes := map[string]int{}
	for _, ps := range members {
		for _, p := range ps {
			if candidate(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := -1
	for _, p := range members[0] {
		if candidate(p.Name) && votes[p.Name] > best {
			best, name = votes[p.Name], p.Name
		}
	}
	return name, best >= 0
}

func listedBefore(ps []Protocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// supportsProtocols says whether a member with protocolType and protocols may join
// (Apache GroupMetadata.supportsProtocols): an empty group takes any non-empty type with
// at least one protocol; otherwise the type must match and one protocol must be supported
// by every current member. supported counts, per protocol name, the members listing it.
func supportsProtocols(empty bool, groupType string, members int, supported map[string]int,
	protocolType string, protocols []Protocol) bool {
	if empty {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != groupType {
		return false
	}
	for _, p := range protocols {
		if supported[p.Name] == members {
			return true
		}
	}
	return false
}

// sameProtocols is Apache MemberMetadata.matches: the same names in the same order with
// the same metadata bytes.
func sameProtocols(a, b []Protocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Metadata, b[i].Metadata) {
			return false
		}
	}
	return true
}

// acceptJoin applies group.max.size to a joining member (Apache acceptJoiningMember):
// Empty/Dead take anyone; PreparingRebalance takes a member already waiting in the join or
// while fewer than max wait; CompletingRebalance/Stable take known members or while the
// group is below max.
func acceptJoin(s state, max int, known, awaitingJoin bool, numAwaitingJoin, size int) bool {
	switch s {
	case stateEmpty, stateDead:
		return true
	case statePreparingRebalance:
		return awaitingJoin || numAwaitingJoin < max
	default:
		return known || size < max
	}
}

// memberCheck is the outcome of validateCurrentMember (Apache): a given instance id
// mapped to another member id is FENCED_INSTANCE_ID; an unknown instance or member id is
// UNKNOWN_MEMBER_ID.
func memberCheck(memberID, instanceID string, known bool, instanceOwner string, instanceKnown bool) int16 {
	if instanceID != "" {
		if !instanceKnown {
			return kerr.UnknownMemberID.Code
		}
		if instanceOwner != memberID {
			return kerr.FencedInstanceID.Code
		}
		return 0
	}
	if !known {
		return kerr.UnknownMemberID.Code
	}
	return 0
}

// commitCheck is the validation of an OffsetCommit against the group (Apache 4.0
// OffsetMetadataManager.validateOffsetCommit + ClassicGroup.validateOffsetCommit), in
// order. exists is false for a group this broker has never seen; member is memberCheck's
// result for the request's member and instance.
func commitCheck(exists bool, s state, groupGen, gen int32, memberID, instanceID string,
	member int16, unknownIsNotFound bool) int16 {
	if !exists {
		if gen < 0 {
			return 0 // a simple (admin or manual) commit creates an Empty group
		}
		if unknownIsNotFound {
			return kerr.GroupIDNotFound.Code
		}
		return kerr.IllegalGeneration.Code
	}
	if s == stateDead {
		return kerr.CoordinatorNotAvailable.Code
	}
	if gen < 0 && s == stateEmpty {
		return 0 // simple commit: member and instance are not looked at
	}
	if gen >= 0 || memberID != "" || instanceID != "" {
		if member != 0 {
			return member
		}
		if gen != groupGen {
			return kerr.IllegalGeneration.Code
		}
	} else if s != stateEmpty {
		return kerr.UnknownMemberID.Code
	}
	if s == stateCompletingRebalance {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// txnCommitCheck is commitCheck for a TxnOffsetCommit (Apache 4.0
// ClassicGroup.validateOffsetCommit with isTransactional): the same generation, member
// and instance checks when the request carries any (v3+, KIP-447: they fence a zombie
// consumer's producer), but a commit without them (v0-2) is accepted in every state,
// and CompletingRebalance is no reason to refuse one.
func txnCommitCheck(exists bool, s state, groupGen, gen int32, memberID, instanceID string,
	member int16, unknownIsNotFound bool) int16 {
	if !exists {
		if gen < 0 {
			return 0
		}
		if unknownIsNotFound {
			return kerr.GroupIDNotFound.Code
		}
		return kerr.IllegalGeneration.Code
	}
	if s == stateDead {
		return kerr.CoordinatorNotAvailable.Code
	}
	if gen < 0 && s == stateEmpty {
		return 0
	}
	if gen >= 0 || memberID != "" || instanceID != "" {
		if member != 0 {
			return member
		}
		if gen != groupGen {
			return kerr.IllegalGeneration.Code
		}
	}
	return 0
}

// subscriptions parses the members' ConsumerProtocol subscriptions for the selected
// protocol. known is false when the group is not a consumer group or any metadata does not
// parse: then every topic counts as subscribed (Apache computeSubscribedTopics).
func subscriptions(protocolType string, metadata [][]byte) (topics map[string]bool, known bool) {
	if protocolType != consumerProtocol {
		return nil, false
	}
	topics = map[string]bool{}
	for _, md := range metadata {
		var m kmsg.ConsumerMemberMetadata
		if err := m.ReadFrom(md); err != nil {
			return nil, false
		}
		for _, t := range m.Topics {
			topics[t] = true
		}
	}
	return topics, true
}

// subscribedTo says whether OffsetDelete must refuse a topic with GROUP_SUBSCRIBED_TO_TOPIC
// (Apache 4.0 ClassicGroup.isSubscribedToTopic: checked in every state; unknown
// subscriptions count as subscribed only for the consumer protocol).
func subscribedTo(protocolType string, topics map[string]bool, known bool, topic string) bool {
	if !known {
		return protocolType == consumerProtocol
	}
	return topics[topic]
}

// expiryRule says how a group's offsets may expire now (§5.3): Empty groups (and simple
// groups, which are always Empty) by the offsets actor's rules for them; a Stable consumer
// group with known subscriptions only the offsets of topics it does not subscribe to; any
// other state nothing (the KAFKA-13636 fix). ok is false when nothing may expire.
func expiryRule(s state, protocolType string, topics map[string]bool, known bool,
	retention time.Duration) (offsets.ExpiryRule, bool) {
	switch {
	case s == stateEmpty:
		return offsets.ExpiryRule{Empty: true, Retention: retention}, true
	case s == stateStable && protocolType == consumerProtocol && known:
		return offsets.ExpiryRule{StableConsumer: true, Subscribed: topics, Retention: retention}, true
	default:
		return offsets.ExpiryRule{}, false
	}
}

// matchesFilter reports whether v is in filter, case-insensitively (Apache 4.0
// ListGroups); an empty filter matches everything.
func matchesFilter(filter []string, v string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.EqualFold(f, v) {
			return true
		}
	}
	return false
}

// The group types of ListGroups v5 (its types filter): classic, and consumer for a
// consumer-protocol group (KIP-848).
const (
	classicType  = "classic"
	consumerType = "consumer"
)
