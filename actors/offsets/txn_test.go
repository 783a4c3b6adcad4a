package offsets

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// The pending layer of transactional offsets (KIP-447): TxnCommit, TxnEnd, Fetch's
// RequireStable, and their durability through the journal, a restart, replay and
// adoption.

func (h *harness) txnCommit(pid int64, entries ...Entry) []int16 {
	h.t.Helper()
	return wait[*CommitResult](h.t, h.send(func(p actor.Promise) any {
		return &TxnCommit{ProducerID: pid, Entries: entries, Reply: p}
	})).Codes
}

func (h *harness) txnEnd(pid int64, commit bool) int16 {
	h.t.Helper()
	return h.result(func(p actor.Promise) any { return &TxnEnd{ProducerID: pid, Commit: commit, Reply: p} })
}

func (h *harness) fetchStable(tps ...TopicPartition) *FetchResult {
	h.t.Helper()
	return wait[*FetchResult](h.t, h.send(func(p actor.Promise) any {
		return &Fetch{Partitions: tps, RequireStable: true, Reply: p}
	}))
}

var (
	tp0 = TopicPartition{"t", 0}
	tp1 = TopicPartition{"t", 1}
	tp2 = TopicPartition{"t", 2}
)

func pendingOf(s state) map[int64]map[TopicPartition]int64 {
	out := map[int64]map[TopicPartition]int64{}
	for pid, p := range s.pending {
		out[pid] = map[TopicPartition]int64{}
		for tp, c := range p {
			out[pid][tp] = c.Offset
		}
	}
	return out
}

// TestTxnCommitMarkerAppliesAbortDrops: pending offsets are invisible to Fetch and
// reported per partition to RequireStable; the commit marker makes them committed, the
// abort marker drops them, and either retried answers 0 and changes nothing.
func TestTxnCommitMarkerAppliesAbortDrops(t *testing.T) {
	h := newHarness(t, "g")
	if c := h.commit(entry("t", 0, 3)); !codesOK(c) {
		t.Fatalf("commit %v", c)
	}
	if c := h.txnCommit(7, entry("t", 0, 10)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if c := h.txnCommit(8, entry("t", 1, 20)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if f := h.fetch(tp0, tp1); f.Offsets[tp0].Offset != 3 || len(f.Offsets) != 1 || f.Unstable != nil {
		t.Fatalf("fetch sees the pending layer: %+v", f)
	}
	f := h.fetchStable(tp0, tp1, tp2)
	if !maps.Equal(f.Unstable, map[TopicPartition]bool{tp0: true, tp1: true}) {
		t.Fatalf("require_stable unstable %v, want t-0 and t-1 only", f.Unstable)
	}
	// All partitions: the committed ones, flagged when pending (Apache fetchAllOffsets).
	all := wait[*FetchResult](t, h.send(func(p actor.Promise) any { return &Fetch{RequireStable: true, Reply: p} }))
	if !maps.Equal(all.Unstable, map[TopicPartition]bool{tp0: true}) {
		t.Fatalf("require_stable over all: unstable %v, want t-0", all.Unstable)
	}
	if st := h.stat(); st.Pending != 2 || st.Count != 1 {
		t.Fatalf("stat %+v, want 2 pending and 1 committed", st)
	}

	if c := h.txnEnd(7, true); c != 0 {
		t.Fatalf("commit marker %d", c)
	}
	if c := h.txnEnd(8, false); c != 0 {
		t.Fatalf("abort marker %d", c)
	}
	f = h.fetchStable(tp0, tp1)
	if f.Offsets[tp0].Offset != 10 || len(f.Offsets) != 1 || f.Unstable != nil {
		t.Fatalf("after the markers %+v, want t-0=10 stable and no t-1", f)
	}
	// Retries (a coordinator re-driving its markers after a restart): nothing pending.
	if c := h.txnEnd(7, true); c != 0 {
		t.Fatalf("retried commit marker %d", c)
	}
	if c := h.txnEnd(8, true); c != 0 {
		t.Fatalf("commit marker after the abort %d", c)
	}
	if f := h.fetch(tp0, tp1); f.Offsets[tp0].Offset != 10 || len(f.Offsets) != 1 {
		t.Fatalf("retried markers changed the offsets: %+v", f.Offsets)
	}
	if got := gaugeValue(h.metrics.pending); got != 0 {
		t.Fatalf("pending gauge %v after the markers, want 0", got)
	}
}

// TestTxnPendingSurvivesRestart: the pending layer is journaled before the answer and
// written to the file, so a new incarnation serves it as pending, and the marker then
// applies it.
func TestTxnPendingSurvivesRestart(t *testing.T) {
	h := newHarness(t, "g")
	if c := h.txnCommit(7, entry("t", 0, 10), entry("t", 1, 11)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	h.restart()
	s, ok := h.onDisk()
	if !ok || !maps.EqualFunc(pendingOf(s), map[int64]map[TopicPartition]int64{7: {tp0: 10, tp1: 11}}, maps.Equal) {
		t.Fatalf("file after restart: pending %v", pendingOf(s))
	}
	if f := h.fetchStable(tp0); !f.Unstable[tp0] || len(f.Offsets) != 0 {
		t.Fatalf("restarted actor: %+v, want t-0 unstable and nothing committed", f)
	}
	if c := h.txnEnd(7, true); c != 0 {
		t.Fatalf("commit marker %d", c)
	}
	h.restart()
	if f := h.fetchStable(tp0, tp1); f.Offsets[tp0].Offset != 10 || f.Offsets[tp1].Offset != 11 || f.Unstable != nil {
		t.Fatalf("after the commit and a restart: %+v", f)
	}
}

// TestTxnPendingReplayedAndAdopted: a crash before any checkpoint leaves the pending
// layer in the journal only; replay at start and a peer's adoption both bring it into
// the file, still pending.
func TestTxnPendingReplayedAndAdopted(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	if c := j.commit(entry("t", 2, 1)); !codesOK(c) {
		t.Fatalf("commit %v", c)
	}
	if c := j.txnCommit(7, entry("t", 0, 10)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if c := j.txnCommit(9, entry("t", 1, 5)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if c := j.txnEnd(9, false); c != 0 {
		t.Fatalf("abort %d", c)
	}
	if _, ok := j.onDisk(); ok {
		t.Fatal("group file written before the crash")
	}
	want := map[int64]map[TopicPartition]int64{7: {tp0: 10}}
	check := func(dir string) {
		t.Helper()
		s, ok := groupFile(t, dir, "g")
		if !ok || !maps.EqualFunc(pendingOf(s), want, maps.Equal) || len(s.offsets) != 1 || s.offsets[tp2].Offset != 1 {
			t.Fatalf("file: offsets %v pending %v, want t-2=1 and producer 7's t-0=10 pending", s.offsets, pendingOf(s))
		}
	}

	img := j.crashImage()
	if _, err := ReplayJournal(storage.NewFaultFS(nil), Dir(img), JournalDir(img, 1), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	check(Dir(img))

	img = j.crashImage()
	if n, err := Adopt(AdoptConfig{OffsetsDir: Dir(img), JournalDirs: []string{JournalDir(img, 1)},
		Owns: func(string) bool { return true }, Log: zerolog.Nop()}); err != nil || n != 1 {
		t.Fatalf("adopt: %d groups, %v", n, err)
	}
	check(Dir(img))
}

// TestTxnRecordsReplayOverLaterFile: the journal's records are replayed over a file
// written at any later point of their sequence. A commit marker journaled as "apply what
// is pending" would, replayed over a file holding the producer's next transaction, commit
// that transaction's offsets early.
func TestTxnRecordsReplayOverLaterFile(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s, exists := newState(), false
	var records [][]op
	var states []state
	step := func(msg any) {
		rec := &recorder{cache: new(*metaCache)}
		q := queued{msg: msg}
		switch m := msg.(type) {
		case *TxnCommit:
			q.codes = make([]int16, len(m.Entries))
		case *Commit:
			q.codes = make([]int16, len(m.Entries))
		}
		apply(&s, &exists, q, now, rec)
		records = append(records, rec.ops)
		states = append(states, s.clone())
	}
	step(&TxnCommit{ProducerID: 7, Entries: []Entry{entry("t", 0, 10)}})
	step(&TxnEnd{ProducerID: 7, Commit: true})
	step(&TxnCommit{ProducerID: 7, Entries: []Entry{entry("t", 1, 20)}})
	step(&Commit{Entries: []Entry{entry("t", 2, 30)}})
	step(&TxnCommit{ProducerID: 8, Entries: []Entry{entry("t", 2, 40)}})
	step(&TxnCommit{ProducerID: 9, Entries: []Entry{entry("t", 3, 50), entry("t", 4, 51)}})
	step(&Commit{Entries: []Entry{entry("t", 3, 60)}})
	step(&TxnCommit{ProducerID: 10, Entries: []Entry{entry("t", 4, 70)}})
	step(&TxnEnd{ProducerID: 9, Commit: true})
	step(&Delete{Partitions: []TopicPartition{tp2}})
	final := states[len(states)-1]
	for from := range records {
		for at := from; at < len(states); at++ {
			r, ex := states[at].clone(), true
			for _, ops := range records[from:] {
				if err := replayOps(&r, &ex, ops); err != nil {
					t.Fatal(err)
				}
			}
			if !maps.Equal(r.offsets, final.offsets) || !maps.EqualFunc(pendingOf(r), pendingOf(final), maps.Equal) {
				t.Fatalf("records %d.. over the state after %d: offsets %v pending %v, want %v %v",
					from, at, r.offsets, pendingOf(r), final.offsets, pendingOf(final))
			}
		}
	}
	// The OffsetDelete of t-2 drops producer 8's pending t-2; the plain commit of t-3 after
	// producer 9's wins over it; producer 9's commit leaves producer 10's pending t-4.
	if !maps.EqualFunc(pendingOf(final), map[int64]map[TopicPartition]int64{7: {tp1: 20}, 10: {{"t", 4}: 70}}, maps.Equal) {
		t.Fatalf("final pending %v", pendingOf(final))
	}
	if final.offsets[TopicPartition{"t", 3}].Offset != 60 || final.offsets[TopicPartition{"t", 4}].Offset != 51 {
		t.Fatalf("final offsets %v, want t-3=60 (the later plain commit) and t-4=51", final.offsets)
	}
}

// TestTxnPendingCap: a group holds at most MaxPendingOffsets pending offsets; a commit
// past it stores nothing and gets CodePendingLimit, counted; updating an offset already
// pending is not refused.
func TestTxnPendingCap(t *testing.T) {
	h := newHarness(t, "g", func(c *Config) { c.MaxPendingOffsets = 2 })
	if c := h.txnCommit(7, entry("t", 0, 1), entry("t", 1, 1)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if c := h.txnCommit(8, entry("t", 2, 1)); len(c) != 1 || c[0] != CodePendingLimit {
		t.Fatalf("commit past the cap %v, want %d", c, CodePendingLimit)
	}
	if c := h.txnCommit(7, entry("t", 1, 5)); !codesOK(c) {
		t.Fatalf("update of a pending offset %v", c)
	}
	if st := h.stat(); st.Pending != 2 {
		t.Fatalf("pending %d, want 2", st.Pending)
	}
	if got := gaugeValue(h.metrics.pending); got != 2 {
		t.Fatalf("pending gauge %v, want 2", got)
	}
	if got := counterValue(h.metrics.pendingRefused); got != 1 {
		t.Fatalf("refused counter %v, want 1", got)
	}
	if c := h.txnEnd(7, false); c != 0 {
		t.Fatalf("abort %d", c)
	}
	if c := h.txnCommit(8, entry("t", 2, 1)); !codesOK(c) {
		t.Fatalf("txn commit after the abort freed the layer %v", c)
	}
}

// TestTxnPendingNotExpiredDeletedWithGroup: expiry keeps an Empty group with pending
// offsets (Apache: not while transactions are open) and never expires a partition with
// one; DeleteGroups drops them with the group, as Apache 4's deleteAllOffsets does.
func TestTxnPendingNotExpiredDeletedWithGroup(t *testing.T) {
	h := newHarness(t, "g")
	if c := h.commit(entry("t", 0, 1), entry("t", 1, 1)); !codesOK(c) {
		t.Fatalf("commit %v", c)
	}
	if c := h.txnCommit(7, entry("t", 0, 2), entry("t", 5, 2)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	h.advance(48 * time.Hour)
	st := wait[*Status](t, h.send(func(p actor.Promise) any {
		return &Expire{Now: time.UnixMilli(h.nowMs.Load()), Rule: ExpiryRule{Empty: true, Retention: time.Hour}, Reply: p}
	}))
	if !st.Exists || st.Count != 1 || st.Pending != 2 {
		t.Fatalf("after expiry %+v, want the group kept with t-0 and 2 pending", st)
	}
	if f := h.fetch(tp0, tp1); len(f.Offsets) != 1 || f.Offsets[tp0].Offset != 1 {
		t.Fatalf("expiry removed %+v, want only t-1 gone", f.Offsets)
	}
	if c := h.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != 0 {
		t.Fatalf("delete %d", c)
	}
	if st := h.stat(); st.Exists || st.Pending != 0 {
		t.Fatalf("after DeleteAll %+v", st)
	}
	// Logged before the answer.
	if !strings.Contains(h.logs.String(), "offsets_pending_txn_dropped_with_group") {
		t.Fatal("pending offsets dropped with the group without a log line")
	}
	if c := h.txnEnd(7, true); c != 0 {
		t.Fatalf("commit marker after the delete %d", c)
	}
	if f := h.fetch(tp0); len(f.Offsets) != 0 {
		t.Fatalf("a marker after DeleteGroups brought offsets back: %+v", f.Offsets)
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// TestTxnPendingDroppedWithDeletedTopic: DeleteTopics drops a topic's pending offsets
// with its committed ones (Apache onTopicsDeleted cleans both), so a later commit marker
// cannot bring back an offset of a deleted topic.
func TestTxnPendingDroppedWithDeletedTopic(t *testing.T) {
	h := newHarness(t, "g")
	if c := h.txnCommit(7, entry("gone", 0, 1), entry("t", 0, 2)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	if c := h.result(func(p actor.Promise) any { return &DropTopics{Topics: []string{"gone"}, Reply: p} }); c != 0 {
		t.Fatalf("drop topics %d", c)
	}
	if c := h.txnEnd(7, true); c != 0 {
		t.Fatalf("commit marker %d", c)
	}
	f := h.fetch(TopicPartition{"gone", 0}, tp0)
	if _, ok := f.Offsets[TopicPartition{"gone", 0}]; ok || f.Offsets[tp0].Offset != 2 {
		t.Fatalf("after DropTopics and the commit: %+v", f.Offsets)
	}
}

// TestTxnLaterPlainCommitWins: a plain OffsetCommit made after a transactional one for
// the same partition is what stays once the transaction commits (Apache keeps the offset
// of the higher record), also when the plain commit's batch is still in flight as the
// marker's is built; require_stable then answers it as stable.
func TestTxnLaterPlainCommitWins(t *testing.T) {
	h := newHarness(t, "g")
	if c := h.txnCommit(7, entry("t", 0, 10), entry("t", 1, 11)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	plain := h.commitW(entry("t", 0, 20))
	marker := h.send(func(p actor.Promise) any { return &TxnEnd{ProducerID: 7, Commit: true, Reply: p} })
	if c := wait[*CommitResult](t, plain).Codes; !codesOK(c) {
		t.Fatalf("commit %v", c)
	}
	if r := wait[*Result](t, marker); r.ErrorCode != 0 {
		t.Fatalf("marker %d", r.ErrorCode)
	}
	for i := 0; i < 2; i++ {
		if f := h.fetchStable(tp0, tp1); f.Offsets[tp0].Offset != 20 || f.Offsets[tp1].Offset != 11 || f.Unstable != nil {
			t.Fatalf("round %d: %+v, want t-0=20 (the later plain commit) and t-1=11", i, f)
		}
		h.restart()
	}
}

// TestTxnWriteFailureChangesNothing: a TxnCommit or marker whose journal write fails is
// answered NOT_COORDINATOR (never a false success) and changes nothing; the coordinator's
// retry of the marker then applies the offsets.
func TestTxnWriteFailureChangesNothing(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	hk, _ := j.hookSegments(nil)
	if c := j.txnCommit(7, entry("t", 0, 10)); !codesOK(c) {
		t.Fatalf("txn commit %v", c)
	}
	hk.failNext(storage.OpSync)
	if c := j.txnCommit(7, entry("t", 1, 11)); len(c) != 1 || c[0] != kerr.NotCoordinator.Code {
		t.Fatalf("txn commit on a failed write %v, want NOT_COORDINATOR", c)
	}
	hk.failNext(storage.OpSync)
	if c := j.txnEnd(7, true); c != kerr.NotCoordinator.Code {
		t.Fatalf("marker on a failed write %d, want NOT_COORDINATOR", c)
	}
	if f := j.fetchStable(tp0, tp1); !maps.Equal(f.Unstable, map[TopicPartition]bool{tp0: true}) || len(f.Offsets) != 0 {
		t.Fatalf("after the failed writes %+v, want t-0 pending only", f)
	}
	if c := j.txnEnd(7, true); c != 0 {
		t.Fatalf("retried marker %d", c)
	}
	if f := j.fetchStable(tp0, tp1); f.Offsets[tp0].Offset != 10 || len(f.Offsets) != 1 || f.Unstable != nil {
		t.Fatalf("after the retried marker %+v", f)
	}
}
