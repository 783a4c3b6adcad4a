package txn

import "github.com/twmb/franz-go/pkg/kerr"

// The state machine as plain functions, after Apache's TransactionCoordinator and
// TransactionMetadata (reference: apache-transactions.md §1.2–1.4). Each takes the
// current Meta (nil: the id is unknown) and a request, and returns the code to answer
// and the next Meta to make durable (nil: no transition). Codes are Apache 4.x's
// (PRODUCER_FENCED, TRANSACTION_ABORTABLE): the connection maps them to what the
// request's version knows.

var (
	codeNone         = int16(0)
	codeConcurrent   = kerr.ConcurrentTransactions.Code
	codeFenced       = kerr.ProducerFenced.Code
	codeMapping      = kerr.InvalidProducerIDMapping.Code
	codeState        = kerr.InvalidTxnState.Code
	codeAbortable    = kerr.TransactionAbortable.Code
	codeNotAvailable = kerr.CoordinatorNotAvailable.Code
	codeNotCoord     = kerr.NotCoordinator.Code
)

// initReq is an InitProducerId with a transactional id: PID and Epoch are the
// client's (KIP-360, v3+), noPID / noEpoch when it sent none.
type initReq struct {
	TimeoutMs int32
	PID       int64
	Epoch     int16
}

// initPlan is what an InitProducerId does.
type initPlan struct {
	code    int16
	next    *Meta
	needPID bool // call again with a fresh producer id
	fence   bool // next is the abort of the open transaction: answer CONCURRENT_TRANSACTIONS after it
}

// planInit follows prepareInitProducerIdTransit. newPID is a fresh producer id when
// the previous call said needPID, else noPID.
func planInit(id string, m *Meta, r initReq, newPID int64, now int64) initPlan {
	if m == nil || m.State == Dead {
		if newPID < 0 {
			return initPlan{needPID: true}
		}
		return initPlan{next: &Meta{
			ID: id, ProducerID: newPID, PrevProducerID: noPID, NextProducerID: noPID,
			Epoch: 0, LastEpoch: noEpoch, State: Empty, TimeoutMs: r.TimeoutMs, StartMs: -1, UpdateMs: now, TV: 1,
		}}
	}
	given := r.PID >= 0
	if given && m.ProducerID != r.PID && !(r.PID == m.PrevProducerID && exhausted(r.Epoch)) {
		return initPlan{code: codeFenced}
	}
	switch m.State {
	case PrepareCommit, PrepareAbort, PrepareEpochFence:
		return initPlan{code: codeConcurrent}
	case Ongoing:
		// The zombie fence: the running transaction is aborted at a bumped epoch, and
		// the caller retries (its retry bumps the epoch again).
		return initPlan{next: fenced(m, now), fence: true}
	}
	// Empty, CompleteCommit, CompleteAbort.
	n := m.clone()
	n.State, n.Partitions, n.Groups, n.StartMs, n.UpdateMs, n.TimeoutMs = Empty, nil, nil, -1, now, r.TimeoutMs
	n.NextProducerID = noPID
	if exhausted(m.Epoch) && (!given || r.Epoch == m.Epoch) {
		if newPID < 0 {
			return initPlan{needPID: true}
		}
		n.PrevProducerID, n.ProducerID, n.Epoch = m.ProducerID, newPID, 0
		n.LastEpoch = noEpoch
		if given {
			n.LastEpoch = m.Epoch
		}
		return initPlan{next: n}
	}
	switch {
	case !given:
		n.Epoch, n.LastEpoch = m.Epoch+1, noEpoch
	case r.Epoch == m.Epoch:
		n.Epoch, n.LastEpoch = m.Epoch+1, m.Epoch
	case r.Epoch == m.LastEpoch:
		// A retry of a bump whose answer was lost: the current epoch again.
		n.Epoch, n.LastEpoch = m.Epoch, m.LastEpoch
	default:
		return initPlan{code: codeFenced}
	}
	if n.Epoch < 0 { // exhausted and not the expected epoch: nothing valid to hand out
		return initPlan{code: codeFenced}
	}
	return initPlan{next: n}
}

// fenced is the PrepareAbort that fences the producer of m's running transaction
// (Apache's prepareFenceProducerEpoch, then the abort): the epoch bumped, so the
// markers carry an epoch the stalled producer cannot write at.
func fenced(m *Meta, now int64) *Meta {
	n := m.clone()
	if n.Epoch < 32767 {
		n.Epoch++
	}
	n.State, n.LastEpoch, n.UpdateMs, n.NextProducerID = PrepareAbort, noEpoch, now, noPID
	return n
}

// checkProducer is the check every request naming a running transaction passes first.
func checkProducer(m *Meta, pid int64, epoch int16) int16 {
	switch {
	case m == nil || m.State == Dead || m.ProducerID != pid:
		return codeMapping
	case m.Epoch != epoch:
		return codeFenced
	case m.State == PrepareCommit || m.State == PrepareAbort || m.State == PrepareEpochFence:
		return codeConcurrent
	}
	return codeNone
}

// addReq adds partitions or a group (or both) to a transaction.
type addReq struct {
	PID    int64
	Epoch  int16
	TPs    map[string][]int32
	Group  string // "" : none
	TV2    bool   // an implicit add (Produce v12, TxnOffsetCommit v5)
	MaxTPs int    // partitions a transaction may hold; 0: no bound
}

// codeTooMany is planAdd's code when the transaction would pass MaxTPs.
var codeTooMany = kerr.InvalidTxnState.Code

// planAdd follows handleAddPartitionsToTransaction: Ongoing, durable before the
// answer; nothing to write when everything is in already.
func planAdd(m *Meta, r addReq, now int64) (*Meta, int16) {
	if c := checkProducer(m, r.PID, r.Epoch); c != codeNone {
		return nil, c
	}
	if m.State == Ongoing && m.contains(r.TPs, r.Group) {
		return nil, codeNone
	}
	n := m.clone()
	if m.State != Ongoing {
		n.Partitions, n.Groups, n.StartMs = nil, nil, now
		n.TV = 1
	}
	if r.TV2 {
		n.TV = 2
	}
	n.add(r.TPs)
	if r.Group != "" {
		n.addGroup(r.Group)
	}
	if r.MaxTPs > 0 && n.partitionCount()+len(n.Groups) > r.MaxTPs {
		return nil, codeTooMany
	}
	n.State, n.UpdateMs = Ongoing, now
	return n, codeNone
}

func (m *Meta) contains(tps map[string][]int32, group string) bool {
	for t, ps := range tps {
		for _, p := range ps {
			if !m.has(t, p) {
				return false
			}
		}
	}
	return group == "" || m.hasGroup(group)
}

// verify answers, per partition, whether it is in m's running transaction at pid and
// epoch (KIP-890 part 1): NONE, or TRANSACTION_ABORTABLE (the partition leader maps
// it by Produce version), or the producer's code for all.
func verify(m *Meta, pid int64, epoch int16, tps map[string][]int32) map[string]map[int32]int16 {
	all := checkProducer(m, pid, epoch)
	out := make(map[string]map[int32]int16, len(tps))
	for t, ps := range tps {
		codes := make(map[int32]int16, len(ps))
		for _, p := range ps {
			switch {
			case all != codeNone:
				codes[p] = all
			case m.State == Ongoing && m.has(t, p):
				codes[p] = codeNone
			default:
				codes[p] = codeAbortable
			}
		}
		out[t] = codes
	}
	return out
}

// verifyGroup is verify for a group's offsets (TxnOffsetCommit before v5).
func verifyGroup(m *Meta, pid int64, epoch int16, group string) int16 {
	if c := checkProducer(m, pid, epoch); c != codeNone {
		return c
	}
	if m.State == Ongoing && m.hasGroup(group) {
		return codeNone
	}
	return codeAbortable
}

// endReq is an EndTxn.
type endReq struct {
	PID    int64
	Epoch  int16
	Commit bool
	TV2    bool // EndTxn v5: KIP-890 part 2, the epoch is bumped with every transaction
}

// endPlan is what an EndTxn does.
type endPlan struct {
	code    int16
	next    *Meta // a Prepare*: markers follow once it is durable
	needPID bool  // the TV2 bump overflows: call again with a fresh producer id
	// pid and epoch answer a v5 EndTxn: the producer's next ones.
	pid   int64
	epoch int16
}

// planEnd follows endTransaction, with its TV2 table (§1.3) for v5.
func planEnd(m *Meta, r endReq, newPID int64, now int64) endPlan {
	if m == nil || m.State == Dead {
		return endPlan{code: codeMapping, pid: noPID, epoch: noEpoch}
	}
	cur := endPlan{pid: m.ProducerID, epoch: m.Epoch}
	fail := func(c int16) endPlan { cur.code = c; return cur }
	if !r.TV2 {
		switch {
		case m.ProducerID != r.PID:
			return fail(codeMapping)
		case m.Epoch != r.Epoch:
			return fail(codeFenced)
		}
		switch m.State {
		case Ongoing:
			n := m.clone()
			n.State, n.UpdateMs, n.NextProducerID = prepareOf(r.Commit), now, noPID
			return endPlan{next: n, pid: m.ProducerID, epoch: m.Epoch}
		case CompleteCommit:
			return fail(pick(r.Commit, codeNone, codeState))
		case CompleteAbort:
			return fail(pick(!r.Commit, codeNone, codeState))
		case PrepareCommit, PrepareAbort, PrepareEpochFence:
			return fail(codeConcurrent) // see the TV2 case below
		}
		return fail(codeState)
	}
	current := r.PID == m.ProducerID && r.Epoch == m.Epoch
	retry := (r.PID == m.ProducerID && r.Epoch == m.Epoch-1) ||
		(r.PID != m.ProducerID && r.PID == m.PrevProducerID && m.Epoch == 0 && r.Epoch == m.LastEpoch)
	if !current && !retry {
		if r.PID != m.ProducerID && r.PID != m.PrevProducerID {
			return fail(codeMapping)
		}
		return fail(codeFenced)
	}
	bump := func() endPlan {
		n := m.clone()
		n.State, n.UpdateMs, n.LastEpoch, n.NextProducerID = prepareOf(r.Commit), now, m.Epoch, noPID
		n.Epoch = m.Epoch + 1
		if m.State != Ongoing {
			n.Partitions, n.Groups, n.StartMs = nil, nil, now // an empty abort
		}
		n.TV = 2
		if exhausted(n.Epoch) {
			if newPID < 0 {
				return endPlan{needPID: true}
			}
			n.NextProducerID = newPID
			return endPlan{next: n, pid: newPID, epoch: 0}
		}
		return endPlan{next: n, pid: m.ProducerID, epoch: n.Epoch}
	}
	switch m.State {
	case Ongoing:
		if current {
			return bump()
		}
		return fail(codeFenced)
	case Empty:
		switch {
		case retry:
			return fail(codeFenced)
		case r.Commit:
			return fail(codeState)
		}
		return bump()
	case CompleteAbort, CompleteCommit:
		committed := m.State == CompleteCommit
		switch {
		case retry && r.Commit == committed:
			return fail(codeNone)
		case retry, r.Commit:
			return fail(codeState)
		}
		return bump()
	case PrepareCommit, PrepareAbort, PrepareEpochFence:
		// The markers are being written: Apache's coordinator has the Complete* pending
		// then (prepareComplete as the markers are sent), and answers every EndTxn of a
		// valid epoch CONCURRENT_TRANSACTIONS before it looks at the state. That is
		// what a producer already at the bumped epoch needs when it aborts its next
		// transaction at once (a rebalance): it retries and gets its empty abort once
		// the Complete* is durable, where INVALID_TXN_STATE would fail it.
		return fail(codeConcurrent)
	}
	return fail(codeState)
}

// implicitAdd is r's add and its answer when r is an implicit add (Produce v12's
// VerifyPartitions, TxnOffsetCommit v5's VerifyGroup, with Add).
func implicitAdd(r request) (addReq, func(code int16), bool) {
	switch m := r.(type) {
	case *VerifyPartitions:
		return addReq{PID: m.ProducerID, Epoch: m.ProducerEpoch, TPs: m.Partitions, TV2: true}, func(code int16) {
			m.Reply.Resolve(&PartitionsVerified{Codes: allCodes(m.Partitions, code)})
		}, m.Add
	case *VerifyGroup:
		return addReq{PID: m.ProducerID, Epoch: m.ProducerEpoch, Group: m.Group, TV2: true}, func(code int16) {
			m.Reply.Resolve(&GroupVerified{ErrorCode: code})
		}, m.Add
	}
	return addReq{}, nil, false
}

// nextAdd is r's add and its answer when r adds to the producer's next transaction:
// an implicit add (implicitAdd), or a TV1 producer's explicit AddPartitionsToTxn (not a
// verification) or AddOffsetsToTxn. completeWithNext writes such an add parked during
// the completion with the Complete*.
func nextAdd(r request) (addReq, func(code int16), bool) {
	switch m := r.(type) {
	case *AddPartitions:
		return addReq{PID: m.ProducerID, Epoch: m.ProducerEpoch, TPs: m.Partitions}, func(code int16) {
			m.Reply.Resolve(&PartitionsVerified{Codes: allCodes(m.Partitions, code)})
		}, !m.VerifyOnly
	case *AddOffsets:
		return addReq{PID: m.ProducerID, Epoch: m.ProducerEpoch, Group: m.Group}, func(code int16) {
			m.Reply.Resolve(&GroupVerified{ErrorCode: code})
		}, true
	}
	return implicitAdd(r)
}

// waitsForCompletion says whether r, coming while m's Prepare* completes, is one park
// keeps: an implicit add of the producer's next transaction (TV2: at the bumped epoch, or
// at epoch 0 of the producer id the completion moves to), and any request the plans
// answer CONCURRENT_TRANSACTIONS in Prepare* (an InitProducerId, an explicit add of the
// next transaction at the same epoch (TV1), an EndTxn of a valid epoch: its retry, or the
// producer already at the bumped epoch ending its next transaction).
func waitsForCompletion(id string, m *Meta, r request, now int64) bool {
	switch q := r.(type) {
	case *VerifyPartitions, *VerifyGroup:
		add, _, ok := implicitAdd(r)
		return ok && (add.PID == m.ProducerID && add.Epoch == m.Epoch || m.NextProducerID >= 0 && add.PID == m.NextProducerID && add.Epoch == 0)
	case *AddPartitions:
		return !q.VerifyOnly && checkProducer(m, q.ProducerID, q.ProducerEpoch) == codeConcurrent
	case *AddOffsets:
		return checkProducer(m, q.ProducerID, q.ProducerEpoch) == codeConcurrent
	case *InitProducerID:
		p := planInit(id, m, initReq{TimeoutMs: q.TimeoutMs, PID: q.ProducerID, Epoch: q.ProducerEpoch}, noPID, now)
		return p.code == codeConcurrent && !p.fence
	case *EndTxn:
		p := planEnd(m, endReq{PID: q.ProducerID, Epoch: q.ProducerEpoch, Commit: q.Commit, TV2: q.TV2}, noPID, now)
		return p.code == codeConcurrent
	}
	return false
}

func prepareOf(commit bool) State {
	if commit {
		return PrepareCommit
	}
	return PrepareAbort
}

func pick(cond bool, yes, no int16) int16 {
	if cond {
		return yes
	}
	return no
}

// completed is the Complete* that follows m's Prepare* once every marker is written
// (Apache's prepareComplete): the partitions dropped, a TV2 overflow's new producer id
// taken.
func completed(m *Meta, now int64) *Meta {
	n := m.clone()
	n.State = CompleteAbort
	if m.State == PrepareCommit {
		n.State = CompleteCommit
	}
	n.Partitions, n.Groups, n.UpdateMs = nil, nil, now
	if m.NextProducerID >= 0 {
		n.PrevProducerID, n.ProducerID, n.Epoch, n.NextProducerID = m.ProducerID, m.NextProducerID, 0, noPID
	}
	return n
}

// expired says whether an idle id is past transactional.id.expiration.ms.
func expired(m *Meta, expiration int64, now int64) bool {
	return m.State.quiet() && now-m.UpdateMs >= expiration
}
