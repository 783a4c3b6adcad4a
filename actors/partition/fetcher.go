package partition

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// fetchSlot is one partition of a fetch.
type fetchSlot struct {
	topic, index int
	to           *actor.PID
	offset       int64
	maxBytes     int32
	epoch        int32
	res          *Fetched
}

// fetchExpired: max_wait_ms passed. fetchAbandoned: a partition never answered a read.
// Each names its fetch, for a host serving several.
type (
	fetchExpired   struct{ f *fetcher }
	fetchAbandoned struct{ f *fetcher }
)

var watchIDs atomic.Uint64

// fetcher serves one Fetch in its host's actor (a connection, FetchHost). It reads every
// partition; when the answer is smaller than min_bytes it leaves a watch with each
// partition and waits (no actor is blocked: the partitions and the host go on serving)
// until one says its high watermark moved, then reads again, until min_bytes is there or
// max_wait_ms passes. It then answers, drops its watches and tells the host it is done.
// Its messages arrive in the host's mailbox (FetchRun.Offer); ctx is always the host's.
type fetcher struct {
	req   *Fetch
	out   *FetchResult
	slots []fetchSlot
	host  FetchHost
	run   *FetchRun

	ids      map[uint64]int // read promise → slot
	watchID  uint64         // watch ids are watchID+slot
	watching bool
	dirty    bool // data arrived during a read round
	expired  bool
	cancels  []actor.Cancel
	finished bool
}

func (f *fetcher) start(ctx actor.Context) {
	f.watchID = watchIDs.Add(uint64(len(f.slots)+1)) - uint64(len(f.slots))
	f.cancels = append(f.cancels, actor.After(ctx, f.req.MaxWait+fetchAbandonAfter, &fetchAbandoned{f: f}))
	f.watchPartitions()
	f.readAll(ctx)
}

// watchPartitions asks to hear when a partition actor stops (its topic was deleted), so
// a read or watch sent to it is not waited for in vain.
func (f *fetcher) watchPartitions() {
	seen := map[string]bool{}
	for _, s := range f.slots {
		if s.to != nil && !seen[s.to.Id] {
			seen[s.to.Id] = true
			f.host.WatchPartition(s.to)
		}
	}
}

func (f *fetcher) onPartitionStopped(ctx actor.Context, who *actor.PID) {
	if f.finished {
		return
	}
	pending := len(f.ids) > 0
	for i := range f.slots {
		s := &f.slots[i]
		if s.to == nil || s.to.Id != who.Id {
			continue
		}
		for id, slot := range f.ids {
			if slot == i {
				delete(f.ids, id)
			}
		}
		s.to = nil
		s.res = &Fetched{ErrorCode: kerr.NotLeaderForPartition.Code, HighWatermark: -1, LogStartOffset: -1}
	}
	if pending && len(f.ids) == 0 {
		f.roundDone(ctx)
	} else if !pending {
		f.onDataReady(ctx, &dataReady{})
	}
}

func (f *fetcher) readAll(ctx actor.Context) {
	f.ids = map[uint64]int{}
	f.dirty = false
	for i := range f.slots {
		s := &f.slots[i]
		if s.to == nil {
			continue
		}
		p := actor.NewPromise(ctx, ctx.Self())
		f.ids[p.ID()] = i
		ctx.Send(s.to, &readLog{committed: f.req.ReadCommitted, offset: s.offset, maxBytes: s.maxBytes, minOne: true, currentEpoch: s.epoch, reply: p})
	}
	if len(f.ids) == 0 {
		f.finish(ctx)
	}
}

func (f *fetcher) onRead(ctx actor.Context, m *actor.Settled) {
	i, ok := f.ids[m.ID]
	if !ok {
		dropRead(m.Value)
		return
	}
	delete(f.ids, m.ID)
	if plan, ok := m.Value.(*readPlan); ok {
		// The partition planned the read; it is done here, in this turn, so that
		// the partition's mailbox never waits for the disk (readplan.go).
		f.slots[i].res = plan.run(ctx)
	} else {
		f.slots[i].res = m.Value.(*Fetched)
	}
	if len(f.ids) == 0 {
		f.roundDone(ctx)
	}
}

// roundDone decides, once every partition has answered a read, whether to answer, read
// again or wait.
func (f *fetcher) roundDone(ctx actor.Context) {
	var total int64
	failed := false
	for _, s := range f.slots {
		if s.res.ErrorCode != 0 {
			failed = true
		}
		total += int64(len(s.res.Records))
	}
	switch {
	case f.expired || failed || total >= int64(f.req.MinBytes) || f.req.MaxWait <= 0 || total >= int64(f.req.MaxBytes):
		f.finish(ctx)
	case f.dirty:
		f.readAll(ctx)
	default:
		f.watch(ctx)
	}
}

// watch asks each partition to say when its high watermark passes what this fetch has
// seen (or its fetch offset, when that is ahead).
func (f *fetcher) watch(ctx actor.Context) {
	if !f.watching {
		f.watching = true
		f.cancels = append(f.cancels, actor.After(ctx, f.req.MaxWait, &fetchExpired{f: f}))
	}
	for i, s := range f.slots {
		if s.to == nil {
			continue
		}
		seen := s.res.HighWatermark
		if f.req.ReadCommitted {
			seen = s.res.LastStableOffset
		}
		after := max(s.offset, seen)
		ctx.Send(s.to, &watch{committed: f.req.ReadCommitted, id: f.watchID + uint64(i), offset: after, to: ctx.Self()})
	}
}

func (f *fetcher) onDataReady(ctx actor.Context, m *dataReady) {
	if f.finished {
		return
	}
	if i := int(m.id - f.watchID); m.gone && i >= 0 && i < len(f.slots) {
		// The partition stopped: it answers no more reads; the client learns it from
		// NOT_LEADER_OR_FOLLOWER and refreshes its metadata.
		f.slots[i].to = nil
		f.slots[i].res = &Fetched{ErrorCode: kerr.NotLeaderForPartition.Code, HighWatermark: -1, LogStartOffset: -1}
	}
	if len(f.ids) > 0 {
		f.dirty = true
		return
	}
	f.readAll(ctx)
}

// finish answers once: partitions that never answered a read get NOT_LEADER_OR_FOLLOWER
// (retriable), and the total max_bytes is applied in request order; the first batch is
// kept even when alone it is larger, so a consumer always progresses (KIP-74).
func (f *fetcher) finish(ctx actor.Context) {
	if f.finished {
		return
	}
	f.finished = true
	for _, c := range f.cancels {
		c()
	}
	remaining := int64(f.req.MaxBytes)
	took := false
	for i := range f.slots {
		s := &f.slots[i]
		if s.res == nil {
			s.res = &Fetched{ErrorCode: kerr.NotLeaderForPartition.Code, HighWatermark: -1, LogStartOffset: -1}
		}
		if f.watching && s.to != nil {
			ctx.Send(s.to, &unwatch{id: f.watchID + uint64(i)})
		}
		recs := s.res.Records
		if len(recs) > 0 {
			cut := cutBatches(recs, remaining)
			if cut == 0 && !took {
				cut = firstBatch(recs)
			}
			if cut < int64(len(recs)) {
				r := *s.res
				r.Records = recs[:cut]
				s.res = &r
			}
			remaining -= cut
			took = took || cut > 0
		}
		f.out.Topics[s.topic].Partitions[s.index] = s.res
	}
	f.host.FetchDone(f.run)
	f.req.Reply.Resolve(f.out)
}

// FetchHost is an actor that serves fetches in its own Receive (a connection): it passes
// each FetchRun the messages of its mailbox (Offer) and is told when one is done. No
// actor is spawned per fetch.
type FetchHost interface {
	// WatchPartition has the host watch pid (once; it keeps the watch) and pass the
	// *actor.Terminated it gets on to its fetches.
	WatchPartition(pid *actor.PID)
	// FetchDone says run answered (its Reply resolved just after) and wants no more
	// messages.
	FetchDone(run *FetchRun)
}

// FetchRun is one Fetch served by a FetchHost, with the fetcher's rules: every partition
// read, a long poll parked as watches with the partitions (no actor blocked), answered
// at min_bytes or max_wait_ms, a stopped partition NOT_LEADER_OR_FOLLOWER, the total
// max_bytes applied in request order with the first batch whole (KIP-74). Its messages
// arrive in the host's mailbox; it is touched only in the host's Receive.
type FetchRun struct{ f *fetcher }

// StartFetch starts serving req in the host's actor (ctx is the host's), routing its
// partitions by routes (a Catalog's).
func StartFetch(ctx actor.Context, host FetchHost, routes Routes, req *Fetch) *FetchRun {
	out := &FetchResult{Topics: make([]FetchedTopic, len(req.Topics))}
	var slots []fetchSlot
	for i, t := range req.Topics {
		out.Topics[i] = FetchedTopic{Name: t.Name, ID: t.ID, Partitions: make([]*Fetched, len(t.Partitions))}
		for j, p := range t.Partitions {
			r := routes.Find(t.Name, t.ID, p.Partition)
			if r.Topic != "" {
				out.Topics[i].Name, out.Topics[i].ID = r.Topic, r.ID
			}
			s := fetchSlot{topic: i, index: j, to: r.PID, offset: p.Offset, maxBytes: p.MaxBytes, epoch: p.CurrentLeaderEpoch}
			if r.PID == nil {
				s.res = &Fetched{ErrorCode: r.Code, HighWatermark: -1, LogStartOffset: -1}
			}
			slots = append(slots, s)
		}
	}
	f := &fetcher{req: req, out: out, slots: slots, host: host}
	f.run = &FetchRun{f: f}
	f.start(ctx)
	return f.run
}

// Done says whether the run has answered (or was abandoned).
func (r *FetchRun) Done() bool { return r.f.finished }

// Offer hands the run a message of the host's mailbox; true when it was the run's
// (an *actor.Terminated may concern several runs and is never claimed).
func (r *FetchRun) Offer(ctx actor.Context, msg any) bool {
	f := r.f
	if f.finished {
		return false
	}
	switch m := msg.(type) {
	case *actor.Settled:
		if _, ok := f.ids[m.ID]; !ok {
			return false
		}
		f.onRead(ctx, m)
	case *dataReady:
		if m.id < f.watchID || m.id >= f.watchID+uint64(len(f.slots)) {
			return false
		}
		f.onDataReady(ctx, m)
	case *fetchExpired:
		if m.f != f {
			return false
		}
		f.expired = true
		if len(f.ids) == 0 {
			f.readAll(ctx)
		}
	case *fetchAbandoned:
		if m.f != f {
			return false
		}
		f.finish(ctx)
	case *actor.Terminated:
		f.onPartitionStopped(ctx, m.Who)
		return false
	default:
		return false
	}
	return true
}

// Abandon drops the run unanswered (its host is stopping): timers cancelled, the
// partitions' watches taken back.
func (r *FetchRun) Abandon(ctx actor.Context) {
	f := r.f
	if f.finished {
		return
	}
	f.finished = true
	for _, c := range f.cancels {
		c()
	}
	if f.watching {
		for i, s := range f.slots {
			if s.to != nil {
				ctx.Send(s.to, &unwatch{id: f.watchID + uint64(i)})
			}
		}
	}
}

// Unclaimed lets go of what a *actor.Settled that no FetchRun took may hold: a
// partition's read plan for a fetch that ended before it came (its file stays open
// until the plan is run or dropped).
func Unclaimed(m *actor.Settled) { dropRead(m.Value) }

// IsFetchMessage says whether msg is one only a FetchRun takes (a host's Receive
// offers such messages to its runs).
func IsFetchMessage(msg any) bool {
	switch msg.(type) {
	case *dataReady, *fetchExpired, *fetchAbandoned:
		return true
	}
	return false
}

// cutBatches is how many leading bytes of recs hold whole batches within limit.
func cutBatches(recs []byte, limit int64) int64 {
	var n int64
	for n+batchHeaderSize <= int64(len(recs)) {
		h := parseHeader(recs[n:])
		if h.Size() <= 0 || n+h.Size() > limit || n+h.Size() > int64(len(recs)) {
			break
		}
		n += h.Size()
	}
	return n
}

func firstBatch(recs []byte) int64 {
	if len(recs) < batchHeaderSize {
		return int64(len(recs))
	}
	h := parseHeader(recs)
	return min(h.Size(), int64(len(recs)))
}

// fetchAbandonAfter is how long past max_wait_ms a fetch waits for a read that a
// partition restart may have lost.
const fetchAbandonAfter = 10 * time.Second
