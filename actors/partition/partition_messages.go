package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Messages of the partition actor. Its requests come from the connection actors, on the
// data route (actors/conn/route.go): appendBatch (AppendMessage), listOffset
// (ListOffsetMessage), epochEndOf (EpochEndMessage), logSize (LogSizeMessage) and
// deleteRecords (DeleteRecordsMessage; deleterecords.go) from a connection's gather, and
// readLog, watch and unwatch from a Fetch the connection serves (FetchRun, fetcher.go).
// Every request carries a Promise that the partition resolves exactly once, on every
// path, stop and restart included. A request the actor panics on is answered
// NOT_LEADER_OR_FOLLOWER (AnswerCrash): the client refreshes its metadata and retries,
// and a read left unanswered would hold its Fetch until the FetchRun abandons it (max
// wait + 10 s), past the client's timeout.
//
// Messages inside the package, sender → receiver:
//
//	syncDone       the partition's background fsync (actor.Background) → the partition
//	logStartWritten  the partition's background write of its log-start-offset file
//	               (actor.Background; deleterecords.go) → the partition
//	retentionTick  the partition's timer (actor.Every) → the partition
//	lockRetryTick  the partition's timer (actor.After; partition.go) → the partition
//	*actor.ReceiveTimeout  the actor layer → the partition: idle, it closes its files
//	dataReady      a partition → the connection whose FetchRun left the watch
//	fetchExpired, fetchAbandoned  a FetchRun's timers (fetcher.go) → the connection
//	               serving it, which hands them back to the run (FetchRun.Offer)
//	epochOpened    a partition → the topics manager, its parent
//
// The topics manager's are listed in messages.go.

// appendBatch appends one producer batch, validated by its sender (Route.ValidateBatch).
// Reply: *Produced, once the batch is durable (log.flush.interval.messages=1) or at once.
// A transactional batch carries verified and token once its sender verified the
// partition with the transaction coordinator (txn.go), and epochBumps when its
// producer's transactions each have an epoch of their own (KIP-890 part 2, Produce
// v12+): the epoch then fences what the token would; a marker (WriteTxnMarker, routed
// by the topics manager) carries its control batch as batch and is answered with
// *TxnMarkerWritten instead.
type appendBatch struct {
	batch      *Batch
	verified   bool
	token      uint32
	epochBumps bool
	marker     *WriteTxnMarker
	reply      actor.Promise
}

// Produced is the outcome of one partition of a Produce.
type Produced struct {
	ErrorCode      int16
	ErrorMessage   string
	BaseOffset     int64
	LogStartOffset int64
	// NeedsVerify (with INVALID_TXN_STATE): a transactional batch of a producer with no
	// open transaction here; its sender may verify the partition with the coordinator
	// and send it again with VerifiedAppendMessage and VerifyToken.
	NeedsVerify bool
	VerifyToken uint32
	// LogAppendTime is the time a LogAppendTime topic stamped the batch with; 0 or -1:
	// none (CreateTime).
	LogAppendTime int64
}

// readLog reads from offset. Reply: *Fetched when the answer is known at once (an
// error, nothing to read), else a *readPlan for the fetch to read (readplan.go), whose
// file it holds until run.
type readLog struct {
	committed    bool // read_committed: up to the LSO, with the aborted transactions
	offset       int64
	maxBytes     int32
	minOne       bool
	currentEpoch int32
	reply        actor.Promise
}

// Fetched is one partition of a Fetch.
type Fetched struct {
	ErrorCode        int16
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	Records          []byte
	// Aborted are the aborted transactions of the range read (read_committed), sorted
	// by first offset.
	Aborted []AbortedTxn
	// Buffer is the pooled buffer Records lie in, nil when they are not pooled: whoever
	// ends up with the records releases it once nothing reads them any more (a
	// connection, once they are copied into the response's frame), or leaves it to
	// the collector.
	Buffer *ReadBuffer
}

// watch asks to be told with *dataReady{id} once the high watermark passes offset (a
// parked long-poll fetch). A watch fires once; unwatch drops it unfired.
type watch struct {
	committed bool // fires when the LSO passes offset
	id        uint64
	offset    int64
	to        *actor.PID
}

type unwatch struct{ id uint64 }

// dataReady tells a FetchRun, through the connection hosting it, that a partition it
// watches has new data, or, with gone, that the partition is stopping (its topic was
// deleted) and will answer no more reads.
type dataReady struct {
	id   uint64
	gone bool
}

// listOffset answers ListOffsets for one partition. Reply: *Listed.
type listOffset struct {
	committed    bool // read_committed: latest is the LSO
	timestamp    int64
	currentEpoch int32
	reply        actor.Promise
}

// Listed is one partition of a ListOffsets.
type Listed struct {
	ErrorCode   int16
	Timestamp   int64
	Offset      int64
	LeaderEpoch int32
}

// epochEndOf answers OffsetForLeaderEpoch for one partition. Reply: *EpochEnd.
type epochEndOf struct {
	epoch        int32
	currentEpoch int32
	reply        actor.Promise
}

// EpochEnd is one partition of an OffsetForLeaderEpoch.
type EpochEnd struct {
	ErrorCode   int16
	LeaderEpoch int32
	EndOffset   int64
}

// logSize answers DescribeLogDirs for one partition (logdirs.go). Reply: *LogSize.
type logSize struct{ reply actor.Promise }

// syncNow starts the fsync a write waits for, after the writes queued before it
// (requestSync). It does not count as traffic.
type syncNow struct{ actor.Tick }

// syncDone reports a background fsync that made every offset below end durable.
type syncDone struct {
	log  *segmentLog // the log it synced (one closed since is not this actor's any more)
	seg  *segment    // the segment it synced, up to size bytes
	size int64
	end  int64
	err  error
	// idxErr is a failed fsync of an aborted-transaction index (txnindex.go): logged,
	// the log holds its markers.
	idxErr error
}

// retentionTick runs retention (every log.retention.check.interval.ms). It does not count
// as traffic: an idle partition still closes its files.
type retentionTick struct{ actor.Tick }

// epochOpened tells the topics manager the leader epoch a partition actor opened its log
// at (Metadata's leader_epoch for a partition led here).
type epochOpened struct {
	topic     string
	partition int32
	epoch     int32
}

// crashCode answers the requests of a partition actor that panicked.
var crashCode = kerr.NotLeaderForPartition.Code

func (m *appendBatch) AnswerCrash(*actor.Crashed) { m.fail(crashCode) }

func (m *readLog) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&Fetched{ErrorCode: crashCode, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1})
}

func (m *listOffset) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&Listed{ErrorCode: crashCode, Offset: -1, Timestamp: -1, LeaderEpoch: -1})
}

func (m *epochEndOf) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&EpochEnd{ErrorCode: crashCode, LeaderEpoch: -1, EndOffset: -1})
}

func (m *logSize) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&LogSize{ErrorCode: crashCode, Size: -1})
}

// describeProducers answers DescribeProducers for one partition (ProducersMessage).
// Reply: *ProducerStates.
type describeProducers struct{ reply actor.Promise }

func (m *describeProducers) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&ProducerStates{ErrorCode: crashCode})
}

// reconfigure gives a running partition its topic's changed configs (the topics manager,
// after the catalogue entry is written). Nothing comes back.
type reconfigure struct {
	segmentBytes, retentionMS, retentionBytes, flushMessages int64
	cleaner                                                  *CleanerConfig // nil: delete only
	timing                                                   Timing
}
