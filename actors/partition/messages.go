package partition

import (
	"time"

	"kaas/actors/actor"
)

// This file is the topics manager's contract with the connection handlers and the groups
// side, and the shapes of a Fetch a connection serves (fetcher.go). Every request carries
// a Promise the manager (or, for a Fetch, its FetchRun) resolves exactly once with the
// type named in the request's doc line. Results follow the request's order, topic by
// topic and partition by partition. Produce, ListOffsets and OffsetForLeaderEpoch go to
// the partition actors themselves (AppendMessage, ListOffsetMessage, EpochEndMessage in
// snapshot.go, their answers in partition_messages.go).
//
// The topics manager's messages inside the package, sender → receiver:
//
//	resolveUnknown    a connection → the manager (ResolveMessage; resolve.go)
//	catalogWritten    a catalogue write job (actor.Background; catalogqueue.go) → the manager
//	filesRemoved      a deleted topic's file removal (actor.Background; admin.go) → the manager
//	describeAgain     the manager's timer (actor.After; admin.go) → the manager: held
//	                  Describes looked at again
//	catalogTick       the manager's timer (actor.Every; manager.go) → the manager, in a
//	                  cluster: the catalogue re-read
//	epochsRead        the manager's read of other partitions' leader-epoch files
//	                  (actor.Background; leaderepochs.go) → the manager
//	epochOpened       a partition (partition_messages.go) → the manager, its parent
//	*actor.Terminated  a partition actor stopping → the manager, its parent

// TopicID is a topic's UUID (KIP-516).
type TopicID = [16]byte

// PartitionInfo is one partition as Metadata shows it.
type PartitionInfo struct {
	Partition int32
	Leader    int32 // -1: no broker serves it right now
	// Replica holds the partition in the applied view, serving it or about to (-1: none).
	Replica     int32
	LeaderEpoch int32
}

// TopicInfo is one topic of the catalogue.
type TopicInfo struct {
	ErrorCode         int16 // UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INVALID_TOPIC_EXCEPTION
	ErrorMessage      string
	Name              string
	ID                TopicID
	ReplicationFactor int16
	Partitions        []PartitionInfo
	Configs           map[string]string // overrides only; TopicConfigs adds the defaults
}

// Describe looks topics up (Metadata, DescribeConfigs). All lists every topic, sorted by
// name; otherwise Names then IDs, in order. With AutoCreate (Metadata's
// allow_auto_topic_creation and auto.create.topics.enable both true) a missing topic with a
// valid name is created with num.partitions and default.replication.factor.
// Reply: *Described.
type Describe struct {
	All        bool
	Names      []string
	IDs        []TopicID
	AutoCreate bool
	// WaitLeader, in a cluster, holds the answer while a partition of a topic it names
	// has no leader (it is moving, or was just created), for at most this long: the
	// answer then names the broker that took it over, instead of LEADER_NOT_AVAILABLE
	// after which clients wait out their metadata age (franz-go: 5 s) before asking
	// again. 0 answers at once.
	WaitLeader time.Duration
	// Fresh, in a cluster, reads the catalogue entries of the known topics named again
	// first (DescribeConfigs): a config changed through the broker that writes the
	// catalogue shows at once.
	Fresh bool
	// Groups are groups whose configs (GROUP config resources) are asked too, read
	// again first in a cluster as Fresh does: Described.Groups.
	Groups []string
	Reply  actor.Promise
}

// Described answers Describe.
type Described struct {
	Topics []TopicInfo
	// Groups are the overrides of each of Describe.Groups, in order (nil: none).
	Groups []map[string]string
}

// NewTopic is one topic of a CreateTopics.
type NewTopic struct {
	Name              string
	Partitions        int32 // -1: num.partitions
	ReplicationFactor int16 // -1: default.replication.factor
	// Assignment, when set, gives the replicas of each partition (its length is the
	// partition count); only broker ids that exist are accepted.
	Assignment [][]int32
	Configs    map[string]string
}

// CreateTopics creates topics. Reply: *Created.
type CreateTopics struct {
	Topics       []NewTopic
	ValidateOnly bool
	Reply        actor.Promise
}

// Created has one TopicInfo per requested topic (ErrorCode set on failure).
type Created struct {
	Topics []TopicInfo
	// Groups answers AlterTopicConfigs.Groups, one result per change.
	Groups []GroupConfigResult
}

// DeleteTopics deletes topics by name or by id (v6); a topic named both ways or twice is
// INVALID_REQUEST. Each deleted topic's committed offsets are dropped from every group
// through Config.TopicsDeleted. Reply: *Deleted (one TopicInfo per entry, Name and ID filled
// where known).
type DeleteTopics struct {
	Names []string
	IDs   []TopicID
	Reply actor.Promise
}

// Deleted answers DeleteTopics: Names' results first, then IDs'.
type Deleted struct {
	Topics []TopicInfo
}

// PartitionsIncrease is one topic of a CreatePartitions.
type PartitionsIncrease struct {
	Name       string
	Count      int32
	Assignment [][]int32
}

// CreatePartitions raises partition counts. Reply: *Created.
type CreatePartitions struct {
	Topics       []PartitionsIncrease
	ValidateOnly bool
	Reply        actor.Promise
}

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// PartitionRef names one partition of a data request: by topic name, or by topic id
// when the name is empty (Produce and Fetch v13+).
type PartitionRef struct {
	Topic     string
	ID        TopicID
	Partition int32
}

// ResolveMessage asks the topics manager about partitions the published catalogue did
// not name (a connection sends it): in a cluster a topic created through another broker
// exists before this broker's next catalogue read, so the manager reads the catalogue
// first (readOnMiss). reply gets answer(codes), one per partition:
// UNKNOWN_TOPIC_OR_PARTITION or UNKNOWN_TOPIC_ID for what truly does not exist, and
// NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh, for what does
// (led here from now on, or by another broker).
func ResolveMessage(parts []PartitionRef, answer func(codes []int16) any, reply actor.Promise) any {
	return &resolveUnknown{parts: parts, answer: answer, reply: reply}
}

type resolveUnknown struct {
	parts  []PartitionRef
	answer func([]int16) any
	reply  actor.Promise
}

// PartitionsExist asks whether partitions exist, for OffsetCommit's
// UNKNOWN_TOPIC_OR_PARTITION (Apache checks the metadata cache). Reply: *Existence.
type PartitionsExist struct {
	Partitions []TopicPartition
	Reply      actor.Promise
}

// Existence has one answer per asked partition, in order.
type Existence struct {
	Exists []bool
}

// Fetch is one Fetch request, served in the actor of a FetchHost (a connection) by
// StartFetch. It waits up to MaxWait for MinBytes (without holding any actor: the
// partitions tell the host when data arrives). MaxBytes bounds the whole response; each
// partition has its own bound. Reply: *FetchResult.
type Fetch struct {
	// ReadCommitted (isolation_level 1, v4+): each partition is read up to its last
	// stable offset, with the aborted transactions of the range.
	ReadCommitted bool
	MaxWait       time.Duration
	MinBytes      int32
	MaxBytes      int32
	Topics        []FetchTopic
	Reply         actor.Promise
}

// FetchTopic is one topic of a Fetch, by name (v4-12) or by id (v13+).
type FetchTopic struct {
	Name       string
	ID         TopicID
	Partitions []FetchPartition
}

// FetchPartition is one partition of a Fetch.
type FetchPartition struct {
	Partition          int32
	Offset             int64
	MaxBytes           int32
	CurrentLeaderEpoch int32
}

// FetchResult mirrors the request: Topics[i] has the topic's name and id filled in.
type FetchResult struct {
	Topics []FetchedTopic
}

// FetchedTopic is one topic of a FetchResult.
type FetchedTopic struct {
	Name       string
	ID         TopicID
	Partitions []*Fetched
}

// OffsetQuery is one partition of a ListOffsets, OffsetForLeaderEpoch or DeleteRecords
// (ListOffsetMessage, EpochEndMessage, DeleteRecordsMessage).
type OffsetQuery struct {
	Partition          int32
	CurrentLeaderEpoch int32
	Timestamp          int64 // ListOffsets
	ReadCommitted      bool  // ListOffsets v2+ isolation_level 1: latest is the LSO
	LeaderEpoch        int32 // OffsetForLeaderEpoch
	Offset             int64 // DeleteRecords: the new log start offset (-1: the high watermark)
}

// OffsetTopic is one topic of a ListOffsets or OffsetForLeaderEpoch.
type OffsetTopic struct {
	Name       string
	Partitions []OffsetQuery
}

// InitProducerID hands out a fresh producer id (non-transactional producers).
// Reply: *ProducerID.
type InitProducerID struct {
	Reply actor.Promise
}

// ProducerID is a new idempotent producer's identity.
type ProducerID struct {
	ErrorCode int16
	ID        int64
	Epoch     int16
}

// ConfigOp is one change of an IncrementalAlterConfigs: Op is kmsg's
// IncrementalAlterConfigOp (SET, DELETE, APPEND, SUBTRACT).
type ConfigOp struct {
	Name  string
	Op    int8
	Value string
}

// TopicConfigChange is the change of one topic's configs: Ops applied in order to its
// overrides (IncrementalAlterConfigs), or, when Replace is set, the whole set of
// overrides replaced by Configs (the legacy AlterConfigs: a config not named goes back to
// its default).
type TopicConfigChange struct {
	// Broker: a BROKER resource's dynamic configs (Name "" the cluster-wide defaults,
	// else a broker id), not a topic's (brokerconfigs.go).
	Broker  bool
	Name    string
	Ops     []ConfigOp
	Replace bool
	Configs map[string]string
}

// AlterTopicConfigs changes topics' configs (and BROKER resources' dynamic configs,
// TopicConfigChange.Broker, brokerconfigs.go): each is checked on its own, written to
// the catalogue (unless ValidateOnly) and then given to the running partitions.
// Groups change groups' configs (GROUP config resources, Name the group id) the same
// way (groupconfigs.go). Reply: *Created, one TopicInfo per topic or broker change
// (ErrorCode and ErrorMessage) and one GroupConfigResult per group change.
type AlterTopicConfigs struct {
	Topics       []TopicConfigChange
	Groups       []TopicConfigChange
	ValidateOnly bool
	Reply        actor.Promise
}

// WriteTxnMarker asks a partition's leader to end a producer's transaction on it:
// sent to the topics manager (Env.Topics), which routes it to the partition actor.
// The control batch is appended and fsynced before Reply gets 0. Idempotent: a producer
// with no open transaction on the partition (a retry after a restart) is answered 0
// without a write. Codes: NOT_LEADER_OR_FOLLOWER (not led here, fenced),
// UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (an epoch below the producer's),
// TRANSACTION_COORDINATOR_FENCED (a coordinator epoch below the last one seen for the
// producer on the partition), KAFKA_STORAGE_ERROR (the write or fsync failed; retry).
// Reply: *TxnMarkerWritten.
type WriteTxnMarker struct {
	Topic            string
	Partition        int32
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
	Reply            actor.Promise // *TxnMarkerWritten
}

// TxnMarkerWritten answers WriteTxnMarker.
type TxnMarkerWritten struct{ ErrorCode int16 }

// ProducerStates answers DescribeProducers for one partition (ProducersMessage).
type ProducerStates struct {
	ErrorCode int16
	Producers []ProducerState
}

// ProducerState is one producer of a partition's producer state (KIP-664).
type ProducerState struct {
	ProducerID       int64
	ProducerEpoch    int16
	LastSequence     int32 // -1: none
	LastTimestamp    int64 // -1: none
	CoordinatorEpoch int32 // -1: no marker seen
	TxnStartOffset   int64 // -1: no open transaction
}
