package txn

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
)

// State is a transaction's state, numbered and named as Apache's TransactionState
// (DescribeTransactions and ListTransactions show the names).
//
//	          AddPartitions/AddOffsets            EndTxn commit        markers done
//	Empty ──────────────────────────▶ Ongoing ───────────────▶ PrepareCommit ──────▶ CompleteCommit
//	  ▲  ▲                              │  │    EndTxn abort                          │
//	  │  │  InitProducerId              │  └──────────────────▶ PrepareAbort ──────▶ CompleteAbort
//	  │  └──────────────────────────────┼───────────────────────────▲────────────────────┤
//	  │                                 │ InitProducerId / timeout   │ (epoch bumped)    │
//	  │                                 └──▶ PrepareEpochFence ──────┘                   │
//	  └──────────────────────────────────── InitProducerId, AddPartitions ───────────────┘
//	Empty, Complete* ── transactional.id.expiration.ms idle ──▶ Dead (the id is forgotten)
//
// PrepareCommit and PrepareAbort are the commit point: once durable, the markers follow
// whatever happens, after a restart too. PrepareEpochFence is never written: it is the
// in-memory state while the PrepareAbort of a fence (a new InitProducerId, a timeout)
// is being written.
type State int8

const (
	Empty State = iota
	Ongoing
	PrepareCommit
	PrepareAbort
	CompleteCommit
	CompleteAbort
	Dead
	PrepareEpochFence
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// ParseState is the state named name (Apache's names, as ListTransactions filters).
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// open says whether a transaction is running: its partitions may hold undecided data.
func (s State) open() bool {
	return s == Ongoing || s == PrepareCommit || s == PrepareAbort || s == PrepareEpochFence
}

// quiet says whether the id may expire (Apache: Empty, CompleteCommit, CompleteAbort).
func (s State) quiet() bool { return s == Empty || s == CompleteCommit || s == CompleteAbort }

// noEpoch is RecordBatch.NO_PRODUCER_EPOCH, noPID NO_PRODUCER_ID.
const (
	noEpoch int16 = -1
	noPID   int64 = -1
)

// exhausted is Apache's TransactionMetadata.isEpochExhausted: an epoch that cannot be
// bumped again and still leave room for a fence.
func exhausted(epoch int16) bool { return epoch >= 32767-1 }

// Meta is one transactional id's state (Apache's TransactionMetadata), what the journal
// records at every transition and the id's file holds. Not changed once recorded: a
// transition builds the next Meta from a copy (clone).
type Meta struct {
	ID             string `json:"id"`
	ProducerID     int64  `json:"producer_id"`
	PrevProducerID int64  `json:"prev_producer_id"`
	// NextProducerID is the id a TV2 EndTxn whose epoch bump overflows moves to at
	// Complete* (noPID otherwise).
	NextProducerID int64 `json:"next_producer_id"`
	Epoch          int16 `json:"epoch"`
	LastEpoch      int16 `json:"last_epoch"`
	State          State `json:"state"`
	// Partitions of the transaction, topic → sorted partitions; Groups whose offsets it
	// commits (AddOffsetsToTxn, TxnOffsetCommit v5), sorted.
	Partitions map[string][]int32 `json:"partitions,omitempty"`
	Groups     []string           `json:"groups,omitempty"`
	TimeoutMs  int32              `json:"timeout_ms"`
	// StartMs is when the running transaction began (-1: none); UpdateMs the last
	// transition.
	StartMs  int64 `json:"start_ms"`
	UpdateMs int64 `json:"update_ms"`
	// TV is the client's transaction version (1, or 2 for KIP-890 part 2 clients).
	TV int8 `json:"tv"`
	// CoordinatorEpoch is the epoch the markers of this record's transaction carry:
	// Version, capped at the int32 range (0 in records written before Version was).
	// It only grows, across the brokers an id moves between, so a partition refuses a
	// marker of a coordinator that has been replaced (TRANSACTION_COORDINATOR_FENCED).
	CoordinatorEpoch int32 `json:"coordinator_epoch"`
	// Version counts the id's recorded transitions (stamp): each record one more than
	// the one before it, whichever broker's journal holds it. A record is newer than an
	// id's file when its Version is higher; records from before Version was (0) are
	// ordered by their journal sequence number, as they were then (a broker alone).
	Version uint64 `json:"version,omitempty"`
}

// stamp makes next the record after prev (nil: the id's first): its Version one more,
// its markers' coordinator epoch with it.
func stamp(next, prev *Meta) {
	next.Version = 1
	if prev != nil {
		next.Version = prev.Version + 1
	}
	next.CoordinatorEpoch = int32(min(next.Version, math.MaxInt32))
}

// newer says whether a record (m, at seq of a journal) supersedes what is held (cur,
// at curSeq of the same journal when sameJournal): by Version, or by sequence number
// between records of the same journal written before Version was.
func newer(m *Meta, seq uint64, cur *Meta, curSeq uint64, sameJournal bool) bool {
	if cur == nil {
		return true
	}
	if m.Version != 0 || cur.Version != 0 {
		return m.Version > cur.Version
	}
	return sameJournal && seq > curSeq
}

func (m *Meta) clone() *Meta {
	c := *m
	if m.Partitions != nil {
		c.Partitions = make(map[string][]int32, len(m.Partitions))
		for t, ps := range m.Partitions {
			c.Partitions[t] = slices.Clone(ps)
		}
	}
	c.Groups = slices.Clone(m.Groups)
	return &c
}

// has says whether partition p of topic t is in the transaction.
func (m *Meta) has(t string, p int32) bool {
	_, ok := slices.BinarySearch(m.Partitions[t], p)
	return ok
}

func (m *Meta) hasGroup(g string) bool {
	_, ok := slices.BinarySearch(m.Groups, g)
	return ok
}

// partitionCount is the number of partitions in the transaction.
func (m *Meta) partitionCount() int {
	n := 0
	for _, ps := range m.Partitions {
		n += len(ps)
	}
	return n
}

// add puts partitions into the transaction, kept sorted.
func (m *Meta) add(tps map[string][]int32) {
	if m.Partitions == nil {
		m.Partitions = map[string][]int32{}
	}
	for t, ps := range tps {
		for _, p := range ps {
			cur := m.Partitions[t]
			if i, ok := slices.BinarySearch(cur, p); !ok {
				m.Partitions[t] = slices.Insert(cur, i, p)
			}
		}
	}
}

func (m *Meta) addGroup(g string) {
	if i, ok := slices.BinarySearch(m.Groups, g); !ok {
		m.Groups = slices.Insert(m.Groups, i, g)
	}
}

// topics is the transaction's topics, sorted.
func (m *Meta) topics() []string {
	ts := make([]string, 0, len(m.Partitions))
	for t := range m.Partitions {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// record is what the journal and the id's file hold: the Meta, and whether the id was
// removed (expired: Dead).
func encode(m *Meta) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("encode transaction state: %v", err)) // plain data: cannot fail
	}
	return b
}

func decode(b []byte) (*Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode transaction state: %w", err)
	}
	if m.State < Empty || m.State > PrepareEpochFence {
		return nil, fmt.Errorf("decode transaction state: bad state %d", m.State)
	}
	return &m, nil
}
