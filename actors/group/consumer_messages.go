package group

import (
	"time"

	"kaas/actors/actor"
)

// The consumer group protocol's messages (KIP-848): ConsumerGroupHeartbeat and
// ConsumerGroupDescribe, sent by their handlers in actors/conn to the groups manager,
// which routes them by group id like every classic group request.

// TopicID is a topic's UUID, as the topic catalogue and the wire name it.
type TopicID = [16]byte

// TopicLookup is the topic catalogue as consumer-protocol groups read it: names to ids
// and partition counts, and back. partition.Catalog is one: a published snapshot read
// without asking the topics manager, so a group sees a topic created or grown on its
// next heartbeat.
type TopicLookup interface {
	Topic(name string) (TopicID, int32, bool)
	TopicName(id TopicID) (string, bool)
	// TopicNames lists every topic with the catalogue's number; TopicsGen is the number
	// in force (a regular expression is resolved again only when it moves).
	TopicNames() ([]string, uint64)
	TopicsGen() uint64
}

// ConsumerSettings are the group.consumer.* settings (Apache's names).
type ConsumerSettings struct {
	// Enabled: group.coordinator.rebalance.protocols names consumer.
	Enabled           bool
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	MaxSize           int
	// Assignors are the server-side assignors, the first the default ("uniform", "range").
	Assignors []string
	// Topics is the topic catalogue (nil: no topic exists).
	Topics TopicLookup
	// Migration is group.consumer.migration.policy (Migration*, migrate.go); "" is
	// Apache's default, bidirectional.
	Migration string
	// GroupConfigs are the per-group consumer.* configs (GROUP config resources; nil:
	// none), read at each heartbeat so that a change applies from the next one.
	GroupConfigs GroupConfigLookup
}

// GroupConfigLookup gives a group's consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms, 0 where the group sets none (SessionTimeout and
// HeartbeatInterval apply). partition.Catalog is one: published by the topics manager,
// read without asking it.
type GroupConfigLookup interface {
	ConsumerGroupTimes(group string) (session, heartbeat time.Duration)
}

// consumerTimes are the session timeout and heartbeat interval of the group's
// consumer-protocol members: the group's configs, else the broker's settings (Apache's
// GroupMetadataManager.consumerGroupSessionTimeoutMs and ...HeartbeatIntervalMs).
func (g *groupActor) consumerTimes() (session, heartbeat time.Duration) {
	s := &g.cfg.Settings.Consumer
	session, heartbeat = s.SessionTimeout, s.HeartbeatInterval
	if s.GroupConfigs != nil {
		gs, gh := s.GroupConfigs.ConsumerGroupTimes(g.id)
		if gs > 0 {
			session = gs
		}
		if gh > 0 {
			heartbeat = gh
		}
	}
	return session, heartbeat
}

// heartbeatIntervalMs is the heartbeat interval a ConsumerGroupHeartbeat answer gives.
func (g *groupActor) heartbeatIntervalMs() int32 {
	_, h := g.consumerTimes()
	return int32(h.Milliseconds())
}

// OwnedTopic is one topic of the partitions a member reports it owns.
type OwnedTopic struct {
	ID         TopicID
	Partitions []int32
}

// ConsumerHeartbeat is a ConsumerGroupHeartbeat, its shape already checked by
// ValidateConsumerHeartbeat. Fields sent as null are nil ("unchanged").
// Reply: *ConsumerHeartbeatResult.
type ConsumerHeartbeat struct {
	Group       string
	Version     int16
	MemberID    string
	MemberEpoch int32
	InstanceID  *string
	RackID      *string
	// RebalanceTimeout in ms; -1 unchanged.
	RebalanceTimeout int32
	Subscribed       []string
	// Regex is SubscribedTopicRegex (v1; "" unsubscribes it), matched against whole
	// topic names.
	Regex          *string
	ServerAssignor *string
	// CanDescribe says whether the request's principal may describe a topic: the topics
	// a regular expression resolves to are filtered by it (Apache). The connection sets
	// it always (allowing everything without an authorizer).
	CanDescribe func(topic string) bool
	// Owned: the partitions the member owns; nil when the request does not say.
	Owned      []OwnedTopic
	ClientID   string
	ClientHost string
	Reply      actor.Promise
}

// AssignedTopic is one topic of an assignment, by id and name.
type AssignedTopic struct {
	ID         TopicID
	Topic      string
	Partitions []int32
}

// ConsumerHeartbeatResult answers a ConsumerHeartbeat. Assignment is sent only when
// HasAssignment (a join, a full request, or a changed assignment: Apache
// consumerGroupHeartbeat).
type ConsumerHeartbeatResult struct {
	ErrorCode         int16
	ErrorMessage      string
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval int32
	HasAssignment     bool
	Assignment        []AssignedTopic
}

// ConsumerDescribe describes one consumer-protocol group (ConsumerGroupDescribe).
// Reply: *ConsumerDescription.
type ConsumerDescribe struct {
	Group string
	Reply actor.Promise
}

// ConsumerDescribedMember is one member in ConsumerGroupDescribe. State is kaas's own
// (stable, unrevoked_partitions, unreleased_partitions, left: a static member that left
// with epoch -2), for `kaas groups describe`; the wire has no field for it.
type ConsumerDescribedMember struct {
	MemberID    string
	InstanceID  string
	RackID      string
	MemberEpoch int32
	ClientID    string
	ClientHost  string
	Subscribed  []string
	Regex       string
	Assignment  []AssignedTopic
	Target      []AssignedTopic
	State       string
	// Classic: the member speaks the classic protocol (member type 0 at v1; 1 otherwise).
	Classic bool
}

// ConsumerDescription answers ConsumerDescribe. A group that does not exist or is not a
// consumer-protocol group is GROUP_ID_NOT_FOUND (Apache).
type ConsumerDescription struct {
	Group           string
	ErrorCode       int16
	ErrorMessage    string
	State           string
	Epoch           int32
	AssignmentEpoch int32
	AssignorName    string
	Members         []ConsumerDescribedMember
}

func (m *ConsumerHeartbeat) GroupID() string { return m.Group }
func (m *ConsumerDescribe) GroupID() string  { return m.Group }

func (m *ConsumerHeartbeat) withReply(p actor.Promise) Request { c := *m; c.Reply = p; return &c }
func (m *ConsumerDescribe) withReply(p actor.Promise) Request  { c := *m; c.Reply = p; return &c }

func (m *ConsumerHeartbeat) fail(code int16) {
	m.Reply.Resolve(&ConsumerHeartbeatResult{ErrorCode: code})
}
func (m *ConsumerDescribe) fail(code int16) {
	m.Reply.Resolve(&ConsumerDescription{Group: m.Group, ErrorCode: code})
}

func (m *ConsumerHeartbeat) AnswerCrash(*actor.Crashed) { m.fail(notAvailable) }
func (m *ConsumerDescribe) AnswerCrash(*actor.Crashed)  { m.fail(notAvailable) }

// Consumer-protocol timers (actor.After → the group itself), guarded like the classic
// ones: a firing whose seq no longer matches the member's is stale.
type (
	// consumerSessionCheck fires at a member's session deadline.
	consumerSessionCheck struct {
		member string
		seq    uint64
	}
	// consumerRebalanceCheck fires when a member revoking partitions at epoch has had
	// its rebalance timeout.
	consumerRebalanceCheck struct {
		member string
		seq    uint64
		epoch  int32
	}
)
