package partition

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// The data plane's routing: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and the
// existence check of OffsetCommit, fanned out to the partition actors and gathered.

func (m *manager) handleExist(ctx actor.Context, e *PartitionsExist) *Existence {
	var names []string
	beyond := false
	for _, tp := range e.Partitions {
		if t := m.topics[tp.Topic]; t == nil {
			names = append(names, tp.Topic)
		} else if tp.Partition >= t.meta.Partitions {
			beyond = true // grown by the writer, perhaps
		}
	}
	m.readOnMiss(ctx, names, nil, beyond)
	out := &Existence{Exists: make([]bool, len(e.Partitions))}
	for i, tp := range e.Partitions {
		t := m.topics[tp.Topic]
		out.Exists[i] = t != nil && tp.Partition >= 0 && tp.Partition < t.meta.Partitions
	}
	return out
}

// lookup finds a partition by topic name, or by id when the name is empty (v13+).
func (m *manager) lookup(name string, id TopicID, p int32) (*topicState, *actor.PID, int16) {
	t := m.topics[name]
	if name == "" && id != (TopicID{}) {
		t = m.byID[id]
		if t == nil {
			return nil, nil, kerr.UnknownTopicID.Code
		}
	}
	if t != nil && t.deleting {
		return nil, nil, kerr.UnknownTopicOrPartition.Code
	}
	if t == nil || p < 0 || p >= int32(len(t.pids)) {
		return t, nil, kerr.UnknownTopicOrPartition.Code
	}
	if t.pids[p] == nil {
		return t, nil, kerr.NotLeaderForPartition.Code // led by another broker
	}
	return t, t.pids[p], 0
}

// readUnknown re-reads the catalogue another broker writes (readOnMiss) when refs name
// a topic, a topic id or a partition this broker does not know: a partition of a topic
// created through another broker is then routed, or answered NOT_LEADER_OR_FOLLOWER,
// instead of UNKNOWN_TOPIC_OR_PARTITION until the next catalogue tick.
func (m *manager) readUnknown(ctx actor.Context, refs []PartitionRef) {
	var names []string
	var ids []TopicID
	beyond := false
	for _, r := range refs {
		var t *topicState
		if r.Topic == "" && r.ID != (TopicID{}) {
			if t = m.byID[r.ID]; t == nil {
				ids = append(ids, r.ID)
			}
		} else if t = m.topics[r.Topic]; t == nil {
			names = append(names, r.Topic)
		}
		if t != nil && r.Partition >= t.meta.Partitions {
			beyond = true
		}
	}
	if len(names) > 0 || len(ids) > 0 || beyond {
		m.readOnMiss(ctx, names, ids, beyond)
	}
}

// handleResolve answers a connection's partitions that the published catalogue did not
// name (ResolveMessage). One that exists after the re-read is NOT_LEADER_OR_FOLLOWER
// even when its actor now runs here: the request is not sent on, so a later request of
// the same connection, routed directly, never overtakes it.
func (m *manager) handleResolve(ctx actor.Context, r *resolveUnknown) {
	m.readUnknown(ctx, r.parts)
	codes := make([]int16, len(r.parts))
	for i, p := range r.parts {
		if _, _, code := m.lookup(p.Topic, p.ID, p.Partition); code != 0 {
			codes[i] = code
		} else {
			codes[i] = kerr.NotLeaderForPartition.Code
		}
	}
	r.reply.Resolve(r.answer(codes))
}

// nested maps flat results back to topics × partitions.
func nested[T any](sizes []int, flat []any) [][]T {
	out := make([][]T, len(sizes))
	k := 0
	for i, n := range sizes {
		out[i] = make([]T, n)
		for j := 0; j < n; j++ {
			out[i][j] = flat[k].(T)
			k++
		}
	}
	return out
}

// spawnCollect gathers the answers to asks (results holds the preset ones, where a.to
// is nil) and calls finish with all of them, in a short-lived child (actor.Gather). The
// manager itself sends each partition its part, in order, so that the batches of
// pipelined produce requests reach a partition in the order they were sent: an
// idempotent producer's sequence numbers depend on it. A partition that does not answer
// within timeout (a restart lost the message), or that stops first (its topic deleted),
// gets missing(i).
func (m *manager) spawnCollect(ctx actor.Context, asks []ask, results []any, timeout time.Duration, missing func(int) any, finish func([]any)) {
	var idx []int
	var watch []*actor.PID
	for i, a := range asks {
		if a.to != nil {
			idx = append(idx, i)
			watch = append(watch, a.to)
		}
	}
	if len(idx) == 0 {
		finish(results)
		return
	}
	ps := actor.Gather(ctx, len(idx), timeout, watch, func(k int) any { return missing(idx[k]) }, func(v []any) {
		for k, x := range v {
			results[idx[k]] = x
		}
		finish(results)
	})
	for k, i := range idx {
		ctx.Send(asks[i].to, asks[i].msg(ps[k]))
	}
}

func (m *manager) handleProduce(ctx actor.Context, pr *Produce) {
	var refs []PartitionRef
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			refs = append(refs, PartitionRef{Topic: t.Name, ID: t.ID, Partition: p.Partition})
		}
	}
	m.readUnknown(ctx, refs)
	var asks []ask
	var results []any
	sizes := make([]int, len(pr.Topics))
	for i, t := range pr.Topics {
		sizes[i] = len(t.Partitions)
		for _, p := range t.Partitions {
			ts, pid, code := m.lookup(t.Name, t.ID, p.Partition)
			var preset any
			var batch *Batch
			if pid != nil {
				// Validated before it reaches the partition, as a connection does.
				route := Route{PID: pid, Topic: ts.meta.Name, partition: p.Partition,
					maxMessageBytes: m.maxMessageBytes(ts.meta), met: m.cfg.Metrics, log: m.cfg.Log}
				if batch, preset = route.ValidateBatch(p.Records); batch == nil {
					pid = nil
				}
			} else {
				preset = &Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1}
			}
			asks = append(asks, ask{to: pid, msg: func(reply actor.Promise) any {
				return &appendBatch{batch: batch, reply: reply}
			}})
			results = append(results, preset)
		}
	}
	timeout := max(pr.Timeout, time.Second)
	if pr.Timeout <= 0 {
		timeout = m.cfg.RequestTimeout
	}
	reply := pr.Reply
	m.spawnCollect(ctx, asks, results, timeout,
		func(int) any {
			return &Produced{ErrorCode: kerr.RequestTimedOut.Code, BaseOffset: -1, LogStartOffset: -1}
		},
		func(flat []any) { reply.Resolve(&ProduceResult{Topics: nested[*Produced](sizes, flat)}) })
}

func (m *manager) handleFetch(ctx actor.Context, f *Fetch) {
	var refs []PartitionRef
	for _, t := range f.Topics {
		for _, p := range t.Partitions {
			refs = append(refs, PartitionRef{Topic: t.Name, ID: t.ID, Partition: p.Partition})
		}
	}
	m.readUnknown(ctx, refs)
	out := &FetchResult{Topics: make([]FetchedTopic, len(f.Topics))}
	var slots []fetchSlot
	for i, t := range f.Topics {
		out.Topics[i] = FetchedTopic{Name: t.Name, ID: t.ID, Partitions: make([]*Fetched, len(t.Partitions))}
		for j, p := range t.Partitions {
			ts, pid, code := m.lookup(t.Name, t.ID, p.Partition)
			if ts != nil {
				out.Topics[i].Name, out.Topics[i].ID = ts.meta.Name, ts.id
			}
			s := fetchSlot{topic: i, index: j, to: pid, offset: p.Offset, maxBytes: p.MaxBytes, epoch: p.CurrentLeaderEpoch}
			if pid == nil {
				s.res = &Fetched{ErrorCode: code, HighWatermark: -1, LogStartOffset: -1}
			}
			slots = append(slots, s)
		}
	}
	fr := &fetcher{req: f, out: out, slots: slots}
	actor.Spawn(ctx, actor.PropsOf(func() actor.Actor { return fr }))
}

func (m *manager) offsetAsks(ctx actor.Context, topics []OffsetTopic, build func(q OffsetQuery, reply actor.Promise) any, unknown func(code int16) any) ([]ask, []any, []int) {
	var refs []PartitionRef
	for _, t := range topics {
		for _, q := range t.Partitions {
			refs = append(refs, PartitionRef{Topic: t.Name, Partition: q.Partition})
		}
	}
	m.readUnknown(ctx, refs)
	var asks []ask
	var results []any
	sizes := make([]int, len(topics))
	for i, t := range topics {
		sizes[i] = len(t.Partitions)
		for _, q := range t.Partitions {
			_, pid, code := m.lookup(t.Name, TopicID{}, q.Partition)
			q := q
			asks = append(asks, ask{to: pid, msg: func(reply actor.Promise) any { return build(q, reply) }})
			var preset any
			if pid == nil {
				preset = unknown(code)
			}
			results = append(results, preset)
		}
	}
	return asks, results, sizes
}

func (m *manager) handleListOffsets(ctx actor.Context, l *ListOffsets) {
	none := func(code int16) any { return &Listed{ErrorCode: code, Timestamp: -1, Offset: -1, LeaderEpoch: -1} }
	asks, results, sizes := m.offsetAsks(ctx, l.Topics, func(q OffsetQuery, reply actor.Promise) any {
		return &listOffset{timestamp: q.Timestamp, currentEpoch: q.CurrentLeaderEpoch, reply: reply}
	}, none)
	reply := l.Reply
	m.spawnCollect(ctx, asks, results, m.cfg.RequestTimeout,
		func(int) any { return none(kerr.RequestTimedOut.Code) },
		func(flat []any) { reply.Resolve(&ListOffsetsResult{Topics: nested[*Listed](sizes, flat)}) })
}

func (m *manager) handleEpochEnds(ctx actor.Context, e *EpochEnds) {
	none := func(code int16) any { return &EpochEnd{ErrorCode: code, LeaderEpoch: -1, EndOffset: -1} }
	asks, results, sizes := m.offsetAsks(ctx, e.Topics, func(q OffsetQuery, reply actor.Promise) any {
		return &epochEndOf{epoch: q.LeaderEpoch, currentEpoch: q.CurrentLeaderEpoch, reply: reply}
	}, none)
	reply := e.Reply
	m.spawnCollect(ctx, asks, results, m.cfg.RequestTimeout,
		func(int) any { return none(kerr.RequestTimedOut.Code) },
		func(flat []any) { reply.Resolve(&EpochEndsResult{Topics: nested[*EpochEnd](sizes, flat)}) })
}
