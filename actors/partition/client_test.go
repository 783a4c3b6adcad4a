package partition

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// client stands where a connection stands on the data route (actors/conn/route.go): it
// sends each question to the partition actor the published catalogue names, hearing when
// that actor stops, and serves fetches in its own actor as their FetchHost. The harness
// asks the partitions only through it, as the broker's connections do.
type client struct {
	ctx     actor.Context // the current turn's, for the FetchHost calls made in it
	runs    map[*FetchRun]struct{}
	watched map[string]bool
}

// askPartition sends msg, made around a promise, to the partition actor to; reply gets
// its answer, or missing when the actor stops or does not answer within timeout.
type askPartition struct {
	to      *actor.PID
	msg     func(actor.Promise) any
	missing any
	timeout time.Duration
	reply   actor.Promise
}

// serveFetch starts serving req by routes; started is closed once its partitions are
// routed and asked.
type serveFetch struct {
	routes  Routes
	req     *Fetch
	started chan struct{}
}

func (c *client) Receive(ctx actor.Context) {
	c.ctx = ctx
	switch m := ctx.Message().(type) {
	case *askPartition:
		ps := actor.Gather(ctx, 1, m.timeout, []*actor.PID{m.to}, func(int) any { return m.missing },
			func(v []any) { m.reply.Resolve(v[0]) })
		ctx.Send(m.to, m.msg(ps[0]))
	case *serveFetch:
		run := StartFetch(ctx, c, m.routes, m.req)
		if !run.Done() {
			c.runs[run] = struct{}{}
		}
		close(m.started)
	case *actor.Terminated:
		delete(c.watched, m.Who.Id)
		for run := range c.runs {
			run.Offer(ctx, m)
		}
	case *actor.Stopping:
		for run := range c.runs {
			run.Abandon(ctx)
		}
	default:
		for run := range c.runs {
			if run.Offer(ctx, m) {
				return
			}
		}
	}
}

// WatchPartition is FetchHost's: one watch per partition actor, kept.
func (c *client) WatchPartition(pid *actor.PID) {
	if !c.watched[pid.Id] {
		c.watched[pid.Id] = true
		c.ctx.Watch(pid)
	}
}

// FetchDone is FetchHost's.
func (c *client) FetchDone(run *FetchRun) { delete(c.runs, run) }

func newClient() actor.Actor {
	return &client{runs: map[*FetchRun]struct{}{}, watched: map[string]bool{}}
}

// unknown says whether a partition the catalogue answered code for may exist all the
// same (conn's unknownHere): in a cluster another broker writes the catalogue.
func (h *harness) unknown(code int16) bool {
	return h.cfg.Cluster != nil && (code == kerr.UnknownTopicOrPartition.Code || code == kerr.UnknownTopicID.Code)
}

// ask routes one partition's question as a connection does: to its actor, through the
// client; none(code) is the answer for a partition with no actor here, asked of the
// manager first when it may exist all the same (ResolveMessage).
func (h *harness) ask(topic string, part int32, timeout time.Duration, msg func(actor.Promise) any, none func(code int16) any) any {
	h.t.Helper()
	r := h.cfg.Catalog.Routes().Find(topic, TopicID{}, part)
	switch {
	case r.PID == nil && h.unknown(r.Code):
		ref := []PartitionRef{{Topic: topic, Partition: part}}
		return request[any](h, func(p actor.Promise) any {
			return ResolveMessage(ref, func(codes []int16) any { return none(codes[0]) }, p)
		})
	case r.PID == nil:
		return none(r.Code)
	}
	w := h.sys.NewWaiter()
	h.sys.Send(h.client, &askPartition{to: r.PID, msg: msg, missing: none(kerr.RequestTimedOut.Code), timeout: timeout, reply: w.Promise})
	v, ok := w.Wait(5 * time.Second)
	if !ok {
		h.t.Fatal("no answer")
	}
	return v
}

// sendAppend sends one batch to partition part of topic through the client, without
// waiting: the answer comes to the returned waiter.
func (h *harness) sendAppend(topic string, part int32, batch []byte) *actor.Waiter {
	h.t.Helper()
	r := h.cfg.Catalog.Routes().Find(topic, TopicID{}, part)
	if r.PID == nil {
		h.t.Fatalf("no partition actor for %s-%d: %s", topic, part, kerr.ErrorForCode(r.Code))
	}
	w := h.sys.NewWaiter()
	h.sys.Send(h.client, &askPartition{to: r.PID, msg: func(p actor.Promise) any { return AppendMessage(batch, p) },
		missing: &Produced{ErrorCode: kerr.RequestTimedOut.Code, BaseOffset: -1, LogStartOffset: -1}, timeout: ProduceTimeout(0), reply: w.Promise})
	return w
}

func (h *harness) produce(topic string, part int32, batch []byte) *Produced {
	h.t.Helper()
	return h.ask(topic, part, ProduceTimeout(0), func(p actor.Promise) any { return AppendMessage(batch, p) },
		func(code int16) any { return &Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1} }).(*Produced)
}

func (h *harness) listOffset(topic string, part int32, timestamp int64) *Listed {
	h.t.Helper()
	q := OffsetQuery{Partition: part, Timestamp: timestamp, CurrentLeaderEpoch: -1}
	return h.ask(topic, part, DefaultRequestTimeout, func(p actor.Promise) any { return ListOffsetMessage(q, p) },
		func(code int16) any { return &Listed{ErrorCode: code, Timestamp: -1, Offset: -1, LeaderEpoch: -1} }).(*Listed)
}

func (h *harness) epochEnd(topic string, part, epoch int32) *EpochEnd {
	h.t.Helper()
	q := OffsetQuery{Partition: part, CurrentLeaderEpoch: -1, LeaderEpoch: epoch}
	return h.ask(topic, part, DefaultRequestTimeout, func(p actor.Promise) any { return EpochEndMessage(q, p) },
		func(code int16) any { return &EpochEnd{ErrorCode: code, LeaderEpoch: -1, EndOffset: -1} }).(*EpochEnd)
}

// startFetch serves f in the client as a connection does: the partitions the catalogue
// does not name and that may exist are asked of the manager first (it re-reads the
// catalogue), then f is routed by the catalogue it publishes. It returns once f's
// partitions are asked; f's answer comes to the returned waiter.
func (h *harness) startFetch(f *Fetch) *actor.Waiter {
	h.t.Helper()
	var unknown []PartitionRef
	routes := h.cfg.Catalog.Routes()
	for _, t := range f.Topics {
		for _, p := range t.Partitions {
			if r := routes.Find(t.Name, t.ID, p.Partition); r.PID == nil && h.unknown(r.Code) {
				unknown = append(unknown, PartitionRef{Topic: t.Name, ID: t.ID, Partition: p.Partition})
			}
		}
	}
	if len(unknown) > 0 {
		request[any](h, func(p actor.Promise) any { return ResolveMessage(unknown, func([]int16) any { return nil }, p) })
	}
	w := h.sys.NewWaiter()
	f.Reply = w.Promise
	started := make(chan struct{})
	h.sys.Send(h.client, &serveFetch{routes: h.cfg.Catalog.Routes(), req: f, started: started})
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		h.t.Fatal("fetch not started")
	}
	return w
}

func (h *harness) fetchRequest(f *Fetch) *FetchResult {
	h.t.Helper()
	v, ok := h.startFetch(f).Wait(5 * time.Second)
	if !ok {
		h.t.Fatal("no answer")
	}
	return v.(*FetchResult)
}

func oneFetch(topic string, part int32, offset int64, wait time.Duration, minBytes int32, epoch int32) *Fetch {
	return &Fetch{MaxWait: wait, MinBytes: minBytes, MaxBytes: 1 << 20, Topics: []FetchTopic{{Name: topic,
		Partitions: []FetchPartition{{Partition: part, Offset: offset, MaxBytes: 1 << 20, CurrentLeaderEpoch: epoch}}}}}
}

func (h *harness) fetch(topic string, part int32, offset int64, wait time.Duration, minBytes int32) *Fetched {
	h.t.Helper()
	return h.fetchRequest(oneFetch(topic, part, offset, wait, minBytes, -1)).Topics[0].Partitions[0]
}

func (h *harness) fetchEpoch(topic string, part int32, offset int64, epoch int32) *Fetched {
	h.t.Helper()
	return h.fetchRequest(oneFetch(topic, part, offset, 0, 0, epoch)).Topics[0].Partitions[0]
}
