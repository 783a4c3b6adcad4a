package offsets

import (
	"time"
)

// What each request does to a group's state, as pure functions of it.

// apply makes one queued request's change to s and returns what its waiter gets if the
// write succeeds, whether it changed anything on disk, and how many offsets it expired.
// rec records the change for the journal.
func apply(s *state, exists *bool, q queued, now time.Time, rec *recorder) (result any, changed bool, expired int) {
	switch m := q.msg.(type) {
	case *Commit:
		nowMs := now.UnixMilli()
		for i, e := range m.Entries {
			if q.codes[i] != 0 {
				continue
			}
			c := e.Committed
			if c.CommitTime == 0 {
				c.CommitTime = nowMs
			}
			s.offsets[e.TopicPartition] = c
			if len(s.pending) > 0 {
				// A commit newer than a pending transactional offset wins over it when
				// the transaction commits (Apache keeps the higher record offset,
				// OffsetMetadataManager.replayEndTransactionMarker): the pending one can
				// no longer take effect, and goes (replaying the set does the same).
				s.dropPendingTP(e.TopicPartition)
			}
			rec.set(e.TopicPartition, c)
		}
		*exists = true
		return &CommitResult{Codes: q.codes}, true, 0
	case *TxnCommit:
		return applyTxnCommit(s, exists, m, q, now, rec)
	case *TxnEnd:
		p := s.pending[m.ProducerID]
		if len(p) == 0 {
			return &Result{}, false, 0 // a retried marker: nothing pending
		}
		if m.Commit {
			for _, f := range fileOffsets(p) { // sorted: equal batches make equal records
				tp := TopicPartition{Topic: string(f.Topic), Partition: f.Partition}
				s.offsets[tp] = f.committed()
				rec.txnApply(tp, f.committed())
			}
		}
		delete(s.pending, m.ProducerID)
		rec.txnDrop(m.ProducerID)
		return &Result{}, true, 0
	case *Delete:
		for _, tp := range m.Partitions {
			if _, ok := s.offsets[tp]; ok {
				delete(s.offsets, tp)
				s.dropPendingTP(tp) // as replaying the del does
				rec.del(tp)
				changed = true
			}
		}
		return &Result{}, changed, 0
	case *DropTopics:
		drop := make(map[string]bool, len(m.Topics))
		for _, t := range m.Topics {
			drop[t] = true
		}
		gone := map[TopicPartition]bool{}
		for tp := range s.offsets {
			if drop[tp.Topic] {
				gone[tp] = true
			}
		}
		// A deleted topic's pending offsets go too (Apache onTopicsDeleted cleans both).
		for _, p := range s.pending {
			for tp := range p {
				if drop[tp.Topic] {
					gone[tp] = true
				}
			}
		}
		for tp := range gone {
			delete(s.offsets, tp)
			s.dropPendingTP(tp)
			rec.del(tp)
			changed = true
		}
		return &Result{}, changed, 0
	case *DeleteAll:
		changed = *exists
		*s, *exists = forgotten(*s), false
		if changed {
			rec.clear()
		}
		return &Result{}, changed, 0
	case *SaveMeta:
		if m.Consumer != nil {
			err := checkDelta(m.Consumer)
			var meta GroupMeta
			if err == nil {
				meta, err = withConsumerDelta(s.meta, m.Meta, m.Consumer)
			}
			if err != nil {
				// The group's own encoding: a broken invariant there, refused here.
				return &Result{ErrorCode: codeWriteFailed}, false, 0
			}
			s.meta = meta
			rec.consumer(meta, m.Consumer, m.Reply.Valid())
		} else {
			s.meta = m.Meta
			rec.meta(m.Meta, m.Reply.Valid())
		}
		if !m.Reply.Valid() {
			// No one to answer, but journaled like any change (see handleChange).
			return nil, true, 0
		}
		*exists = true
		return &Result{}, true, 0
	case *Expire:
		skip := map[TopicPartition]bool{}
		for _, p := range s.pending {
			for tp := range p {
				skip[tp] = true
			}
		}
		gone := expiredOffsets(s.offsets, s.meta, m.Rule, m.Now, skip)
		for _, tp := range gone {
			delete(s.offsets, tp)
			rec.del(tp)
		}
		changed = len(gone) > 0
		// An Empty group left with no offsets is dead and removed (Apache 4.0 writes its
		// group tombstone: GroupCoordinatorShard.cleanupGroupMetadata).
		if m.Rule.Empty && len(s.offsets) == 0 && len(s.pending) == 0 && *exists {
			*s, *exists = forgotten(*s), false
			rec.clear()
			changed = true
		}
		return &Status{Exists: *exists, Meta: s.meta.whole(), Count: len(s.offsets), Pending: s.pendingCount()}, changed, len(gone)
	}
	return nil, false, 0
}

// applyTxnCommit stores a TxnCommit's valid entries in its producer's pending layer,
// unless the group would then hold more than q.limit pending offsets: then none is
// stored and every valid entry gets CodePendingLimit.
func applyTxnCommit(s *state, exists *bool, m *TxnCommit, q queued, now time.Time, rec *recorder) (any, bool, int) {
	codes := q.codes
	added := 0
	for i, e := range m.Entries {
		if codes[i] != 0 {
			continue
		}
		if _, ok := s.pending[m.ProducerID][e.TopicPartition]; !ok {
			added++
		}
	}
	if q.limit > 0 && added > 0 && s.pendingCount()+added > q.limit {
		refused := make([]int16, len(codes))
		for i, c := range codes {
			if refused[i] = c; c == 0 {
				refused[i] = CodePendingLimit
			}
		}
		return &CommitResult{Codes: refused}, false, 0
	}
	nowMs := now.UnixMilli()
	stored := false
	for i, e := range m.Entries {
		if codes[i] != 0 {
			continue
		}
		c := e.Committed
		if c.CommitTime == 0 {
			c.CommitTime = nowMs
		}
		s.setPending(m.ProducerID, e.TopicPartition, c)
		rec.txnSet(m.ProducerID, e.TopicPartition, c)
		stored = true
	}
	if stored {
		*exists = true
	}
	return &CommitResult{Codes: codes}, stored, 0
}

// forgotten is the state of a group that ceased to exist: nothing, under its owner's
// epoch (a group created again goes on from it; replayOps does the same).
func forgotten(s state) state {
	f := newState()
	f.epoch = s.epoch
	return f
}

func resolve(msg any, v any) {
	if v == nil {
		return
	}
	switch m := msg.(type) {
	case *Commit:
		m.Reply.Resolve(v)
	case *TxnCommit:
		m.Reply.Resolve(v)
	case *TxnEnd:
		m.Reply.Resolve(v)
	case *Delete:
		m.Reply.Resolve(v)
	case *DropTopics:
		m.Reply.Resolve(v)
	case *DeleteAll:
		m.Reply.Resolve(v)
	case *SaveMeta:
		m.Reply.Resolve(v)
	case *Expire:
		m.Reply.Resolve(v)
	}
}

// Fail answers a request meant for an offsets actor that never took it with code: a
// Commit with code for each entry.
func Fail(msg any, code int16) { fail(queued{msg: msg}, code) }

// fail answers a request with code (a Commit keeps the codes found before the write).
func fail(q queued, code int16) {
	switch m := q.msg.(type) {
	case *Commit:
		codes := make([]int16, len(m.Entries))
		for i := range codes {
			if q.codes != nil && q.codes[i] != 0 {
				codes[i] = q.codes[i]
			} else {
				codes[i] = code
			}
		}
		m.Reply.Resolve(&CommitResult{Codes: codes})
	case *TxnCommit:
		codes := make([]int16, len(m.Entries))
		for i := range codes {
			if q.codes != nil && q.codes[i] != 0 {
				codes[i] = q.codes[i]
			} else {
				codes[i] = code
			}
		}
		m.Reply.Resolve(&CommitResult{Codes: codes})
	case *TxnEnd:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *Fetch:
		m.Reply.Resolve(&FetchResult{ErrorCode: code})
	case *Stat:
		m.Reply.Resolve(&Status{ErrorCode: code})
	case *Expire:
		m.Reply.Resolve(&Status{ErrorCode: code})
	case *Delete:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *DropTopics:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *DeleteAll:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *SaveMeta:
		m.Reply.Resolve(&Result{ErrorCode: code})
	case *Flush:
		m.Reply.Resolve(&Result{ErrorCode: code})
	}
}
