package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
)

// This file is the contract between the connection handlers (actors/conn) and the groups
// manager. Every request names its group and carries a Promise that is resolved exactly
// once with the result type named in its doc line: on success, with an error code, or
// with COORDINATOR_NOT_AVAILABLE when the group actor panics or restarts under it
// (NOT_COORDINATOR when it stops).
// Messages are pointers and are never mutated after they are sent.

// Request is a message for one group: the manager routes it to that group's actor,
// spawning it on first touch.
type Request interface {
	// AnswerCrash answers the request when the actor holding it panics: its failure
	// with COORDINATOR_NOT_AVAILABLE.
	actor.Request
	// GroupID names the group the request is for.
	GroupID() string
	// withReply returns a copy answering to p (the manager's fan-out uses it).
	withReply(p actor.Promise) Request
	// fail answers the request with code, in the shape its caller expects.
	fail(code int16)
}

// Protocol is one assignment protocol a member supports, in its preference order.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinGroup asks to join (or rejoin) a group. Sent by the JoinGroup handler; the group
// parks it until the rebalance round completes. Reply: *JoinResult.
type JoinGroup struct {
	Group            string
	MemberID         string // "" for a new member
	InstanceID       string // group.instance.id; "" for a dynamic member (KIP-345)
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration // JoinGroup v0: the session timeout (KAFKA-8653)
	ProtocolType     string
	Protocols        []Protocol
	// RequireKnownMemberID is set from v4: a new dynamic member first gets
	// MEMBER_ID_REQUIRED with its id (KIP-394).
	RequireKnownMemberID bool
	// SupportsSkipAssignment is set from v9: a static leader replaced in Stable is told to
	// skip the assignment (KIP-814).
	SupportsSkipAssignment bool
	Reason                 string // KIP-800, v8+
	Reply                  actor.Promise
}

// JoinMember is one member as the leader sees it in the JoinGroup response.
type JoinMember struct {
	MemberID   string
	InstanceID string // "" when dynamic
	Metadata   []byte
}

// JoinResult answers a JoinGroup.
type JoinResult struct {
	ErrorCode      int16
	Generation     int32
	ProtocolType   string
	ProtocolName   string
	Leader         string
	MemberID       string
	SkipAssignment bool
	Members        []JoinMember // the leader's view; empty for followers
}

// SyncGroup delivers the leader's assignment, or asks a follower's. Reply: *SyncResult.
type SyncGroup struct {
	Group        string
	MemberID     string
	InstanceID   string
	Generation   int32
	ProtocolType *string // v5+; nil below
	ProtocolName *string // v5+; nil below
	Assignments  map[string][]byte
	Reply        actor.Promise
}

// SyncResult answers a SyncGroup.
type SyncResult struct {
	ErrorCode    int16
	ProtocolType string
	ProtocolName string
	Assignment   []byte
}

// Heartbeat keeps a member's session. Reply: *Result.
type Heartbeat struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
	Reply      actor.Promise
}

// LeaveMember is one member of a LeaveGroup (v0-2 carry one, v3+ a batch).
type LeaveMember struct {
	MemberID   string
	InstanceID string
	Reason     string // KIP-800, v5+
}

// LeaveGroup removes members. Reply: *LeaveResult.
type LeaveGroup struct {
	Group   string
	Members []LeaveMember
	Reply   actor.Promise
}

// LeaveResult has a group-level code and one code per member, in request order.
type LeaveResult struct {
	ErrorCode int16
	Members   []int16
}

// DescribeGroup describes one group. Reply: *Description.
type DescribeGroup struct {
	Group string
	Reply actor.Promise
}

// DescribedMember is one member in DescribeGroups.
type DescribedMember struct {
	MemberID   string
	InstanceID string
	ClientID   string
	ClientHost string
	Metadata   []byte // only when Stable
	Assignment []byte // only when Stable
}

// Description answers DescribeGroup. An unknown group is State "Dead" with ErrorCode
// GROUP_ID_NOT_FOUND; DescribeGroups v0-5 reports it with error 0 (Apache 4.0).
type Description struct {
	Group        string
	ErrorCode    int16
	State        string
	ProtocolType string
	Protocol     string
	Members      []DescribedMember
}

// DeleteGroup deletes an Empty group and its offsets. Reply: *Result.
type DeleteGroup struct {
	Group string
	Reply actor.Promise
}

// CommitOffsets is an OffsetCommit for one group, validated by the group (§4.7 of the
// reference) before its offsets actor stores it. Reply: *offsets.CommitResult.
type CommitOffsets struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
	// UnknownGroupIsNotFound: OffsetCommit v9+ to an unknown group with a generation gets
	// GROUP_ID_NOT_FOUND rather than ILLEGAL_GENERATION (Apache 4.0).
	UnknownGroupIsNotFound bool
	// Version is the OffsetCommit version: a consumer-protocol member must commit with
	// v9+ (Generation is then its member epoch).
	Version int16
	Entries []offsets.Entry
	Reply   actor.Promise
}

// TxnCommitOffsets is a TxnOffsetCommit for one group (KIP-447), sent once the
// transaction coordinator said the group is in the producer's transaction. The group
// validates it as Apache's ClassicGroup.validateOffsetCommit does for a transactional
// commit (generation, member and instance as OffsetCommit's, v3+; neither
// REBALANCE_IN_PROGRESS nor the member-less check of the non-transactional commit), then
// its offsets actor stores the entries in the producer's pending layer.
// Reply: *offsets.CommitResult.
type TxnCommitOffsets struct {
	Group           string
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	MemberID        string // v3+; "" below
	InstanceID      string // v3+; "" when none
	Generation      int32  // v3+; -1 below
	// UnknownGroupIsNotFound: TxnOffsetCommit v6+ to an unknown group with a generation
	// gets GROUP_ID_NOT_FOUND rather than ILLEGAL_GENERATION (KIP-1319, not offered yet).
	UnknownGroupIsNotFound bool
	Entries                []offsets.Entry
	Reply                  actor.Promise
}

// TxnOffsetMarker ends a producer's pending transactional offsets in a group: applied
// (Commit) or dropped. Durable (journaled, fdatasync) before Reply. Sent by the
// transaction coordinator (actors/txn) to the groups manager, which routes it to the
// group. Idempotent: nothing pending for the producer → 0. NOT_COORDINATOR when the group
// is not served here. Reply: *TxnOffsetMarked.
type TxnOffsetMarker struct {
	Group         string
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
	Reply         actor.Promise // *TxnOffsetMarked
}

// TxnOffsetMarked answers a TxnOffsetMarker: 0, or the error the coordinator retries on
// (NOT_COORDINATOR after a failed write or a move, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS).
type TxnOffsetMarked struct{ ErrorCode int16 }

// FetchOffsets reads a group's committed offsets; Partitions nil means all.
// RequireStable (OffsetFetch v7+) marks the partitions with a pending transactional
// offset (offsets.FetchResult.Unstable). Reply: *offsets.FetchResult.
type FetchOffsets struct {
	Group         string
	Partitions    []offsets.TopicPartition
	RequireStable bool
	// MemberChecked: OffsetFetch v9+, whose MemberID (nil: null) and MemberEpoch a
	// consumer-protocol group checks.
	MemberChecked bool
	MemberID      *string
	MemberEpoch   int32
	Reply         actor.Promise
}

// DeleteOffsets is an OffsetDelete (§4.13). Reply: *OffsetDeleteResult.
type DeleteOffsets struct {
	Group      string
	Partitions []offsets.TopicPartition
	Reply      actor.Promise
}

// OffsetDeleteResult has a group-level code, and when it is 0 one code per requested
// partition, in order.
type OffsetDeleteResult struct {
	ErrorCode int16
	Codes     []int16
}

// Result is a plain outcome: 0 or an error code.
type Result struct {
	ErrorCode int16
}

// Batch fans requests for several groups out and answers with every result in request
// order: OffsetFetch v8+, DescribeGroups, DeleteGroups. The requests' own Reply fields
// are ignored. Reply: *BatchResult.
type Batch struct {
	Requests []Request
	Reply    actor.Promise
}

// BatchResult holds one result per request of a Batch, in order.
type BatchResult struct {
	Values []any
}

// ListGroups lists the groups this broker coordinates, live ones and those that exist
// only as an offsets file (listed as Empty). States and Types filter case-insensitively;
// empty means all. Reply: *Listing.
type ListGroups struct {
	States []string
	Types  []string
	Reply  actor.Promise
}

// ListedGroup is one row of ListGroups.
type ListedGroup struct {
	Group        string
	ProtocolType string
	State        string
	Type         string // classic or consumer (ListGroups v5)
}

// Listing answers ListGroups.
type Listing struct {
	ErrorCode int16
	Groups    []ListedGroup
}

func (m *JoinGroup) GroupID() string        { return m.Group }
func (m *SyncGroup) GroupID() string        { return m.Group }
func (m *Heartbeat) GroupID() string        { return m.Group }
func (m *LeaveGroup) GroupID() string       { return m.Group }
func (m *DescribeGroup) GroupID() string    { return m.Group }
func (m *DeleteGroup) GroupID() string      { return m.Group }
func (m *CommitOffsets) GroupID() string    { return m.Group }
func (m *FetchOffsets) GroupID() string     { return m.Group }
func (m *DeleteOffsets) GroupID() string    { return m.Group }
func (m *TxnCommitOffsets) GroupID() string { return m.Group }
func (m *TxnOffsetMarker) GroupID() string  { return m.Group }

func (m *JoinGroup) withReply(p actor.Promise) Request        { c := *m; c.Reply = p; return &c }
func (m *SyncGroup) withReply(p actor.Promise) Request        { c := *m; c.Reply = p; return &c }
func (m *Heartbeat) withReply(p actor.Promise) Request        { c := *m; c.Reply = p; return &c }
func (m *LeaveGroup) withReply(p actor.Promise) Request       { c := *m; c.Reply = p; return &c }
func (m *DescribeGroup) withReply(p actor.Promise) Request    { c := *m; c.Reply = p; return &c }
func (m *DeleteGroup) withReply(p actor.Promise) Request      { c := *m; c.Reply = p; return &c }
func (m *CommitOffsets) withReply(p actor.Promise) Request    { c := *m; c.Reply = p; return &c }
func (m *FetchOffsets) withReply(p actor.Promise) Request     { c := *m; c.Reply = p; return &c }
func (m *DeleteOffsets) withReply(p actor.Promise) Request    { c := *m; c.Reply = p; return &c }
func (m *TxnCommitOffsets) withReply(p actor.Promise) Request { c := *m; c.Reply = p; return &c }
func (m *TxnOffsetMarker) withReply(p actor.Promise) Request  { c := *m; c.Reply = p; return &c }

func (m *JoinGroup) fail(code int16) {
	m.Reply.Resolve(joinError(code, m.MemberID))
}
func (m *SyncGroup) fail(code int16) { m.Reply.Resolve(&SyncResult{ErrorCode: code}) }
func (m *Heartbeat) fail(code int16) { m.Reply.Resolve(&Result{ErrorCode: code}) }
func (m *LeaveGroup) fail(code int16) {
	m.Reply.Resolve(&LeaveResult{ErrorCode: code})
}
func (m *DescribeGroup) fail(code int16) {
	m.Reply.Resolve(&Description{Group: m.Group, ErrorCode: code})
}
func (m *DeleteGroup) fail(code int16) { m.Reply.Resolve(&Result{ErrorCode: code}) }
func (m *CommitOffsets) fail(code int16) {
	codes := make([]int16, len(m.Entries))
	for i := range codes {
		codes[i] = code
	}
	m.Reply.Resolve(&offsets.CommitResult{Codes: codes})
}
func (m *FetchOffsets) fail(code int16) {
	m.Reply.Resolve(&offsets.FetchResult{ErrorCode: code})
}
func (m *DeleteOffsets) fail(code int16) {
	m.Reply.Resolve(&OffsetDeleteResult{ErrorCode: code})
}
func (m *TxnCommitOffsets) fail(code int16) {
	codes := make([]int16, len(m.Entries))
	for i := range codes {
		codes[i] = code
	}
	m.Reply.Resolve(&offsets.CommitResult{Codes: codes})
}
func (m *TxnOffsetMarker) fail(code int16) { m.Reply.Resolve(&TxnOffsetMarked{ErrorCode: code}) }

func (m *JoinGroup) AnswerCrash(*actor.Crashed)        { m.fail(notAvailable) }
func (m *SyncGroup) AnswerCrash(*actor.Crashed)        { m.fail(notAvailable) }
func (m *Heartbeat) AnswerCrash(*actor.Crashed)        { m.fail(notAvailable) }
func (m *LeaveGroup) AnswerCrash(*actor.Crashed)       { m.fail(notAvailable) }
func (m *DescribeGroup) AnswerCrash(*actor.Crashed)    { m.fail(notAvailable) }
func (m *DeleteGroup) AnswerCrash(*actor.Crashed)      { m.fail(notAvailable) }
func (m *CommitOffsets) AnswerCrash(*actor.Crashed)    { m.fail(notAvailable) }
func (m *FetchOffsets) AnswerCrash(*actor.Crashed)     { m.fail(notAvailable) }
func (m *DeleteOffsets) AnswerCrash(*actor.Crashed)    { m.fail(notAvailable) }
func (m *TxnCommitOffsets) AnswerCrash(*actor.Crashed) { m.fail(notAvailable) }
func (m *TxnOffsetMarker) AnswerCrash(*actor.Crashed)  { m.fail(notAvailable) }

// joinError is the JoinGroup error shape: generation -1, no leader, no members
// (JoinGroupRequest.getErrorResponse).
func joinError(code int16, memberID string) *JoinResult {
	return &JoinResult{ErrorCode: code, Generation: -1, MemberID: memberID}
}

// notAvailable is what a request gets when its group actor stops or restarts under it:
// clients retry it, find the coordinator again and rejoin (as after a coordinator move).
var notAvailable = kerr.CoordinatorNotAvailable.Code

// Messages the group actors exchange with the manager and with themselves. Sender →
// receiver (those defined elsewhere name their file):
//
//	passivate        a group → the manager, its parent: it is idle and may stop
//	stopIfIdle       the manager → a group (manager.go): may it still stop?
//	idleReply        a group → the manager (manager.go): the answer to stopIfIdle
//	listEntry        the manager → a live group: its ListGroups row
//	halt             the manager → a group that has had members (manager.go, Halt)
//	expireNow        the manager → a group it woke from disk for offset expiry
//	dropTopics       the manager → a group: drop deleted topics' offsets
//	retentionTick    the manager's sweep → a live group: run offset expiry
//	sessionCheck, joinDeadline, syncDeadline, pendingDeadline
//	                 a group's timers (actor.After) → the group itself
//	*actor.ReceiveTimeout  the actor layer → a group: idle long enough to passivate
//	sweepTick        the manager's timer (actor.Every; manager.go) → the manager
//	sweepMore        the manager → itself (manager.go): the sweep's next batch
//	dropMore         the manager → itself (manager.go): a dropJob's next batch
//	fileIDs          the manager's directory listing (actor.Go; manager.go) → the
//	                 manager, as the value of an *actor.Settled
//	countLive        tests → the manager (manager.go)

// passivate asks the manager to stop an idle group actor (sent by the group to its parent).
type passivate struct {
	group string
	pid   *actor.PID
}

// release tells a group actor to go (sent by the manager, which passivates it or lets it
// go to another broker): it answers its waiters, has its offsets actor flush and stops
// itself (group.go, onRelease). The manager learns it from the actor's Terminated.
type release struct{}

// halt tells a group actor that the broker stops and leaves it where it stands (sent by
// the manager on Halt to each group that has had members): it answers its waiters
// NOT_COORDINATOR and cancels its timers, as a release does, but neither flushes nor
// stops; from then on it answers every request NOT_COORDINATOR (afterStop).
type halt struct{}

// listEntry asks a live group for its ListGroups row. Reply: *listedGroup.
type listEntry struct {
	group string
	reply actor.Promise
}

// listedGroup is a live group's row, or exists=false for a group that is only a name.
type listedGroup struct {
	ListedGroup
	exists bool
}

// expireNow runs offset expiry in a group now (the manager sends it to groups that exist
// only on disk); the group passivates afterwards if it is idle.
type expireNow struct {
	group string
}

// dropTopics drops deleted topics' committed offsets from one group (sent by the
// manager after a DeleteTopics). woken: the manager started the group for this alone, so
// it passivates again when done. No reply.
type dropTopics struct {
	group  string
	topics []string
	woken  bool
}

func (m *dropTopics) GroupID() string                   { return m.group }
func (m *dropTopics) withReply(p actor.Promise) Request { c := *m; return &c }
func (m *dropTopics) fail(int16)                        {}
func (m *dropTopics) AnswerCrash(*actor.Crashed)        {}

func (m *listEntry) GroupID() string                   { return m.group }
func (m *listEntry) withReply(p actor.Promise) Request { c := *m; c.reply = p; return &c }
func (m *listEntry) fail(code int16)                   { m.reply.Resolve(&listedGroup{}) }
func (m *listEntry) AnswerCrash(*actor.Crashed)        { m.fail(notAvailable) }

func (m *expireNow) GroupID() string                   { return m.group }
func (m *expireNow) withReply(p actor.Promise) Request { c := *m; return &c }
func (m *expireNow) fail(int16)                        {}
func (m *expireNow) AnswerCrash(*actor.Crashed)        {}

// Timer messages. Each carries the guard it was armed with; a firing whose guard no
// longer matches is stale and ignored (a cancelled timer's message may already be queued).

// sessionCheck fires at a member's session deadline.
type sessionCheck struct {
	member string
	seq    uint64
}

// joinDeadline fires when the join phase must complete (rebalance timeout or initial delay).
type joinDeadline struct{ seq uint64 }

// syncDeadline fires when members that have not sent SyncGroup are removed.
type syncDeadline struct {
	seq        uint64
	generation int32
}

// pendingDeadline fires when a KIP-394 pending member that never rejoined expires.
type pendingDeadline struct {
	member string
	seq    uint64
}

// TopicsDeleted is the event the broker wiring sends to the groups manager after a
// DeleteTopics: it drops the topics' committed offsets from every group (offsets.DropTopics
// to each group's offsets actor, groups held only on disk included), as Apache's
// GroupCoordinator.onPartitionsDeleted does. No reply.
type TopicsDeleted struct {
	Topics []string
}

// retentionTick runs offset expiry; it does not count as traffic for passivation.
type retentionTick struct{ actor.Tick }
