package txn

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// meta is a transactional id at pid 7, epoch 5 (last epoch 4) in state s, holding
// partition t/0 when s runs a transaction.
func meta(s State) *Meta {
	m := &Meta{ID: "tx", ProducerID: 7, PrevProducerID: noPID, NextProducerID: noPID, Epoch: 5, LastEpoch: 4,
		State: s, TimeoutMs: 60000, StartMs: -1, UpdateMs: 1, TV: 1}
	if s.open() {
		m.Partitions = map[string][]int32{"t": {0}}
		m.StartMs = 1
	}
	return m
}

var allStates = []State{Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort}

// TestEndTxnTable is EndTxn: version × state × (commit, epoch) → code, the TV1 table for
// v0–v4 and the TV2 table of §1.3 for v5 (verbatim from Apache's source).
func TestEndTxnTable(t *testing.T) {
	const (
		none = int16(0)
		pf   = int16(90) // PRODUCER_FENCED
		its  = int16(48) // INVALID_TXN_STATE
		conc = int16(51) // CONCURRENT_TRANSACTIONS
		eb   = int16(-1) // success with an epoch bump (a Prepare* written)
		prep = int16(-2) // success, a Prepare* written at the same epoch (TV1)
	)
	type row struct {
		state          State
		tv2, commit    bool
		epoch          int16
		want           int16
		wantNextEpoch  int16
		wantNextAnswer bool
	}
	rows := []row{
		// TV1.
		{Ongoing, false, true, 5, prep, 5, false},
		{Ongoing, false, false, 5, prep, 5, false},
		{Ongoing, false, true, 4, pf, 0, false},
		{Empty, false, false, 5, its, 0, false},
		{Empty, false, true, 5, its, 0, false},
		{CompleteCommit, false, true, 5, none, 0, false},
		{CompleteCommit, false, false, 5, its, 0, false},
		{CompleteAbort, false, false, 5, none, 0, false},
		{CompleteAbort, false, true, 5, its, 0, false},
		{PrepareCommit, false, true, 5, conc, 0, false},
		{PrepareCommit, false, false, 5, conc, 0, false},
		{PrepareAbort, false, false, 5, conc, 0, false},
		{PrepareAbort, false, true, 5, conc, 0, false},
		{CompleteCommit, false, true, 4, pf, 0, false},
		// TV2: retry = epoch 4 (current − 1), current = 5.
		{Empty, true, false, 4, pf, 0, false},
		{Empty, true, false, 5, eb, 6, true},
		{Empty, true, true, 4, pf, 0, false},
		{Empty, true, true, 5, its, 0, false},
		{CompleteAbort, true, false, 4, none, 0, false},
		{CompleteAbort, true, false, 5, eb, 6, true},
		{CompleteAbort, true, true, 4, its, 0, false},
		{CompleteAbort, true, true, 5, its, 0, false},
		{CompleteCommit, true, false, 4, its, 0, false},
		{CompleteCommit, true, false, 5, eb, 6, true},
		{CompleteCommit, true, true, 4, none, 0, false},
		{CompleteCommit, true, true, 5, its, 0, false},
		{Ongoing, true, true, 5, eb, 6, true},
		{Ongoing, true, false, 5, eb, 6, true},
		{Ongoing, true, true, 4, pf, 0, false},
		{Ongoing, true, true, 3, pf, 0, false},
		{PrepareCommit, true, true, 4, conc, 0, false},
		{PrepareCommit, true, false, 4, conc, 0, false},
		{PrepareCommit, true, false, 5, conc, 0, false},
		{PrepareCommit, true, true, 5, conc, 0, false},
		{PrepareAbort, true, true, 4, conc, 0, false},
		{PrepareAbort, true, false, 5, conc, 0, false},
		{PrepareCommit, true, false, 3, pf, 0, false},
		{PrepareAbort, true, false, 4, conc, 0, false},
		{CompleteAbort, true, false, 2, pf, 0, false},
	}
	for _, r := range rows {
		m := meta(r.state)
		p := planEnd(m, endReq{PID: 7, Epoch: r.epoch, Commit: r.commit, TV2: r.tv2}, noPID, 100)
		got := p.code
		if p.next != nil {
			got = prep
			if p.next.Epoch != m.Epoch {
				got = eb
			}
			if p.next.State != prepareOf(r.commit) {
				t.Errorf("%v tv2=%v commit=%v: next state %v", r.state, r.tv2, r.commit, p.next.State)
			}
		}
		if got != r.want {
			t.Errorf("%v tv2=%v commit=%v epoch=%d: got %d, want %d", r.state, r.tv2, r.commit, r.epoch, got, r.want)
			continue
		}
		if r.wantNextAnswer && (p.pid != 7 || p.epoch != r.wantNextEpoch) {
			t.Errorf("%v tv2: answers %d/%d, want 7/%d", r.state, p.pid, p.epoch, r.wantNextEpoch)
		}
	}
	// Another producer id: INVALID_PRODUCER_ID_MAPPING in every state, both tables.
	for _, s := range allStates {
		for _, tv2 := range []bool{false, true} {
			if p := planEnd(meta(s), endReq{PID: 8, Epoch: 5, TV2: tv2}, noPID, 1); p.code != kerr.InvalidProducerIDMapping.Code {
				t.Errorf("%v tv2=%v other pid: %d", s, tv2, p.code)
			}
		}
	}
	if p := planEnd(nil, endReq{PID: 7, Epoch: 5}, noPID, 1); p.code != kerr.InvalidProducerIDMapping.Code {
		t.Errorf("unknown id: %d", p.code)
	}
}

// TestEndTxnTV2Overflow: the bump that exhausts the epoch takes a new producer id,
// which the v5 answer names and Complete* moves to; the retry with the old pair is known.
func TestEndTxnTV2Overflow(t *testing.T) {
	m := meta(Ongoing)
	m.Epoch = 32765
	p := planEnd(m, endReq{PID: 7, Epoch: 32765, Commit: true, TV2: true}, noPID, 1)
	if !p.needPID {
		t.Fatalf("no new producer id asked: %+v", p)
	}
	p = planEnd(m, endReq{PID: 7, Epoch: 32765, Commit: true, TV2: true}, 99, 1)
	if p.next == nil || p.pid != 99 || p.epoch != 0 || p.next.Epoch != 32766 || p.next.NextProducerID != 99 {
		t.Fatalf("overflow: %+v next %+v", p, p.next)
	}
	c := completed(p.next, 2)
	if c.ProducerID != 99 || c.Epoch != 0 || c.PrevProducerID != 7 || c.State != CompleteCommit {
		t.Fatalf("complete: %+v", c)
	}
	if r := planEnd(c, endReq{PID: 7, Epoch: 32765, Commit: true, TV2: true}, noPID, 3); r.code != 0 || r.pid != 99 {
		t.Fatalf("retry after overflow: %+v", r)
	}
}

// TestInitTable is InitProducerId by state and by the client's KIP-360 pid/epoch.
func TestInitTable(t *testing.T) {
	type row struct {
		state     State
		pid       int64
		epoch     int16
		want      int16 // -1: success
		wantEpoch int16
		fence     bool
	}
	rows := []row{
		{Empty, noPID, noEpoch, -1, 6, false},
		{CompleteCommit, noPID, noEpoch, -1, 6, false},
		{CompleteAbort, 7, 5, -1, 6, false},
		{Empty, 7, 4, -1, 5, false},                       // a retry: lastEpoch → the current one
		{Empty, 7, 3, kerr.ProducerFenced.Code, 0, false}, // stale
		{Empty, 8, 5, kerr.ProducerFenced.Code, 0, false}, // another pid
		{PrepareCommit, noPID, noEpoch, kerr.ConcurrentTransactions.Code, 0, false},
		{PrepareAbort, 7, 5, kerr.ConcurrentTransactions.Code, 0, false},
		{Ongoing, noPID, noEpoch, -1, 6, true}, // the zombie fence
		{Ongoing, 7, 5, -1, 6, true},
	}
	for _, r := range rows {
		p := planInit("tx", meta(r.state), initReq{TimeoutMs: 1000, PID: r.pid, Epoch: r.epoch}, noPID, 100)
		if r.want >= 0 {
			if p.code != r.want || p.next != nil {
				t.Errorf("%v %d/%d: code %d next %v, want %d", r.state, r.pid, r.epoch, p.code, p.next, r.want)
			}
			continue
		}
		if p.code != 0 || p.next == nil || p.next.Epoch != r.wantEpoch || p.fence != r.fence {
			t.Errorf("%v %d/%d: %+v next %+v, want epoch %d fence %v", r.state, r.pid, r.epoch, p, p.next, r.wantEpoch, r.fence)
			continue
		}
		if r.fence && p.next.State != PrepareAbort {
			t.Errorf("fence writes %v", p.next.State)
		}
		if !r.fence && (p.next.State != Empty || p.next.TimeoutMs != 1000) {
			t.Errorf("init writes %+v", p.next)
		}
	}
	// A new id takes a fresh producer id at epoch 0.
	if p := planInit("tx", nil, initReq{TimeoutMs: 1, PID: noPID, Epoch: noEpoch}, noPID, 1); !p.needPID {
		t.Fatal("new id: no producer id asked")
	}
	if p := planInit("tx", nil, initReq{TimeoutMs: 1, PID: noPID, Epoch: noEpoch}, 42, 1); p.next == nil || p.next.ProducerID != 42 || p.next.Epoch != 0 {
		t.Fatalf("new id: %+v", p.next)
	}
	// Epoch exhausted: the producer id is rotated; the client's retry with the old pair
	// gets the new one.
	m := meta(Empty)
	m.Epoch = 32766
	p := planInit("tx", m, initReq{TimeoutMs: 1, PID: 7, Epoch: 32766}, 50, 1)
	if p.next == nil || p.next.ProducerID != 50 || p.next.Epoch != 0 || p.next.PrevProducerID != 7 {
		t.Fatalf("rotation: %+v", p.next)
	}
	if q := planInit("tx", p.next, initReq{TimeoutMs: 1, PID: 7, Epoch: 32766}, noPID, 2); q.next == nil || q.next.ProducerID != 50 || q.next.Epoch != 0 {
		t.Fatalf("rotation retry: %+v %+v", q, q.next)
	}
}

// TestAddAndVerifyTable is AddPartitionsToTxn / AddOffsetsToTxn and the verification
// of KIP-890 part 1 by state.
func TestAddAndVerifyTable(t *testing.T) {
	tps := map[string][]int32{"t": {0}}
	other := map[string][]int32{"u": {1}}
	for _, s := range allStates {
		m := meta(s)
		next, code := planAdd(m, addReq{PID: 7, Epoch: 5, TPs: other}, 50)
		switch s {
		case PrepareCommit, PrepareAbort:
			if code != kerr.ConcurrentTransactions.Code || next != nil {
				t.Errorf("%v add: %d", s, code)
			}
		default:
			if code != 0 || next == nil || next.State != Ongoing || !next.has("u", 1) {
				t.Errorf("%v add: %d %+v", s, code, next)
				continue
			}
			if s != Ongoing && (next.StartMs != 50 || next.has("t", 0)) {
				t.Errorf("%v add: a new transaction starts now and empty: %+v", s, next)
			}
		}
		if _, code := planAdd(m, addReq{PID: 7, Epoch: 4, TPs: other}, 50); code != kerr.ProducerFenced.Code {
			t.Errorf("%v add stale epoch: %d", s, code)
		}
		if _, code := planAdd(m, addReq{PID: 9, Epoch: 5, TPs: other}, 50); code != kerr.InvalidProducerIDMapping.Code {
			t.Errorf("%v add other pid: %d", s, code)
		}
		got := verify(m, 7, 5, tps)["t"][0]
		want := map[State]int16{Ongoing: 0, PrepareCommit: 51, PrepareAbort: 51}[s]
		if s == Empty || s == CompleteAbort || s == CompleteCommit {
			want = kerr.TransactionAbortable.Code
		}
		if got != want {
			t.Errorf("%v verify: %d, want %d", s, got, want)
		}
	}
	// Already in: nothing written.
	if next, code := planAdd(meta(Ongoing), addReq{PID: 7, Epoch: 5, TPs: tps}, 50); next != nil || code != 0 {
		t.Errorf("re-add: %+v %d", next, code)
	}
	// The cap on partitions per transaction.
	if _, code := planAdd(meta(Ongoing), addReq{PID: 7, Epoch: 5, TPs: other, MaxTPs: 1}, 50); code != codeTooMany {
		t.Errorf("cap: %d", code)
	}
	// Groups.
	next, _ := planAdd(meta(Ongoing), addReq{PID: 7, Epoch: 5, Group: "g"}, 50)
	if verifyGroup(next, 7, 5, "g") != 0 || verifyGroup(next, 7, 5, "h") != kerr.TransactionAbortable.Code {
		t.Error("verify group")
	}
}

func TestExpired(t *testing.T) {
	m := meta(CompleteCommit)
	if expired(m, 100, 50) || !expired(m, 100, 101) || expired(meta(Ongoing), 100, 1000) {
		t.Error("expiry")
	}
}

func TestStateNames(t *testing.T) {
	for i, n := range stateNames {
		if s, ok := ParseState(n); !ok || s != State(i) || s.String() != n {
			t.Errorf("%d %s", i, n)
		}
	}
}

// TestWaitsForCompletionTable is which requests, coming while a Prepare* completes, wait
// for its Complete* instead of being answered CONCURRENT_TRANSACTIONS: exactly those the
// plans answer so in Prepare*, and the next transaction's implicit adds.
func TestWaitsForCompletionTable(t *testing.T) {
	tps := map[string][]int32{"t": {1}}
	rotated := meta(PrepareCommit)
	rotated.NextProducerID = 8
	rows := []struct {
		name string
		m    *Meta
		r    request
		want bool
	}{
		{"implicit add at the bumped epoch", meta(PrepareCommit), &VerifyPartitions{ProducerID: 7, ProducerEpoch: 5, Partitions: tps, Add: true}, true},
		{"implicit group add", meta(PrepareAbort), &VerifyGroup{ProducerID: 7, ProducerEpoch: 5, Group: "g", Add: true}, true},
		{"implicit add at the next producer id", rotated, &VerifyPartitions{ProducerID: 8, ProducerEpoch: 0, Partitions: tps, Add: true}, true},
		{"implicit add, stale epoch", meta(PrepareCommit), &VerifyPartitions{ProducerID: 7, ProducerEpoch: 4, Partitions: tps, Add: true}, false},
		{"verification only", meta(PrepareCommit), &VerifyPartitions{ProducerID: 7, ProducerEpoch: 5, Partitions: tps}, false},
		{"explicit add of the next transaction", meta(PrepareCommit), &AddPartitions{ProducerID: 7, ProducerEpoch: 5, Partitions: tps}, true},
		{"explicit add, other producer", meta(PrepareCommit), &AddPartitions{ProducerID: 9, ProducerEpoch: 5, Partitions: tps}, false},
		{"explicit add, fenced epoch", meta(PrepareCommit), &AddPartitions{ProducerID: 7, ProducerEpoch: 3, Partitions: tps}, false},
		{"broker's verify-only add", meta(PrepareCommit), &AddPartitions{ProducerID: 7, ProducerEpoch: 5, Partitions: tps, VerifyOnly: true}, false},
		{"add offsets", meta(PrepareAbort), &AddOffsets{ProducerID: 7, ProducerEpoch: 5, Group: "g"}, true},
		{"InitProducerId", meta(PrepareCommit), &InitProducerID{TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1}, true},
		{"InitProducerId at its epoch", meta(PrepareAbort), &InitProducerID{TimeoutMs: 60000, ProducerID: 7, ProducerEpoch: 5}, true},
		{"InitProducerId of another producer id", meta(PrepareCommit), &InitProducerID{TimeoutMs: 60000, ProducerID: 9, ProducerEpoch: 5}, false},
		{"EndTxn retried", meta(PrepareCommit), &EndTxn{ProducerID: 7, ProducerEpoch: 5, Commit: true}, true},
		{"EndTxn of the other decision", meta(PrepareCommit), &EndTxn{ProducerID: 7, ProducerEpoch: 5, Commit: false}, true},
		{"EndTxn v5 retried", meta(PrepareAbort), &EndTxn{ProducerID: 7, ProducerEpoch: 4, Commit: false, TV2: true}, true},
		{"EndTxn v5 at the bumped epoch, aborting the next transaction", meta(PrepareCommit), &EndTxn{ProducerID: 7, ProducerEpoch: 5, Commit: false, TV2: true}, true},
		{"EndTxn v5, fenced", meta(PrepareCommit), &EndTxn{ProducerID: 7, ProducerEpoch: 3, Commit: false, TV2: true}, false},
		{"EndTxn, fenced", meta(PrepareCommit), &EndTxn{ProducerID: 7, ProducerEpoch: 3, Commit: true}, false},
	}
	for _, r := range rows {
		if got := waitsForCompletion("tx", r.m, r.r, 2); got != r.want {
			t.Errorf("%s: waits %v, want %v", r.name, got, r.want)
		}
	}
}
