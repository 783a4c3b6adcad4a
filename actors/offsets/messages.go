package offsets

import (
	"encoding/json"
	"time"

	"kaas/actors/actor"
)

// This file is the contract between the offsets actor and its parent, the group actor.
// Every request carries a Promise; the offsets actor resolves it exactly once with the
// result type named in the request's doc line (never a false success: a value is resolved
// only after the write that holds it is on disk, or with an error code). A request the
// actor panics on before it queued it is answered with codeCrashed (AnswerCrash).
//
// Its other messages, sender → receiver (defined beside their handlers):
//
//	*actor.Settled   the offsets journal (actors/journal) → the offsets actor: the
//	                 answer to its Claim (load.go) or to an Append (batch.go)
//	claimTimeout     the actor's timer (actor.After; load.go) → itself: the journal has
//	                 not answered its Claim
//	flushNow         the actor → itself (batch.go): write what has queued, once the
//	                 requests already in the mailbox have joined the batch
//	checkpointTick   the actor's timer (actor.After; checkpoint.go) → itself: rewrite
//	                 the group file behind the journal
//	ckptJob          the checkpoint write (actor.Background; checkpoint.go) → the actor:
//	                 its outcome

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Committed is one stored offset.
type Committed struct {
	Offset      int64
	LeaderEpoch int32  // -1 when the client sent none
	Metadata    string // "" when the client sent null
	CommitTime  int64  // unix ms
	ExpireTime  int64  // unix ms; 0 unless a v2-4 commit set retention_time_ms
}

// GroupMeta is what the group file keeps about the group itself, so that ListGroups,
// DescribeGroups and offset expiry are right for a group that exists only on disk
// (after a restart or a coordinator move), and so that a group with members comes back
// Stable with them. It is Apache's GroupMetadataValue (§5.1 of the reference): the group
// actor saves it when the leader's SyncGroup completes a generation, when the group goes
// Empty, and when a static member is replaced in Stable. A rebalance in flight is never
// saved. Treat a GroupMeta as immutable once sent: its slices are shared.
type GroupMeta struct {
	ProtocolType string // "consumer", "" for a simple (commit-only) group
	Generation   int32
	EmptySince   int64  // unix ms the group last became Empty; 0 when it is not Empty
	Protocol     string // the generation's selected protocol; "" when Empty
	Leader       string // the generation's leader; "" when Empty
	// Members of the saved generation, in joining order; none when Empty.
	Members []MemberMeta
	// Consumer is the state of a consumer-protocol group (KIP-848: group epoch, target
	// assignment, members with their epochs), opaque here: actors/group encodes it.
	// nil for a classic group.
	Consumer json.RawMessage
	// parts: Consumer split by member, kept here once a delta was applied (consumer.go).
	parts *consumerParts
}

// MemberMeta is one member of a saved generation (Apache MemberMetadata as
// GroupMetadataValue keeps it).
type MemberMeta struct {
	MemberID         string
	InstanceID       string // group.instance.id; "" for a dynamic member
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// Subscription is the member's metadata for the selected protocol only.
	Subscription []byte
	Assignment   []byte
}

// Entry is one partition of a Commit.
type Entry struct {
	TopicPartition
	Committed
}

// Commit stores entries. Entries whose metadata is longer than offset.metadata.max.bytes
// get OFFSET_METADATA_TOO_LARGE and are not stored; the others are merged into the group's
// map and made durable by one file rewrite (commits queued meanwhile share the next one).
// Reply: *CommitResult.
type Commit struct {
	Entries []Entry
	Reply   actor.Promise
}

// CommitResult has one error code per entry of the Commit, in order.
type CommitResult struct {
	Codes []int16
}

// Fetch reads committed offsets. Partitions nil means every committed partition.
// RequireStable (OffsetFetch v7+) also reports which of those partitions have a pending
// transactional offset (KIP-447). Reply: *FetchResult.
type Fetch struct {
	Partitions    []TopicPartition
	RequireStable bool
	Reply         actor.Promise
}

// FetchResult holds what was asked for that exists; absent partitions are -1 to the
// caller. ErrorCode is non-zero for the whole group (COORDINATOR_NOT_AVAILABLE when the
// file is corrupt or unreadable). Unstable, for a Fetch with RequireStable, names the
// partitions (among those asked, or among the committed ones when all were asked) that
// some producer's open transaction has a pending offset for: the caller answers them
// UNSTABLE_OFFSET_COMMIT (Apache OffsetMetadataManager.fetchOffsets).
type FetchResult struct {
	ErrorCode int16
	Offsets   map[TopicPartition]Committed
	Unstable  map[TopicPartition]bool
}

// TxnCommit stores entries in the producer's pending layer (TxnOffsetCommit, KIP-447):
// journaled like a Commit, invisible to Fetch until a TxnEnd with Commit applies them.
// Entries with oversized metadata get OFFSET_METADATA_TOO_LARGE; a commit that would take
// the group past Config.MaxPendingOffsets pending offsets gets CodePendingLimit for
// every entry and stores nothing. Reply: *CommitResult.
type TxnCommit struct {
	ProducerID    int64
	ProducerEpoch int16
	Entries       []Entry
	Reply         actor.Promise
}

// TxnEnd ends the producer's pending offsets: Commit makes them committed offsets (one
// journaled batch: set, then the layer dropped), else they are dropped. Nothing pending
// for the producer (a marker retried after a restart) answers 0 without a write.
// Reply: *Result.
type TxnEnd struct {
	ProducerID    int64
	ProducerEpoch int16
	Commit        bool
	Reply         actor.Promise
}

// Delete removes the listed partitions' offsets (OffsetDelete). Reply: *Result.
type Delete struct {
	Partitions []TopicPartition
	Reply      actor.Promise
}

// DeleteAll removes the group's file (DeleteGroups). Reply: *Result.
type DeleteAll struct {
	Reply actor.Promise
}

// DropTopics removes every offset of the named topics (DeleteTopics). Reply: *Result.
type DropTopics struct {
	Topics []string
	Reply  actor.Promise
}

// SaveMeta records the group's own state in its file (written with the next rewrite, or
// at once when Reply is set: the reply comes after the write, and a failed write answers
// NOT_COORDINATOR and keeps the meta on disk as it was). Reply: *Result.
//
// Consumer, when set, is a delta of the consumer-protocol state (consumer.go): Meta's
// scalar fields (ProtocolType, Generation, EmptySince) replace the previous ones and the
// previous consumer state, with the delta applied, is kept; Meta's other fields are not
// read. The journal then records only the delta.
type SaveMeta struct {
	Meta     GroupMeta
	Consumer *ConsumerDelta
	Reply    actor.Promise
}

// Flush makes every change accepted so far durable and the file hold it, and answers
// after that (whatever the file write's outcome: the journal holds every change). The
// actor does not wait for it in its turn. The group actor sends it as it is released,
// and stops once it is answered: protoactor stops a child with a system message that
// drops its mailbox, so without it a change accepted just before would be lost.
// Reply: *Result.
type Flush struct {
	Reply actor.Promise
}

// Stat reports what is on disk. Reply: *Status.
type Stat struct {
	Reply actor.Promise
}

// Status says whether the group has a file, its meta and how many offsets it holds.
// ErrorCode is COORDINATOR_NOT_AVAILABLE for a corrupt or unreadable file.
type Status struct {
	ErrorCode int16
	Exists    bool
	Meta      GroupMeta
	Count     int
	// Pending is how many transactional offsets wait for their transaction's end; a
	// group with any is not removed by expiry (Apache: not while transactions are open).
	Pending int
}

// Expire removes offsets whose retention has passed, by Apache's rules (§5.3 of the
// reference): the group actor says what state the group is in. Reply: *Status (after).
type Expire struct {
	Now   time.Time
	Rule  ExpiryRule
	Reply actor.Promise
}

// ExpiryRule is the group's state as expiry needs it.
type ExpiryRule struct {
	// Empty: the group has no members (or exists only on disk).
	Empty bool
	// Stable consumer group with known subscriptions: offsets of other topics expire.
	StableConsumer bool
	Subscribed     map[string]bool
	Retention      time.Duration
}

// Result is a plain outcome: 0 or an error code.
type Result struct {
	ErrorCode int16
}

// AnswerCrash answers a request of an offsets actor that panicked holding it
// (actor.Request) with codeCrashed, in its result type.
func (m *Commit) AnswerCrash(*actor.Crashed)     { fail(queued{msg: m}, codeCrashed) }
func (m *Fetch) AnswerCrash(*actor.Crashed)      { fail(queued{msg: m}, codeCrashed) }
func (m *TxnCommit) AnswerCrash(*actor.Crashed)  { fail(queued{msg: m}, codeCrashed) }
func (m *TxnEnd) AnswerCrash(*actor.Crashed)     { fail(queued{msg: m}, codeCrashed) }
func (m *Delete) AnswerCrash(*actor.Crashed)     { fail(queued{msg: m}, codeCrashed) }
func (m *DeleteAll) AnswerCrash(*actor.Crashed)  { fail(queued{msg: m}, codeCrashed) }
func (m *DropTopics) AnswerCrash(*actor.Crashed) { fail(queued{msg: m}, codeCrashed) }
func (m *SaveMeta) AnswerCrash(*actor.Crashed)   { fail(queued{msg: m}, codeCrashed) }
func (m *Flush) AnswerCrash(*actor.Crashed)      { fail(queued{msg: m}, codeCrashed) }
func (m *Stat) AnswerCrash(*actor.Crashed)       { fail(queued{msg: m}, codeCrashed) }
func (m *Expire) AnswerCrash(*actor.Crashed)     { fail(queued{msg: m}, codeCrashed) }
