package conn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// The data route, which the data handlers (00 Produce, 01 Fetch, 02 ListOffsets,
// 23 OffsetForLeaderEpoch, and 21 DeleteRecords and 35 DescribeLogDirs) share and which
// is their only route: a request's partitions
// are asked of their partition actors directly, named by the published catalogue
// (partition.Catalog), and the answers are gathered here, in the connection actor: no
// hop through the topics manager and no actor spawned per request. The manager is asked
// only about a partition the catalogue does not name (unknownHere). The connection is
// the one sender of its requests' parts, so pipelined produces reach each partition in
// the order they were sent (a mailbox keeps one sender's order).

// partGather is one request's questions to partition actors.
type partGather struct {
	call    *Call
	results []any
	to      []*actor.PID // who owes results[i]; nil when answered or preset
	ids     []uint64     // the promise results[i] is answered through
	left    int
	missing func(i int) any // the answer of a partition that timed out or stopped
	finish  func(results []any) kmsg.Response
	cancel  actor.Cancel
	done    bool
}

// newGather makes a gather of n answers for c; results preset by the caller stay.
func (a *connActor) newGather(c *Call, n int, missing func(int) any, finish func([]any) kmsg.Response) *partGather {
	return &partGather{call: c, results: make([]any, n), to: make([]*actor.PID, n), ids: make([]uint64, n),
		missing: missing, finish: finish}
}

// ask sends partition to its question for g's answer i.
func (a *connActor) ask(g *partGather, i int, to *actor.PID, msg func(actor.Promise) any) {
	pr := a.awaiting.Await(a.ctx, pending{g: g, i: i})
	g.to[i], g.ids[i] = to, pr.ID()
	g.left++
	a.watchPartition(to)
	a.ctx.Send(to, msg(pr))
}

// askOff runs work off the actor (on a goroutine the system owns) for g's answer i: a
// file-system call that may block, gathered with the partitions' answers. The
// connection itself stands as the one who owes it.
func (a *connActor) askOff(g *partGather, i int, work func() any) {
	pr := a.awaiting.Await(a.ctx, pending{g: g, i: i})
	g.to[i], g.ids[i] = a.ctx.Self(), pr.ID()
	g.left++
	run := func() { pr.Resolve(work()) }
	if !a.env.System.Go(run) {
		run()
	}
}

// start waits for g's answers, at most timeout; with none asked it finishes at once.
func (a *connActor) start(g *partGather, timeout time.Duration) {
	if g.left == 0 {
		a.finishGather(g)
		return
	}
	if a.gathers == nil {
		a.gathers = map[*partGather]struct{}{}
	}
	a.gathers[g] = struct{}{}
	g.cancel = actor.After(a.ctx, timeout, &gatherExpired{g: g})
}

// watchPartition asks to hear when a partition actor stops (its topic deleted), once
// per connection: a question sent to it is then not waited for in vain.
func (a *connActor) watchPartition(pid *actor.PID) {
	if _, ok := a.watched[pid.Id]; ok {
		return
	}
	if a.watched == nil {
		a.watched = map[string]*actor.PID{}
	}
	a.watched[pid.Id] = pid
	a.ctx.Watch(pid)
}

func (a *connActor) onGatherAnswer(g *partGather, i int, v any) {
	if g.done || g.to[i] == nil {
		return
	}
	g.to[i] = nil
	g.results[i] = v
	if g.left--; g.left == 0 {
		a.finishGather(g)
	}
}

// onPartitionStopped gives the questions a stopped partition still owed their missing
// answer.
func (a *connActor) onPartitionStopped(who *actor.PID) {
	delete(a.watched, who.Id)
	for g := range a.gathers {
		for i, to := range g.to {
			if to != nil && to.Id == who.Id {
				a.awaiting.Take(&actor.Settled{ID: g.ids[i]})
				g.to[i] = nil
				g.results[i] = g.missing(i)
				g.left--
			}
		}
		if g.left == 0 {
			a.finishGather(g)
		}
	}
}

// finishGather answers g's call once: what never came gets its missing answer.
func (a *connActor) finishGather(g *partGather) {
	if g.done {
		return
	}
	g.done = true
	delete(a.gathers, g)
	if g.cancel != nil {
		g.cancel()
	}
	for i, to := range g.to {
		if to != nil {
			a.awaiting.Take(&actor.Settled{ID: g.ids[i]})
			g.to[i] = nil
			g.results[i] = g.missing(i)
		}
	}
	a.convertAndComplete(g.call, func(any) kmsg.Response { return g.finish(g.results) }, nil)
}

// askOffsets asks each partition of topics one question from the connection
// (ListOffsets, OffsetForLeaderEpoch: msg builds it), with none(code) for a partition it
// cannot ask: the catalogue's code, or in a cluster the topics manager's once it has read
// the catalogue again (unknownHere); none(REQUEST_TIMED_OUT) for a partition that does
// not answer within DefaultRequestTimeout or stops first. respond builds the response
// from one answer per partition, in request order.
func askOffsets[T any](c *Call, topics []partition.OffsetTopic, none func(code int16) T,
	msg func(q partition.OffsetQuery, reply actor.Promise) any, respond func(flat []T) kmsg.Response) {
	routes := c.Env.Catalog.Routes()
	n := 0
	for _, t := range topics {
		n += len(t.Partitions)
	}
	a := c.conn
	g := a.newGather(c, n, func(int) any { return none(kerr.RequestTimedOut.Code) }, func(results []any) kmsg.Response {
		flat := make([]T, len(results))
		for i, v := range results {
			flat[i] = v.(T)
		}
		return respond(flat)
	})
	i := 0
	for _, t := range topics {
		for _, q := range t.Partitions {
			r := routes.Find(t.Name, partition.TopicID{}, q.Partition)
			switch {
			case r.PID == nil && unknownHere(c, r.Code):
				ref := []partition.PartitionRef{{Topic: t.Name, Partition: q.Partition}}
				a.ask(g, i, c.Env.Topics, func(reply actor.Promise) any {
					return partition.ResolveMessage(ref, func(codes []int16) any { return none(codes[0]) }, reply)
				})
			case r.PID == nil:
				g.results[i] = none(r.Code)
			default:
				a.ask(g, i, r.PID, func(reply actor.Promise) any { return msg(q, reply) })
			}
			i++
		}
	}
	a.start(g, partition.DefaultRequestTimeout)
}

// startFetch serves f in this actor (partition.FetchRun).
func (a *connActor) startFetch(f *partition.Fetch) {
	run := partition.StartFetch(a.ctx, a, a.env.Catalog.Routes(), f)
	if !run.Done() { // a fetch of nothing known is answered at once
		if a.fetches == nil {
			a.fetches = map[*partition.FetchRun]struct{}{}
		}
		a.fetches[run] = struct{}{}
	}
}

// WatchPartition is partition.FetchHost's: the connection's watch, kept.
func (a *connActor) WatchPartition(pid *actor.PID) { a.watchPartition(pid) }

// FetchDone is partition.FetchHost's.
func (a *connActor) FetchDone(run *partition.FetchRun) { delete(a.fetches, run) }

// offerFetches hands msg to the fetches being served until one takes it; false when
// none did.
func (a *connActor) offerFetches(msg any) bool {
	for run := range a.fetches {
		if run.Offer(a.ctx, msg) {
			return true
		}
	}
	return false
}

// stopGathers drops every gather, fetch and watch of a stopping connection.
func (a *connActor) stopGathers() {
	for run := range a.fetches {
		run.Abandon(a.ctx)
	}
	a.fetches = nil
	for g := range a.gathers {
		g.done = true
		if g.cancel != nil {
			g.cancel()
		}
	}
	a.gathers = nil
	for _, pid := range a.watched {
		a.ctx.Unwatch(pid)
	}
	a.watched = nil
}
