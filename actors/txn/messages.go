package txn

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Every message the transactions manager (Env.Txns) receives, sender → receiver; the
// manager routes the per-id ones to the id's actor (spawned on an InitProducerId for an
// id it does not know, and at start for every id replayed).
//
// Requests, from the connections (actors/conn) and the partition and group sides:
//
//	InitProducerID    22, transactional; Reply: *ProducerIDInitialized
//	AddPartitions     24 (v0–v3 add, v4+ batched/VerifyOnly per id); Reply: *PartitionsVerified
//	AddOffsets        25; Reply: *GroupVerified
//	EndTxn            26; Reply: *TxnEnded
//	VerifyPartitions  the Produce handler (contract 2); Reply: *PartitionsVerified
//	VerifyGroup       the TxnOffsetCommit handler (contract 3); Reply: *GroupVerified
//	Describe          65; Reply: *Described
//	List              66; Reply: *Listed
//
// Internal: see txn.go and manager.go.

// request is a per-id request: the manager routes it by TransactionalID.
type request interface {
	actor.Request
	txnID() string
	// fail answers the request with code, without its actor.
	fail(code int16)
}

func crashCode(*actor.Crashed) int16 { return kerr.CoordinatorNotAvailable.Code }

// InitProducerID asks for a transactional id's producer id and epoch (InitProducerId
// with a transactional id). ProducerID/ProducerEpoch are the client's (v3+, KIP-360),
// -1 when it sent none. TimeoutMs was checked against transaction.max.timeout.ms by the
// connection. Reply: *ProducerIDInitialized.
type InitProducerID struct {
	TransactionalID string
	TimeoutMs       int32
	ProducerID      int64
	ProducerEpoch   int16
	Reply           actor.Promise
}

// ProducerIDInitialized answers InitProducerID.
type ProducerIDInitialized struct {
	ErrorCode     int16
	ProducerID    int64
	ProducerEpoch int16
}

func (m *InitProducerID) txnID() string { return m.TransactionalID }
func (m *InitProducerID) fail(code int16) {
	m.Reply.Resolve(&ProducerIDInitialized{ErrorCode: code, ProducerID: -1, ProducerEpoch: -1})
}
func (m *InitProducerID) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

// AddPartitions adds partitions to a producer's transaction (AddPartitionsToTxn), or
// with VerifyOnly only says whether they are in it (v4+ broker verification). Reply:
// *PartitionsVerified.
type AddPartitions struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partitions      map[string][]int32
	VerifyOnly      bool
	Reply           actor.Promise
}

func (m *AddPartitions) txnID() string { return m.TransactionalID }
func (m *AddPartitions) fail(code int16) {
	m.Reply.Resolve(&PartitionsVerified{Codes: allCodes(m.Partitions, code)})
}
func (m *AddPartitions) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

// VerifyPartitions asks, before a transactional batch is appended, whether the
// partitions are in the producer's ongoing transaction at that epoch (KIP-890 part 1),
// or, with Add (Produce v12, KIP-890 part 2), adds them. Sent to Env.Txns.
type VerifyPartitions struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partitions      map[string][]int32 // topic → partitions
	Add             bool               // Produce v12+: add them (TV2); else verify only
	Reply           actor.Promise      // *PartitionsVerified
}

// PartitionsVerified answers VerifyPartitions and AddPartitions: a code per partition,
// 0 = in the transaction (may append). Not in it: TRANSACTION_ABORTABLE; the producer's
// id or epoch wrong: INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED; a transition under
// way: CONCURRENT_TRANSACTIONS; no coordinator: NOT_COORDINATOR /
// COORDINATOR_NOT_AVAILABLE. The caller maps them to what its version knows.
type PartitionsVerified struct{ Codes map[string]map[int32]int16 }

func (m *VerifyPartitions) txnID() string { return m.TransactionalID }
func (m *VerifyPartitions) fail(code int16) {
	m.Reply.Resolve(&PartitionsVerified{Codes: allCodes(m.Partitions, code)})
}
func (m *VerifyPartitions) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

func allCodes(tps map[string][]int32, code int16) map[string]map[int32]int16 {
	out := make(map[string]map[int32]int16, len(tps))
	for t, ps := range tps {
		codes := make(map[int32]int16, len(ps))
		for _, p := range ps {
			codes[p] = code
		}
		out[t] = codes
	}
	return out
}

// AddOffsets adds a group's offsets to a producer's transaction (AddOffsetsToTxn).
// Reply: *GroupVerified.
type AddOffsets struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Group           string
	Reply           actor.Promise
}

func (m *AddOffsets) txnID() string                { return m.TransactionalID }
func (m *AddOffsets) fail(code int16)              { m.Reply.Resolve(&GroupVerified{ErrorCode: code}) }
func (m *AddOffsets) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

// VerifyGroup asks, before a TxnOffsetCommit is kept pending, whether the group is in
// the producer's ongoing transaction (AddOffsetsToTxn added it), or with Add
// (TxnOffsetCommit v5, KIP-890 part 2) adds it. Codes as VerifyPartitions'.
type VerifyGroup struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Group           string
	Add             bool          // TxnOffsetCommit v5: implicit add
	Reply           actor.Promise // *GroupVerified
}

// GroupVerified answers VerifyGroup and AddOffsets.
type GroupVerified struct{ ErrorCode int16 }

func (m *VerifyGroup) txnID() string                { return m.TransactionalID }
func (m *VerifyGroup) fail(code int16)              { m.Reply.Resolve(&GroupVerified{ErrorCode: code}) }
func (m *VerifyGroup) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

// EndTxn commits or aborts a producer's transaction (EndTxn). TV2 is a v5 request
// (KIP-890 part 2: the epoch is bumped, the answer names the producer's next id and
// epoch). Reply: *TxnEnded, once the Prepare* is durable (the markers follow).
type EndTxn struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
	TV2             bool
	Reply           actor.Promise
}

// TxnEnded answers EndTxn.
type TxnEnded struct {
	ErrorCode     int16
	ProducerID    int64
	ProducerEpoch int16
}

func (m *EndTxn) txnID() string { return m.TransactionalID }
func (m *EndTxn) fail(code int16) {
	m.Reply.Resolve(&TxnEnded{ErrorCode: code, ProducerID: -1, ProducerEpoch: -1})
}
func (m *EndTxn) AnswerCrash(c *actor.Crashed) { m.fail(crashCode(c)) }

// Describe asks for transactional ids' states (DescribeTransactions). Reply:
// *Described, one entry per id in order.
type Describe struct {
	IDs   []string
	Reply actor.Promise
}

// Described answers Describe.
type Described struct{ Txns []Description }

// Description is one id's state; ErrorCode TRANSACTIONAL_ID_NOT_FOUND for an unknown id.
type Description struct {
	ID         string
	ErrorCode  int16
	State      State
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	StartMs    int64
	Partitions map[string][]int32
}

func (m *Describe) AnswerCrash(*actor.Crashed) { m.Reply.Resolve(&Described{}) }

// List asks for the transactions matching every filter given (ListTransactions):
// States by name (none: all), ProducerIDs (none: all), MinDurationMs (v1: running
// longer than that; -1: any). Reply: *Listed.
type List struct {
	States        []string
	ProducerIDs   []int64
	MinDurationMs int64
	Reply         actor.Promise
}

// Listed answers List; UnknownStates are filter names that are no state.
type Listed struct {
	Txns          []Listing
	UnknownStates []string
}

// Listing is one transaction in a Listed.
type Listing struct {
	ID         string
	ProducerID int64
	State      State
}

func (m *List) AnswerCrash(*actor.Crashed) { m.Reply.Resolve(&Listed{}) }

// AddPartitionsBatch is AddPartitionsToTxn v4+: several ids' AddPartitions at once
// (their Reply unused). Reply: []any, a *PartitionsVerified per request in order.
type AddPartitionsBatch struct {
	Requests []*AddPartitions
	Reply    actor.Promise
}

func (m *AddPartitionsBatch) AnswerCrash(*actor.Crashed) { m.Reply.Resolve([]any(nil)) }

// AdminAbort is an operator's abort of a producer's transaction on some partitions: an
// abort WriteTxnMarkers (kafka-transactions.sh abort, kadm.WriteTxnMarkers, `kaas
// transactions abort`), which Apache writes on the partitions without its coordinator
// knowing. When an id of this coordinator holds the producer's transaction Ongoing at
// that epoch with any of the partitions, the transaction is aborted through it, as a
// timeout aborts it (the epoch bumped, the producer fenced, a marker on every partition
// of the transaction), so the coordinator and the partitions agree; the partitions it
// does not hold get the operator's marker as Apache writes it. A transaction being
// committed (PrepareCommit) is not aborted: CONCURRENT_TRANSACTIONS for its partitions;
// one being aborted (PrepareAbort) gets the operator's markers as they are.
// Sent by the WriteTxnMarkers handler. Reply: *AdminAborted, once every marker is
// written (the coordinator's Complete* durable).
type AdminAbort struct {
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Partitions       map[string][]int32
	Reply            actor.Promise
}

// AdminAborted answers AdminAbort: a code per partition, and the transactional id that
// aborted it ("" when the markers were written without the coordinator).
type AdminAborted struct {
	Codes           map[string]map[int32]int16
	TransactionalID string
}

func (m *AdminAbort) AnswerCrash(c *actor.Crashed) {
	m.Reply.Resolve(&AdminAborted{Codes: allCodes(m.Partitions, crashCode(c))})
}

// CheckTxn asks whether a partition's open transaction has a coordinator that will end
// it: an id of this coordinator holds the producer Ongoing or Prepare* with the
// partition, at the batch's epoch or a newer one. Sent by a partition that recovered a
// transaction still open (the orphan check, issue 27): to the manager on a broker alone,
// to the orphan checker (volume.go) in a cluster. Reply: *TxnChecked, or nil when there
// is no answer yet (ask again).
type CheckTxn struct {
	Topic         string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int16
	Reply         actor.Promise
}

// TxnChecked answers CheckTxn: Held, the coordinator will end the transaction; else it
// is an orphan the partition aborts.
type TxnChecked struct{ Held bool }

func (m *CheckTxn) AnswerCrash(*actor.Crashed) { m.Reply.Resolve(nil) }
