package offsets

import (
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
)

// Group commit: requests queue, go to the journal as one record per batch, and are
// answered when the fsync that holds them returns.

// batch is one write's requests: what they make of the state and what each waiter gets
// once the write holds them.
type batch struct {
	reqs    []queued
	results []any
	next    state
	exists  bool
	dirty   bool
	expired int
	rec     *recorder
	// refused counts the TxnCommits refused for the pending cap; dropped the pending
	// transactional offsets a DeleteAll removed with the group.
	refused, dropped int

	reply actor.Promise     // the journal's answer comes through it (waitable: waitInflight)
	res   *journal.Appended // the answer, once in
	// direct: the batch's Commits are answered by the journal (answerCommits), not by
	// answerBatch or failBatch.
	direct bool
}

// maxInflight is how many batches of one group may wait for the journal at once. The
// journal writes every batch in its mailbox with one fdatasync, so a batch sent while an
// fsync runs rides the next one, whoever sent it: with two, a group's commits that came
// after its second batch waited a whole fsync more in the actor (16 committers of one
// group had 5 commits in each fsync). A batch of commits only costs an overlay of what it
// sets, not a copy of the state, so eight cost little. A batch is built on the state the batches
// before it will make (its ops and answers), and once durable its ops are applied to
// the actor's state: what the actor serves is always what the journal holds, also when
// a batch before it failed.
const maxInflight = 8

// queued is a request waiting for the next write.
type queued struct {
	msg   any
	codes []int16 // a Commit's per-entry codes found before the write (OFFSET_METADATA_TOO_LARGE)
	limit int     // a TxnCommit's cap on the group's pending offsets (Config.MaxPendingOffsets)
}

// flushNow tells the actor to write what has queued.
type flushNow struct{}

func (a *offsetsActor) handleCommit(ctx actor.Context, m *Commit) {
	if !a.serving() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	codes, valid := a.metadataCodes(m.Entries)
	if valid == 0 {
		// Nothing to store: Apache writes nothing when every partition is oversized.
		m.Reply.Resolve(&CommitResult{Codes: codes})
		return
	}
	a.enqueue(ctx, queued{msg: m, codes: codes})
}

// handleTxnCommit queues a TxnOffsetCommit's entries for the producer's pending layer;
// the cap on the group's pending offsets is checked as the batch is built (apply), on
// the state the batches before it make.
func (a *offsetsActor) handleTxnCommit(ctx actor.Context, m *TxnCommit) {
	if !a.serving() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	codes, valid := a.metadataCodes(m.Entries)
	if valid == 0 {
		m.Reply.Resolve(&CommitResult{Codes: codes})
		return
	}
	a.enqueue(ctx, queued{msg: m, codes: codes, limit: a.cfg.MaxPendingOffsets})
}

// handleTxnEnd queues the end of a producer's transaction in the group; one with
// nothing pending is answered once the batches in flight are durable (flush).
func (a *offsetsActor) handleTxnEnd(ctx actor.Context, m *TxnEnd) {
	if !a.serving() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	a.enqueue(ctx, queued{msg: m})
}

// metadataCodes is the per-entry codes found before the write, and how many entries
// passed.
func (a *offsetsActor) metadataCodes(entries []Entry) ([]int16, int) {
	codes := make([]int16, len(entries))
	valid := 0
	for i, e := range entries {
		// Apache compares String.length(), UTF-16 units, not bytes
		// (GroupMetadataManager.validateOffsetMetadataLength).
		if utf16Len(e.Metadata) > a.cfg.MaxMetadataBytes {
			codes[i] = kerr.OffsetMetadataTooLarge.Code
			continue
		}
		// The offset and leader epoch are stored as sent, whatever their value: Apache's
		// OffsetCommit has no range check on either, and clients rely on it (kafkajs's
		// resetOffsets commits -2, its "earliest", for its consumers to resolve).
		valid++
	}
	return codes, valid
}

func (a *offsetsActor) handleFetch(m *Fetch) {
	if !a.serving() {
		m.Reply.Resolve(&FetchResult{ErrorCode: codeBroken})
		return
	}
	// Only what is on disk is visible: queued commits are not acknowledged yet, and the
	// pending (transactional) layer never is; require_stable reports it per partition.
	res := &FetchResult{}
	unstable := func(tp TopicPartition) {
		if m.RequireStable && len(a.st.pending) > 0 && a.st.hasPending(tp) {
			if res.Unstable == nil {
				res.Unstable = map[TopicPartition]bool{}
			}
			res.Unstable[tp] = true
		}
	}
	if m.Partitions == nil {
		res.Offsets = make(map[TopicPartition]Committed, len(a.st.offsets))
		for tp, o := range a.st.offsets {
			res.Offsets[tp] = o
			unstable(tp)
		}
	} else {
		res.Offsets = make(map[TopicPartition]Committed, len(m.Partitions))
		for _, tp := range m.Partitions {
			if o, ok := a.st.offsets[tp]; ok {
				res.Offsets[tp] = o
			}
			unstable(tp)
		}
	}
	m.Reply.Resolve(res)
}

func (a *offsetsActor) handleStat(m *Stat) {
	if !a.serving() {
		m.Reply.Resolve(&Status{ErrorCode: codeBroken})
		return
	}
	m.Reply.Resolve(a.status())
}

func (a *offsetsActor) status() *Status {
	return &Status{Exists: a.exists, Meta: a.st.meta.whole(), Count: len(a.st.offsets), Pending: a.st.pendingCount()}
}

func (a *offsetsActor) handleChange(ctx actor.Context, m any) {
	if !a.serving() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	// A SaveMeta without a reply is journaled like any change: the file must never hold
	// what the journal does not (replay would set older records over it).
	a.enqueue(ctx, queued{msg: m})
}

// enqueue queues a request for the next write: it is answered after that write, by
// Stopping with the write's outcome too, or by Restarting (actor.HandedOn).
func (a *offsetsActor) enqueue(ctx actor.Context, q queued) {
	a.queue = append(a.queue, q)
	actor.HandedOn(ctx)
	if !a.flushQueued {
		a.flushQueued = true
		ctx.Send(ctx.Self(), &flushNow{})
	}
}

// flush makes the queue durable by appending it to the journal (answered in
// onAppended).
func (a *offsetsActor) flush(ctx actor.Context) {
	if len(a.inflight) >= maxInflight || len(a.queue) == 0 {
		// What queues meanwhile goes with the next batch.
		return
	}
	b := a.applyQueue()
	if !b.dirty {
		if len(a.inflight) > 0 {
			// Its outcome is built on batches not yet durable: it waits for them.
			return
		}
		a.queue = nil
		a.commitBatch(b)
		return
	}
	data, err := a.encodeRecord(b.rec.ops)
	if err == nil {
		err = b.rec.err
	}
	if err != nil {
		a.queue = nil
		a.log().Error().Err(err).Int("requests", len(b.reqs)).Msg("offsets_write_failed")
		a.failBatch(b, codeWriteFailed)
		return
	}
	b.reply = actor.NewWaitable(ctx)
	a.inflight, a.queue = append(a.inflight, b), nil
	ctx.Send(a.cfg.Journal, &journal.Append{Key: a.group, Data: data, Reply: b.reply, Answer: a.answerCommits(b)})
}

// answerCommits is the journal's Answer for batch b: its Commits' clients are answered on
// the journal's goroutine right after the fsync, with the results the batch decided
// before the write (a commit's outcome does not depend on the state), instead of one hop
// later from this actor. The journal resolves the batch's own reply first, so this actor
// has the outcome in its mailbox before any client hears of it: a fetch a client sends
// after its answer sees its commit. A failed write fails them; in a cluster a closed gate
// refuses them (Refused tells this actor, which fences) as finishInflight would. Nil when
// b has no Commit. b.reqs and b.results are not written once the batch is sent.
func (a *offsetsActor) answerCommits(b *batch) func(*journal.Appended) func() {
	var commits []int
	for i, q := range b.reqs {
		if _, ok := q.msg.(*Commit); ok {
			commits = append(commits, i)
		}
	}
	if len(commits) == 0 {
		return nil
	}
	b.direct = true
	reqs, results, gate := b.reqs, b.results, a.gate
	return func(r *journal.Appended) func() {
		var code int16
		switch {
		case r.Err != nil:
			code = codeWriteFailed
		case gate != nil && !gate():
			r.Refused = true
			code = codeFenced
		}
		return func() {
			for _, i := range commits {
				if code != 0 {
					fail(reqs[i], code)
				} else {
					resolve(reqs[i].msg, results[i])
				}
			}
		}
	}
}

// applyQueue applies the queue to what the state will be once the batches in flight
// are durable. A journaled batch of commits only is applied to an overlay holding just
// what it sets (a commit's outcome does not depend on the state), so a commit costs
// what it commits, not a copy of the group's offsets; any other batch is applied to a
// copy.
func (a *offsetsActor) applyQueue() *batch {
	// The queue stays until the batch is answered or handed on: a panic meanwhile leaves
	// it to onRestarting.
	base, exists, overlays := a.st, a.exists, a.inflight
	for i := len(a.inflight) - 1; i >= 0; i-- {
		if !a.inflight[i].next.partial {
			base, exists, overlays = a.inflight[i].next, a.inflight[i].exists, a.inflight[i+1:]
			break
		}
	}
	var next state
	// A commit drops the pending offsets of its partitions (apply), so with any pending
	// the batch is applied to a copy: an overlay shares base's pending layer.
	if commitsOnly(a.queue) && len(base.pending) == 0 {
		next = base.overlay()
	} else {
		next = base.clone()
		for _, o := range overlays {
			next.setAll(o.next)
			exists = exists || o.exists
		}
	}
	b := &batch{reqs: a.queue, next: next, exists: exists, results: make([]any, len(a.queue)),
		rec: &recorder{cache: &a.metaJSON}}
	now := a.cfg.Now()
	for i, q := range b.reqs {
		var changed bool
		var n int
		if _, ok := q.msg.(*DeleteAll); ok {
			b.dropped += b.next.pendingCount()
		}
		b.results[i], changed, n = apply(&b.next, &b.exists, q, now, b.rec)
		if _, ok := q.msg.(*TxnCommit); ok && !changed && limitRefused(b.results[i]) {
			b.refused++
		}
		b.dirty = b.dirty || changed
		b.expired += n
	}
	return b
}

// commitBatch makes a batch with nothing to journal, built on the actor's state as it
// is, the actor's state and answers its waiters.
func (a *offsetsActor) commitBatch(b *batch) {
	a.st, a.exists = b.next, b.exists
	a.publishAll()
	a.answerBatch(b)
}

// answerBatch answers a durable batch's waiters.
func (a *offsetsActor) answerBatch(b *batch) {
	a.cfg.Metrics.expiredOffsets(b.expired)
	for range b.refused {
		a.cfg.Metrics.pendingRefusedOnce()
	}
	if b.refused > 0 {
		limited(&a.failLog).Event(a.log().Warn()).Int("refused", b.refused).Int("limit", a.cfg.MaxPendingOffsets).
			Int("pending", a.st.pendingCount()).Msg("offsets_pending_txn_limit_reached")
	}
	if b.dropped > 0 {
		// Apache deletes a deleted group's pending transactional offsets too
		// (OffsetMetadataManager.deleteAllOffsets); a commit marker that comes later
		// finds nothing to apply.
		a.log().Warn().Int("pending_offsets", b.dropped).Msg("offsets_pending_txn_dropped_with_group")
	}
	if b.expired > 0 {
		a.log().Info().Int("expired", b.expired).Bool("file_removed", !b.exists).Msg("offsets_expired")
	}
	for i, q := range b.reqs {
		if b.answeredByJournal(q) {
			continue
		}
		resolve(q.msg, b.results[i])
	}
}

// answeredByJournal says whether q's client is answered by the journal (answerCommits).
func (b *batch) answeredByJournal(q queued) bool {
	if !b.direct {
		return false
	}
	_, ok := q.msg.(*Commit)
	return ok
}

// failBatch answers every request of a batch that did not become durable with code; the
// state stays as it was.
func (a *offsetsActor) failBatch(b *batch, code int16) {
	for _, q := range b.reqs {
		if b.answeredByJournal(q) {
			continue
		}
		// A SaveMeta without a reply has no one to tell, and its meta is dropped: a
		// checkpoint must never write what the journal does not hold, or replay would
		// set older records over it.
		fail(q, code)
	}
}

// onAppended takes the journal's answer to a batch in flight, answers the batches whose
// answers are in, oldest first (one answer may overtake another: the journal answers an
// Append it panicked on at once, ahead of the group's earlier ones it still holds), then
// sends the next.
func (a *offsetsActor) onAppended(ctx actor.Context, m *actor.Settled) {
	i := slices.IndexFunc(a.inflight, func(b *batch) bool { return b.reply.ID() == m.ID })
	if i < 0 {
		return // answered already, while stopping, or an earlier incarnation's
	}
	a.inflight[i].res = appended(m.Value)
	for len(a.inflight) > 0 && a.inflight[0].res != nil {
		a.finishInflight(ctx, *a.inflight[0].res, true)
	}
	a.flush(ctx)
	a.settleFlushes(ctx, false)
}

// appended is the journal's answer v as an outcome.
func appended(v any) *journal.Appended {
	if r, ok := v.(*journal.Appended); ok {
		return r
	}
	return &journal.Appended{Err: fmt.Errorf("offsets journal answered %T", v)}
}

// finishInflight answers the oldest batch in flight with the journal's outcome. A
// durable batch's ops are applied to the state; a failed one changes nothing (the
// batches after it carry only their own ops).
func (a *offsetsActor) finishInflight(ctx actor.Context, res journal.Appended, schedule bool) {
	b := a.inflight[0]
	// The slot is cleared, and the slice dropped when empty: a resliced array would keep
	// the last batch (its requests, results and a copy of the state) for the actor's life.
	a.inflight[0] = nil
	if a.inflight = a.inflight[1:]; len(a.inflight) == 0 {
		a.inflight = nil
	}
	if res.Err != nil {
		limited(&a.failLog).Event(a.log().Error()).Err(res.Err).Int("requests", len(b.reqs)).Msg("offsets_write_failed")
		a.failBatch(b, codeWriteFailed)
		return
	}
	// A batch whose commits the journal answered was judged there (Refused), when they
	// were acknowledged: judged again now, a gate that closed since would fence the
	// actor for a batch its clients were told is durable.
	if res.Refused || (!b.direct && a.gate != nil && !a.gate()) {
		// Durable in this broker's journal, but the lease may have lapsed meanwhile and
		// another broker adopted the group: not acknowledged (a successor that replayed
		// the journal first has it; one that did not never acknowledged it either).
		a.fence("gate_closed")
		a.failBatch(b, codeFenced)
		return
	}
	applyOps(&a.st, &a.exists, b.rec.ops, b.rec.metas)
	a.publishOps(b.rec.ops)
	a.answerBatch(b)
	a.lastSeq = res.Seq
	if schedule {
		a.scheduleCheckpoint(ctx)
	}
}

// waitInflight waits for the journal's answers to the batches in flight, for a stopping
// or restarting actor that can no longer take them from its mailbox.
func (a *offsetsActor) waitInflight(ctx actor.Context) {
	if len(a.inflight) == 0 {
		return
	}
	deadline := time.Now().Add(flushWait)
	for len(a.inflight) > 0 {
		b := a.inflight[0]
		if b.res == nil {
			v, ok := b.reply.Wait(time.Until(deadline))
			if !ok {
				a.log().Error().Dur("waited_ms", flushWait).Int("batches", len(a.inflight)).Msg("offsets_journal_did_not_answer")
				for _, b := range a.inflight {
					a.failBatch(b, codeWriteFailed)
					if b.direct {
						// Nor will the journal answer its commits in time: failed
						// here; an answer that comes later is dropped by the client's
						// connection, which took this one.
						b.direct = false
						for _, q := range b.reqs {
							if _, ok := q.msg.(*Commit); ok {
								fail(q, codeWriteFailed)
							}
						}
					}
				}
				a.inflight = nil
				return
			}
			b.res = appended(v)
		}
		a.finishInflight(ctx, *b.res, false)
	}
}

// flushWait bounds how long a stopping actor waits for the journal's answers to its
// batches in flight (the journal answers a failed write at once: this is for a journal
// stuck in fdatasync).
const flushWait = 5 * time.Second

// StopWait bounds how long an offsets actor takes to answer Flush, or to stop, when the
// journal answers and its file writes do not hang: the group, which waits for the Flush
// answer as it is released, waits a little longer, so the inner waits end first.
const StopWait = flushWait + checkpointWait

// limitRefused says whether a TxnCommit's result is the pending cap's refusal.
func limitRefused(v any) bool {
	r, ok := v.(*CommitResult)
	if !ok {
		return false
	}
	for _, c := range r.Codes {
		if c == CodePendingLimit {
			return true
		}
	}
	return false
}
