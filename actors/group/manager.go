package group

import (
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
	"kaas/logs"
)

// ManagerConfig is everything the groups manager needs.
type ManagerConfig struct {
	Settings Settings
	// Offsets makes the offsets actor of one group (a child of its group actor).
	Offsets func(group string) *actor.Props
	// New, in a broker alone, reports whether a group never had state, as its actor is
	// spawned (offsets.Fresh.Take: true at most once per group). Such a group's actor
	// loads nothing, and its offsets actor, made by NewOffsets (offsets.Kind.FreshProps),
	// starts empty when first needed: its first commit goes straight to a journal batch.
	// Nil (a cluster): every group loads.
	New        func(group string) bool
	NewOffsets func(group string) *actor.Props
	// ListGroupIDs lists the groups that have an offsets file. It runs off the manager's
	// goroutine (a directory of 100,000 files takes a while to read).
	ListGroupIDs func() ([]string, error)
	// ReadMeta reads the meta in a group's file (nil: none), off the manager's goroutine,
	// for groups listed while their actor is not running.
	ReadMeta func(group string) (offsets.GroupMeta, bool, error)
	// DropTombstones removes the tombstones of deleted groups older than before (in a
	// cluster; nil: none kept), off the manager's goroutine, on each retention sweep.
	DropTombstones func(before time.Time) (int, error)
	Log            zerolog.Logger
	// NewID makes member-id UUIDs (uuid.NewString when nil).
	NewID func() string
	// MaxRestarts in RestartWindow: a group actor that panics more often is stopped (and
	// started afresh on its next request). Defaults: 10 in 10 s.
	MaxRestarts   int
	RestartWindow time.Duration
	// Owns, in a cluster, reports whether this broker serves group g now (the ownership
	// controller's state). A request for any other group is answered NOT_COORDINATOR
	// without an actor, and no actor is started for it. Nil: every group.
	Owns func(g string) bool
	// Restarts and OffsetsRestarts, when set, count group and offsets actors restarted
	// after a panic.
	Restarts, OffsetsRestarts prometheus.Counter
}

// Release stops every live group for which Keep is false (their offsets actors write
// their files) and resolves Reply with nil once all of them have stopped. The ownership
// controller sends it before it lets a peer take those groups.
type Release struct {
	Keep  func(g string) bool
	Reply actor.Promise
}

// Halt prepares a broker alone's stop, where the group and offsets actors are left where
// they stand (actor.System.Halt) instead of being stopped one by one: the offsets
// journal holds every acknowledged change their files lack, and the next start replays
// it. The manager answers every request it holds or receives from now on
// NOT_COORDINATOR, stops its timer and tells each group that has had members (a
// request other than the offsets ones routed to it: only such a group holds a JoinGroup
// or SyncGroup for other members or a timer) to answer its waiters (halt). A commit in
// flight in any group goes on to the journal and is answered once durable. Reply is
// resolved with the number of groups told.
type Halt struct {
	Reply actor.Promise
}

// ManagerProps makes the groups manager: it routes every group request to the group's
// actor (spawned on first touch as its child, named after the quoted group id), stops
// idle groups, restarts panicking ones, fans batches out, lists groups (live and on-disk
// only) and runs offset expiry for groups that exist only on disk.
func ManagerProps(cfg ManagerConfig) *actor.Props {
	if cfg.MaxRestarts == 0 {
		cfg.MaxRestarts = 10
	}
	if cfg.RestartWindow == 0 {
		cfg.RestartWindow = 10 * time.Second
	}
	log := cfg.Log.With().Str("actor", "groups").Logger()
	strategy := actor.RestartChildren(cfg.MaxRestarts, cfg.RestartWindow, func(reason any) {
		log.Warn().Interface("reason", reason).Msg("group_actor_failed_restarting")
		if cfg.Restarts != nil {
			cfg.Restarts.Inc()
		}
	})
	kind := &Config{Settings: cfg.Settings, Log: cfg.Log, NewID: cfg.NewID, OffsetsRestarts: cfg.OffsetsRestarts,
		supervisor: offsetsSupervisor(cfg.Log, cfg.OffsetsRestarts)}
	if kind.NewID == nil {
		kind.NewID = uuid.NewString
	}
	return actor.PropsOf(func() actor.Actor { return &manager{cfg: cfg, log: log, kind: kind} }, actor.WithSupervisor(strategy))
}

// entry is one live group actor.
type entry struct {
	id       string
	pid      *actor.PID
	stopping bool      // asked to stop if idle, or stopping: requests wait in queue
	released bool      // told to go (release): it stops whatever its idleReply says
	members  bool      // a request other than the offsets ones was routed to it (mayPark)
	queue    []Request // requests for the group while it stops; a fresh actor gets them
}

type manager struct {
	cfg ManagerConfig
	log zerolog.Logger
	// kind is what every group's actor is made with but its id and offsets actor
	// (groupProps).
	kind *Config

	groups  map[string]*entry
	byPID   map[string]*entry
	dormant map[string]dormant // on-disk groups with no actor (passivated, or read for ListGroups)
	ops     actor.Pending[func(any)]
	sweep   []string   // groups on disk only, still to be woken for offset expiry
	drops   []*dropJob // deleted topics whose offsets are still being dropped
	tick    actor.Cancel
	closing bool // the manager is stopping: its children stop with it
	halted  bool // Halt: the broker stops and leaves the groups where they stand
	// releases wait for the groups they stopped.
	releases []*releaseJob
}

type releaseJob struct {
	waiting map[string]bool // pid ids
	reply   actor.Promise
}

// Manager-internal messages.
type (
	// stopIfIdle asks a group that wanted to passivate whether it still may. Reply: *idleReply to the parent.
	stopIfIdle struct{}
	// idleReply answers stopIfIdle.
	idleReply struct {
		pid          *actor.PID
		idle         bool
		exists       bool
		protocolType string
		consumer     bool // a consumer-protocol group (KIP-848)
	}
	sweepTick struct{}
	// countLive asks how many group actors are live (tests and diagnostics). Reply: int.
	countLive struct{ reply actor.Promise }
	sweepMore struct{}
	// dropMore wakes the next batch of on-disk groups for a dropJob.
	dropMore struct{ job *dropJob }
	fileIDs  struct {
		ids   []string
		err   error
		types map[string]dormant // what ListGroups shows of groups read from their files
	}
)

// errNotOwned: the group is another broker's (cluster).
var errNotOwned = errors.New("group not owned by this broker")

// sweepBatch is how many on-disk-only groups one turn of the sweep wakes.
const sweepBatch = 256

func (mg *manager) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		mg.groups = map[string]*entry{}
		mg.byPID = map[string]*entry{}
		mg.dormant = map[string]dormant{}
		mg.ops = actor.Pending[func(any)]{}
		if d := mg.cfg.Settings.RetentionCheck; d > 0 {
			mg.tick = actor.Every(ctx, d, &sweepTick{})
		}
	case *actor.Stopping, *actor.Restarting:
		mg.closing = true
		if mg.tick != nil {
			mg.tick()
		}
		for _, e := range mg.groups {
			for _, r := range e.queue {
				r.fail(kerr.NotCoordinator.Code)
			}
			e.queue = nil
		}
	case Request:
		mg.route(ctx, m)
	case *Batch:
		mg.handleBatch(ctx, m)
	case *ListGroups:
		mg.handleList(ctx, m)
	case *passivate:
		mg.onPassivate(ctx, m)
	case *idleReply:
		mg.onIdleReply(ctx, m)
	case *actor.Terminated:
		mg.onTerminated(ctx, m)
	case *actor.Settled:
		if then, ok := mg.ops.Take(m); ok {
			then(m.Value)
		}
	case *sweepTick:
		mg.onSweepTick(ctx)
	case *sweepMore:
		mg.sweepSome(ctx)
	case *TopicsDeleted:
		mg.onTopicsDeleted(ctx, m)
	case *dropMore:
		mg.dropSome(ctx, m.job)
	case *countLive:
		m.reply.Resolve(len(mg.groups))
	case *Release:
		mg.onRelease(ctx, m)
	case *Halt:
		mg.onHalt(ctx, m)
	}
}

// onHalt: the broker (alone) stops and leaves its groups' actors where they stand (Halt).
func (mg *manager) onHalt(ctx actor.Context, m *Halt) {
	mg.halted = true
	if mg.tick != nil {
		mg.tick()
		mg.tick = nil
	}
	mg.sweep, mg.drops = nil, nil
	told := 0
	for _, e := range mg.groups {
		for _, r := range e.queue {
			r.fail(kerr.NotCoordinator.Code)
		}
		e.queue = nil
		if e.members {
			ctx.Send(e.pid, &halt{})
			told++
		}
	}
	mg.log.Info().Int("groups", len(mg.groups)).Int("groups_with_members", told).Msg("groups_halted")
	m.Reply.Resolve(told)
}

// mayPark reports whether r may be one a group holds for other members or a timer
// rather than for a write (Halt): anything but the offsets requests and the manager's
// own, whose answers wait only for the group's offsets actor and its journal.
func mayPark(r Request) bool {
	switch r.(type) {
	case *CommitOffsets, *FetchOffsets, *DeleteOffsets, *TxnCommitOffsets, *TxnOffsetMarker,
		*DescribeGroup, *listEntry, *expireNow, *dropTopics:
		return false
	}
	return true
}

// ask makes a promise to the manager itself; then runs with its value.
func (mg *manager) ask(ctx actor.Context, then func(any)) actor.Promise {
	return mg.ops.Await(ctx, then)
}

// onRelease stops the groups m does not keep.
func (mg *manager) onRelease(ctx actor.Context, m *Release) {
	job := &releaseJob{waiting: map[string]bool{}, reply: m.Reply}
	for id, e := range mg.groups {
		if m.Keep(id) {
			continue
		}
		job.waiting[e.pid.Id] = true
		mg.release(ctx, e)
	}
	for id := range mg.dormant {
		if !m.Keep(id) {
			delete(mg.dormant, id)
		}
	}
	if len(job.waiting) == 0 {
		m.Reply.Resolve(nil)
		return
	}
	mg.log.Info().Int("groups", len(job.waiting)).Msg("groups_released")
	mg.releases = append(mg.releases, job)
}

// released notes that the group actor pid stopped, for the releases waiting for it.
func (mg *manager) released(pid string) {
	kept := mg.releases[:0]
	for _, job := range mg.releases {
		delete(job.waiting, pid)
		if len(job.waiting) == 0 {
			job.reply.Resolve(nil)
			continue
		}
		kept = append(kept, job)
	}
	mg.releases = kept
}

// release tells e's actor to go: it answers its waiters, has its offsets actor write
// what it accepted, and stops (onTerminated follows). Requests for it meanwhile wait in
// e.queue for a fresh actor.
func (mg *manager) release(ctx actor.Context, e *entry) {
	if e.released {
		return
	}
	e.stopping, e.released = true, true
	ctx.Send(e.pid, &release{})
}

func (mg *manager) route(ctx actor.Context, r Request) {
	if mg.halted {
		r.fail(kerr.NotCoordinator.Code)
		return
	}
	id := r.GroupID()
	if mg.cfg.Owns != nil && !mg.cfg.Owns(id) {
		r.fail(kerr.NotCoordinator.Code)
		return
	}
	e := mg.groups[id]
	if e == nil {
		var err error
		if e, err = mg.spawn(ctx, id); err != nil {
			mg.log.Error().Err(err).Str("group", logs.ID(id)).Msg("group_actor_not_started")
			r.fail(notAvailable)
			return
		}
	}
	mg.routeTo(ctx, e, r)
}

func (mg *manager) spawn(ctx actor.Context, id string) (*entry, error) {
	if mg.cfg.Owns != nil && !mg.cfg.Owns(id) {
		return nil, errNotOwned
	}
	fresh := mg.cfg.New != nil && mg.cfg.NewOffsets != nil && mg.cfg.New(id)
	off := mg.cfg.Offsets
	if fresh {
		off = mg.cfg.NewOffsets
	}
	props := groupProps(mg.kind, id, off(id), fresh)
	// Quoted, the name cannot collide with another group's path ("a/offsets" vs the
	// offsets actor of "a").
	pid, err := actor.SpawnNamed(ctx, props, strconv.Quote(id))
	if err != nil {
		return nil, err
	}
	e := &entry{id: id, pid: pid}
	mg.groups[id] = e
	mg.byPID[pid.Id] = e
	delete(mg.dormant, id)
	// A group that starts while deleted topics are being dropped is told first, so no
	// request it serves sees their offsets for long.
	for _, job := range mg.drops {
		if !job.done[id] {
			job.done[id] = true
			ctx.Send(pid, &dropTopics{group: id, topics: job.topics})
		}
	}
	return e, nil
}

// onPassivate: a group found itself idle. Ask it once more behind everything already
// sent to it; requests that arrive meanwhile wait here.
func (mg *manager) onPassivate(ctx actor.Context, m *passivate) {
	e := mg.byPID[m.pid.Id]
	if e == nil || e.stopping || mg.halted {
		return
	}
	e.stopping = true
	ctx.Send(e.pid, &stopIfIdle{})
}

func (mg *manager) onIdleReply(ctx actor.Context, m *idleReply) {
	e := mg.byPID[m.pid.Id]
	if e == nil || !e.stopping || e.released || mg.halted {
		return
	}
	if !m.idle {
		e.stopping = false
		mg.flush(ctx, e)
		return
	}
	if m.exists {
		mg.dormant[e.id] = dormant{protocolType: m.protocolType, state: stateEmpty, consumer: m.consumer}
	}
	// Nothing else was sent to it since stopIfIdle: it goes with no request of its own.
	mg.release(ctx, e)
}

func (mg *manager) flush(ctx actor.Context, e *entry) {
	q := e.queue
	e.queue = nil
	for _, r := range q {
		if !e.members && mayPark(r) {
			e.members = true
		}
		ctx.Send(e.pid, r)
	}
}

// onTerminated: a group actor stopped (passivated, or given up on by the supervisor).
// Requests that waited for it go to a fresh actor.
func (mg *manager) onTerminated(ctx actor.Context, m *actor.Terminated) {
	e := mg.byPID[m.Who.Id]
	if e == nil {
		return // a collector
	}
	mg.released(m.Who.Id)
	delete(mg.byPID, m.Who.Id)
	delete(mg.groups, e.id)
	if !e.stopping && !mg.closing {
		mg.log.Error().Str("group", logs.ID(e.id)).Msg("group_actor_stopped_after_repeated_failures")
	}
	for _, r := range e.queue {
		mg.route(ctx, r)
	}
}

func (mg *manager) handleBatch(ctx actor.Context, b *Batch) {
	gather(ctx, len(b.Requests), b.Reply, func(i int) any { return failure(b.Requests[i], lost) }, func(i int, p actor.Promise) {
		mg.route(ctx, b.Requests[i].withReply(p))
	})
}

// handleList: every live group's row, plus every group that exists only as an offsets
// file, listed as Empty (Apache loads such groups from __consumer_offsets as Empty),
// also right after a restart.
func (mg *manager) handleList(ctx actor.Context, r *ListGroups) {
	live := make([]*entry, 0, len(mg.groups))
	for _, e := range mg.groups {
		live = append(live, e)
	}
	done := mg.ask(ctx, func(v any) { mg.listed(r, v) })
	list, readMeta := mg.cfg.ListGroupIDs, mg.cfg.ReadMeta
	// Groups whose protocol type is known here need no file read.
	known := make(map[string]bool, len(mg.dormant)+len(mg.groups))
	for id := range mg.dormant {
		known[id] = true
	}
	for id := range mg.groups {
		known[id] = true
	}
	missing := func(i int) any {
		if i < len(live) {
			return &listedGroup{}
		}
		return &fileIDs{err: errListTimedOut}
	}
	gather(ctx, len(live)+1, done, missing, func(i int, p actor.Promise) {
		if i < len(live) {
			mg.routeTo(ctx, live[i], &listEntry{group: live[i].id, reply: p})
			return
		}
		actor.Go(ctx, func() {
			var f fileIDs
			if list != nil {
				f.ids, f.err = list()
			}
			if readMeta != nil {
				f.types = readTypes(readMeta, f.ids, known)
			}
			p.Resolve(&f)
		})
	})
}

// metaReaders bounds the files ListGroups reads at once.
const metaReaders = 4

// dormant is what ListGroups shows of a group whose actor is not running.
type dormant struct {
	protocolType string
	state        state
	consumer     bool // a consumer-protocol group (KIP-848): listed with type consumer
}

// readTypes reads the protocol type of every listed group not known yet, and whether its
// file keeps a generation with members. This is the first ListGroups after a restart:
// Apache lists an Empty former consumer group as "consumer", and a group saved with
// members as Stable (it loads them, §5.2; here the group loads them on its first
// touch). The manager caches the answers, so later listings read nothing. A file that
// cannot be read is left out (its group answers COORDINATOR_NOT_AVAILABLE anyway).
func readTypes(read func(string) (offsets.GroupMeta, bool, error), ids []string, known map[string]bool) map[string]dormant {
	var unread []string
	for _, id := range ids {
		if !known[id] {
			unread = append(unread, id)
		}
	}
	if len(unread) == 0 {
		return nil
	}
	types := make([]dormant, len(unread))
	ok := make([]bool, len(unread))
	var wg sync.WaitGroup
	for w := range metaReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(unread); i += metaReaders {
				if m, exists, err := read(unread[i]); err == nil && exists {
					types[i], ok[i] = dormant{protocolType: m.ProtocolType, state: stateEmpty, consumer: len(m.Consumer) > 0}, true
					if len(m.Members) > 0 || savedConsumerMembers(m.Consumer) > 0 {
						types[i].state = stateStable
					}
				}
			}
		}()
	}
	wg.Wait()
	out := make(map[string]dormant, len(unread))
	for i, id := range unread {
		if ok[i] {
			out[id] = types[i]
		}
	}
	return out
}

// routeTo sends r to e's actor, or queues it while e stops. Sent, r is the group's to
// answer: a panic of the manager no longer answers it.
func (mg *manager) routeTo(ctx actor.Context, e *entry, r Request) {
	if e.stopping {
		e.queue = append(e.queue, r)
		return
	}
	if !e.members && mayPark(r) {
		e.members = true
	}
	actor.HandedOn(ctx)
	ctx.Send(e.pid, r)
}

func (mg *manager) listed(r *ListGroups, v any) {
	res, _ := v.(*BatchResult)
	out := &Listing{}
	seen := map[string]bool{}
	add := func(g ListedGroup) {
		if !seen[g.Group] && matchesFilter(r.States, g.State) && matchesFilter(r.Types, g.Type) {
			out.Groups = append(out.Groups, g)
		}
		seen[g.Group] = true
	}
	var files *fileIDs
	for _, x := range res.Values {
		switch x := x.(type) {
		case *listedGroup:
			if x.exists {
				add(x.ListedGroup)
			} else if x.Group != "" {
				seen[x.Group] = true // a name only; a file for it is stale or being deleted
			}
		case *fileIDs:
			files = x
		}
	}
	if files != nil {
		if files.err != nil {
			mg.log.Error().Err(files.err).Msg("offsets_directory_not_listed")
		}
		for id, d := range files.types {
			// Cache what was read, unless the group started (or passivated, with a newer
			// meta) meanwhile.
			if _, live := mg.groups[id]; !live {
				if _, cached := mg.dormant[id]; !cached {
					mg.dormant[id] = d
				}
			}
		}
		for _, id := range files.ids {
			d, ok := mg.dormant[id]
			if !ok {
				d = files.types[id] // unread: Empty, no protocol type
			}
			lg := ListedGroup{Group: id, ProtocolType: d.protocolType, State: d.state.String(), Type: classicType}
			if d.consumer {
				lg.Type = consumerType
			}
			add(lg)
		}
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	r.Reply.Resolve(out)
}

// onSweepTick tells each live group to run its offset expiry, and lists the offsets
// directory; groups with no live actor are then woken in batches to run theirs.
func (mg *manager) onSweepTick(ctx actor.Context) {
	// The live groups expire their offsets on this one tick: a timer in each would keep a
	// runtime timer and its closure for each of 100,000 groups.
	for _, e := range mg.groups {
		if !e.stopping {
			ctx.Send(e.pid, &retentionTick{})
		}
	}
	if len(mg.sweep) > 0 || mg.cfg.ListGroupIDs == nil {
		return // the previous sweep is still going
	}
	list, drop, before := mg.cfg.ListGroupIDs, mg.cfg.DropTombstones, time.Now().Add(-mg.cfg.Settings.OffsetsRetention)
	log := mg.log
	p := mg.ask(ctx, func(v any) {
		f := v.(*fileIDs)
		if f.err != nil {
			mg.log.Error().Err(f.err).Msg("offsets_directory_not_listed")
			return
		}
		mg.sweep = f.ids
		mg.sweepSome(ctx)
	})
	actor.Go(ctx, func() {
		if drop != nil {
			n, err := drop(before)
			if err != nil {
				log.Error().Err(err).Int("dropped", n).Msg("offsets_tombstones_not_dropped")
			} else if n > 0 {
				log.Info().Int("dropped", n).Msg("offsets_tombstones_dropped")
			}
		}
		var f fileIDs
		f.ids, f.err = list()
		p.Resolve(&f)
	})
}

func (mg *manager) sweepSome(ctx actor.Context) {
	n := 0
	for len(mg.sweep) > 0 && n < sweepBatch {
		id := mg.sweep[0]
		mg.sweep = mg.sweep[1:]
		if _, live := mg.groups[id]; live {
			continue
		}
		mg.route(ctx, &expireNow{group: id})
		n++
	}
	if len(mg.sweep) > 0 {
		ctx.Send(ctx.Self(), &sweepMore{})
	}
}

// dropJob drops the committed offsets of deleted topics from every group: the live ones
// at once, those that start while it runs as they start, and those that exist only on
// disk in batches once the offsets directory is listed (Apache's
// GroupCoordinator.onPartitionsDeleted, §5.3 rule 8 of the reference).
type dropJob struct {
	topics []string
	done   map[string]bool // groups already told
	toWake []string        // on-disk groups still to wake, once listed
}

// onTopicsDeleted: a DeleteTopics removed topics (sent by the broker's topics manager).
func (mg *manager) onTopicsDeleted(ctx actor.Context, m *TopicsDeleted) {
	if len(m.Topics) == 0 {
		return
	}
	job := &dropJob{topics: m.Topics, done: map[string]bool{}}
	for id, e := range mg.groups {
		job.done[id] = true
		mg.routeTo(ctx, e, &dropTopics{group: id, topics: job.topics})
	}
	list := mg.cfg.ListGroupIDs
	if list == nil {
		return
	}
	mg.drops = append(mg.drops, job)
	p := mg.ask(ctx, func(v any) {
		f := v.(*fileIDs)
		if f.err != nil {
			mg.log.Error().Err(f.err).Strs("topics", job.topics).
				Msg("offsets_directory_not_listed_deleted_topics_offsets_kept_on_disk")
		}
		job.toWake = f.ids
		mg.dropSome(ctx, job)
	})
	actor.Go(ctx, func() {
		var f fileIDs
		f.ids, f.err = list()
		p.Resolve(&f)
	})
}

// dropSome wakes the next batch of on-disk groups of job; a woken group drops the
// offsets and passivates again.
func (mg *manager) dropSome(ctx actor.Context, job *dropJob) {
	n := 0
	for len(job.toWake) > 0 && n < sweepBatch {
		id := job.toWake[0]
		job.toWake = job.toWake[1:]
		if job.done[id] {
			continue
		}
		job.done[id] = true
		mg.route(ctx, &dropTopics{group: id, topics: job.topics, woken: true})
		n++
	}
	if len(job.toWake) > 0 {
		ctx.Send(ctx.Self(), &dropMore{job: job})
		return
	}
	for i, j := range mg.drops {
		if j == job {
			mg.drops = append(mg.drops[:i], mg.drops[i+1:]...)
			break
		}
	}
}
