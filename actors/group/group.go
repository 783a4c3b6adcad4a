package group

import (
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
	"kaas/logs"
)

// Settings are the group.* and offsets.* settings a group actor follows.
type Settings struct {
	InitialRebalanceDelay time.Duration
	MinSessionTimeout     time.Duration
	MaxSessionTimeout     time.Duration
	MaxSize               int
	// MaxPendingMembers bounds one group's KIP-394 pending members
	// (group.max.pending.members); 0 is no bound. Pending bounds the broker's (shared by
	// every group; nil is no bound).
	MaxPendingMembers int
	Pending           *PendingBudget
	IdlePassivation   time.Duration
	OffsetsRetention  time.Duration
	RetentionCheck    time.Duration
	// Metrics is shared by every group; nil records nothing.
	Metrics *Metrics
	// Consumer: the consumer group protocol (KIP-848, consumer.go).
	Consumer ConsumerSettings
}

// Config is everything one group actor incarnation needs.
type Config struct {
	Group    string
	Settings Settings
	// Offsets makes the group's offsets actor, spawned as its child.
	Offsets *actor.Props
	Log     zerolog.Logger
	// NewID returns a fresh UUID for member ids (uuid.NewString when nil).
	NewID func() string
	// OffsetsRestarts, when set, counts offsets actors restarted after a panic.
	OffsetsRestarts prometheus.Counter

	// supervisor is offsetsSupervisor, one for all the groups of a manager.
	supervisor actor.SupervisorStrategy
}

// Props makes a group actor. It restarts its offsets actor after a panic (protoactor's
// default bound: 10 in 10 s), counting it.
func Props(cfg Config) *actor.Props {
	if cfg.NewID == nil {
		cfg.NewID = uuid.NewString
	}
	if cfg.supervisor == nil {
		cfg.supervisor = offsetsSupervisor(cfg.Log, cfg.OffsetsRestarts)
	}
	c := &cfg // one copy, shared by every incarnation
	return groupProps(c, c.Group, c.Offsets, false)
}

// groupProps makes the actor of group id with offsets actor props off, under the rest of
// kind: the manager's one Config for all its groups (its Group and Offsets unused), so
// that a live group does not keep a copy of what every group shares.
//
// fresh: the group never had state (ManagerConfig.New), and off are its offsets actor's
// Props for that (offsets.Kind.FreshProps). Its first actor loads nothing and spawns its
// offsets actor only when it first needs it; a restarted one loads as any.
func groupProps(kind *Config, id string, off *actor.Props, fresh bool) *actor.Props {
	if !fresh {
		return actor.PropsOf(func() actor.Actor { return newGroupActor(kind, id, off) }, actor.WithSupervisor(kind.supervisor))
	}
	var started atomic.Bool
	return actor.PropsOf(func() actor.Actor {
		g := newGroupActor(kind, id, off)
		g.fresh = !started.Swap(true)
		return g
	}, actor.WithSupervisor(kind.supervisor))
}

// offsetsSupervisor restarts a group's failed offsets actor (protoactor's default bound:
// 10 in 10 s), counting it. The manager makes one for all its groups, so that they are
// one kind of actor (actor.Props); the failed actor's id names its group.
func offsetsSupervisor(log zerolog.Logger, restarts prometheus.Counter) actor.SupervisorStrategy {
	return actor.RestartChildrenOf(10, 10*time.Second, func(child *actor.PID, reason any) {
		log.Warn().Str("actor", logs.ID(child.Id)).Interface("reason", reason).Msg("offsets_actor_failed_restarting")
		if restarts != nil {
			restarts.Inc()
		}
	})
}

// member is one member of the group.
type member struct {
	id               string
	instanceID       string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocols        []Protocol
	assignment       []byte
	joinSeq          uint64 // order of joining: the leader of last resort is the oldest

	// isNew: added by a JoinGroup still waiting for its first generation; it is on the
	// 5-minute new-member timer, not its session (KAFKA-7610).
	isNew bool
	join  *JoinGroup // the parked JoinGroup, nil when none
	sync  *SyncGroup // the parked SyncGroup, nil when none

	deadline   time.Time // the session expires at deadline unless extended
	timerSeq   uint64
	timerArmed bool
	armedFor   time.Time // the deadline the armed timer fires at
	cancel     actor.Cancel
}

func (m *member) metadataFor(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// op is a question this group asked its offsets actor, with what to do with the answer
// and the client request waiting on it (answered with an error if the group stops first).
type op struct {
	then   func(v any)
	client Request
}

type groupActor struct {
	// config
	cfg          *Config // shared by the incarnations and by the manager's groups; never written
	id           string  // the group id (cfg.Group is not this group's when cfg is a manager's)
	offsetsProps *actor.Props

	// collaborators: the offsets actor, nil while passivated (offsets_passivate.go).
	offsets *actor.PID
	// offsetsStopping (below): the offsets actor was told to Passivate; what the group
	// sends it waits in offsetsHeld, in order, until it answers Stay or stops.
	offsetsHeld []any
	// offsetsForget withdraws a passivated offsets actor's series (offsets.Idle.Forget).
	offsetsForget func()

	// loading (below): the group file is being read; requests wait in queue.
	queue []Request
	// broken is COORDINATOR_NOT_AVAILABLE while the offsets file is corrupt or unreadable:
	// every request gets it, so no consumer resets its position.
	broken int16

	// state
	exists    bool // members, offsets or a file: the group is not just a name
	state     state
	prevState state
	// The flags are kept in the words' spare bytes, so that the actor packs into a
	// smaller size class (one per live group): each in a word of its own took 56 bytes.
	loading, offsetsStopping, topicsKnown bool
	fresh                                 bool // groupProps: its first actor, of a group that never had state
	// offsetsQuietUntil (unix seconds, rounded down): while the offsets actor is
	// passivated, no offset can expire before then (offsets.Idle.NoExpiryBefore), and a
	// retention tick does not spawn the actor to ask (0: it asks).
	offsetsQuietUntil            uint32
	stateSince                   time.Time
	generation                   int32
	initialDelay, newMemberAdded bool // initial rebalance delay, below
	stopped, releasing           bool // metrics and release, below

	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []*member         // members in joining order, with removed ones not yet compacted
	instances    map[string]string // group.instance.id → member id
	pending      map[string]uint64 // KIP-394 pending member id → its timer's guard
	supported    map[string]int    // protocol name → members supporting it
	awaitingJoin int
	pendingSync  map[string]bool // members of this generation that have not synced
	joinSeq      uint64
	topics       map[string]bool // subscribed topics of the current generation
	// cg is the state of a consumer-protocol group (KIP-848, consumer.go); nil for a
	// classic group. consumerPublished is what it added to the member-state gauge.
	cg                *consumerGroup
	consumerPublished [4]int32

	// initial rebalance delay (Apache InitialDelayedJoin; initialDelay, newMemberAdded)
	delayNow       time.Duration
	delayRemaining time.Duration

	// timers
	joinSeqGuard uint64
	joinCancel   actor.Cancel
	syncSeqGuard uint64
	syncCancel   actor.Cancel
	pendingSeq   uint64
	pendingTimer map[string]actor.Cancel

	ops actor.Pending[op]

	// metrics: what this actor added to the gauges, and the rebalance being timed.
	pub            published
	rebalanceStart time.Duration // since monoBase (monotonic); 0: no rebalance being timed
	rebalanceCause string

	// releasing: the manager told the group to go (release); it waits for its offsets
	// actor's Flush (releaseID) or for that actor's end, at most flushTimeout
	// (releaseCancel), then stops itself.
	releaseID     uint64
	releaseCancel actor.Cancel
}

func newGroupActor(cfg *Config, id string, off *actor.Props) *groupActor {
	return &groupActor{cfg: cfg, id: id, offsetsProps: off}
}

// log is the broker's logger adding the group to each event, made per event rather than
// kept (72 bytes per live group): most groups never log a line.
func (g *groupActor) log() logs.Tagged { return logs.Tag(&g.cfg.Log, "group", logs.ID(g.id)) }

// Receive: lifecycle, then requests, then events.
//
// A panic answers the request the turn holds (the actor layer: actor.Request) with
// COORDINATOR_NOT_AVAILABLE, and the supervisor restarts the actor, whose Restarting
// answers every request it still held with the same code: those it parked, queued
// while loading, or handed to its offsets actor. So the group marks no hand-on: either
// answer is the same, and the first one wins.
func (g *groupActor) Receive(ctx actor.Context) {
	if g.stopped && g.afterStop(ctx) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
	case *actor.Stopping:
		g.unpublish()
		g.shutdown(kerr.NotCoordinator.Code)
		g.forgetPassivated()
	case *actor.Restarting:
		g.unpublish()
		g.shutdown(notAvailable)
	case *release:
		g.onRelease(ctx)
	case *halt:
		g.onHalt()
	case *actor.ReceiveTimeout:
		g.onIdle(ctx)
	case *actor.Settled:
		g.onSettled(ctx, m)
	case Request:
		g.handle(ctx, m)
	case *sessionCheck:
		g.onSessionCheck(ctx, m)
	case *joinDeadline:
		g.onJoinDeadline(ctx, m)
	case *syncDeadline:
		g.onSyncDeadline(ctx, m)
	case *pendingDeadline:
		g.onPendingDeadline(ctx, m)
	case *consumerSessionCheck, *consumerRebalanceCheck:
		g.onConsumerTimer(ctx, m)
	case *consumerFlush:
		g.onConsumerFlush(ctx, m)
	case *classicOwedCheck:
		g.onClassicOwed(ctx, m)
	case *retentionTick:
		if !g.offsetsQuiet(time.Now()) {
			g.expire(ctx, false)
		}
	case *offsets.Idle:
		g.offsetsIdle(ctx, m)
	case *offsets.Stay:
		g.offsetsStay(ctx)
	case *actor.Terminated:
		if !g.offsetsStopped(ctx, m) {
			g.offsetsGivenUp(ctx, m)
		}
	case *stopIfIdle:
		ctx.Send(ctx.Parent(), &idleReply{pid: ctx.Self(), idle: g.idle() && len(g.queue) == 0,
			exists: g.exists, protocolType: g.protocolType, consumer: g.cg != nil})
	}
	g.publish()
}

// afterStop handles a message that reaches the actor once its release or stop has begun:
// the mailbox is delivered while the group waits for its offsets actor to flush, and
// protoactor goes on delivering it while that actor stops, when it may already be drained
// and gone. A request gets NOT_COORDINATOR (the client finds the group's new home); a
// timer or a late reply is dropped (the group's state was saved as the release began).
// A session expiring here once reached the offsets actor that was no longer there, and
// the panic restarted the actor, so the stop was lost and the broker kept a group it had
// released. What ends a release (the Flush answer, the offsets actor's end, the release's
// deadline) and the lifecycle messages go on as usual (handled false).
func (g *groupActor) afterStop(ctx actor.Context) bool {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Restarting:
		return false
	case *actor.Settled:
		if g.releasing && m.ID == g.releaseID {
			g.onFlushed(ctx, m.Value)
		}
	case *offsets.Stay:
		g.offsetsStay(ctx)
	case *actor.Terminated:
		if g.offsetsStopped(ctx, m) {
			return true
		}
		if g.releasing && g.offsets != nil && m.Who.Equal(g.offsets) {
			g.log().Warn().Msg("offsets_actor_stopped_before_flush_answered")
			g.finishRelease(ctx)
		}
	case *releaseDeadline:
		if g.releasing {
			g.log().Error().Dur("timeout_ms", flushTimeout).Msg("offsets_flush_timed_out_acknowledged_writes_are_on_disk")
			g.finishRelease(ctx)
		}
	case Request:
		m.fail(kerr.NotCoordinator.Code)
	}
	return true
}

// publish brings the group gauges up to date after each message (two comparisons when
// nothing changed).
func (g *groupActor) publish() {
	if !g.stopped {
		st, n := g.state.String(), len(g.members)
		if g.cg != nil {
			st, n = g.cg.stateName, len(g.cg.members)
		}
		g.cfg.Settings.Metrics.publish(&g.pub, g.id, g.exists, st, n)
	}
}

func (g *groupActor) unpublish() {
	g.stopped = true
	g.cfg.Settings.Metrics.unpublish(&g.pub, g.id)
	g.publishConsumer()
}

func (g *groupActor) reset() {
	g.cfg.Settings.Pending.release(len(g.pending))
	g.exists = false
	g.state, g.prevState = stateEmpty, stateEmpty
	g.stateSince = time.Now()
	g.generation = 0
	g.protocolType, g.protocol, g.leader = "", "", ""
	// The member tables are made when the first member (or pending member) comes
	// (classicMaps): a group that only commits never needs them.
	g.members = nil
	g.order = nil
	g.instances = nil
	g.pending = nil
	g.pendingTimer = nil
	g.supported = nil
	g.awaitingJoin = 0
	g.pendingSync = nil
	g.topics, g.topicsKnown = nil, false
	g.initialDelay, g.newMemberAdded = false, false
	if g.cg != nil {
		g.shutdownConsumer(notAvailable)
		g.cg = nil
		g.publishConsumer()
	}
}

// classicMaps makes the member tables a classic member is about to go into; reads and
// deletes need none (a nil map reads as empty).
func (g *groupActor) classicMaps() {
	if g.members == nil {
		g.members = map[string]*member{}
	}
	if g.instances == nil {
		g.instances = map[string]string{}
	}
	if g.pending == nil {
		g.pending = map[string]uint64{}
	}
	if g.pendingTimer == nil {
		g.pendingTimer = map[string]actor.Cancel{}
	}
	if g.supported == nil {
		g.supported = map[string]int{}
	}
	if g.pendingSync == nil {
		g.pendingSync = map[string]bool{}
	}
}

func (g *groupActor) onStarted(ctx actor.Context) {
	g.reset()
	g.ops = actor.Pending[op]{}
	if g.fresh {
		// Nothing to load: the group has no file and no record. Its offsets actor starts
		// empty when it is first needed (toOffsets), as after a passivation.
		g.fresh = false
	} else {
		g.spawnOffsets(ctx)
		g.loading = true
		g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.Stat{Reply: p} }, g.onLoaded(ctx))
	}
	if g.cfg.Settings.IdlePassivation > 0 {
		ctx.SetReceiveTimeout(g.cfg.Settings.IdlePassivation)
	}
}

// onLoaded applies what the group file says about the group (Apache loads a group
// without members as Empty with its generation and protocol type, and one with members
// as Stable with them) and lets the requests that waited in.
func (g *groupActor) onLoaded(ctx actor.Context) func(v any) {
	return func(v any) {
		st, _ := v.(*offsets.Status)
		wasBroken := g.broken != 0
		switch {
		case st == nil:
			g.broken = notAvailable
		case st.ErrorCode != 0:
			if !wasBroken {
				g.log().Error().Int16("error_code", st.ErrorCode).Msg("group_file_unusable_answers_coordinator_not_available")
			}
			g.broken = st.ErrorCode
		case st.Exists:
			g.broken = 0
			g.exists = true
			g.generation = st.Meta.Generation
			g.protocolType = st.Meta.ProtocolType
			if st.Meta.EmptySince > 0 {
				g.stateSince = time.UnixMilli(st.Meta.EmptySince)
			}
			if len(st.Meta.Members) > 0 {
				g.loadMembers(ctx, st.Meta)
			}
			if len(st.Meta.Consumer) > 0 {
				if err := g.loadConsumer(ctx, st.Meta); err != nil {
					g.log().Error().Err(err).Msg("group_file_unusable_answers_coordinator_not_available")
					g.cg = nil
					g.broken = notAvailable
				}
			}
		default:
			g.broken = 0
		}
		g.loading = false
		queue := g.queue
		g.queue = nil
		for _, r := range queue {
			if g.broken != 0 {
				r.fail(g.broken)
				continue
			}
			g.handle(ctx, r)
		}
	}
}

// Panicked logs a panic of the actor with its stack (actor.PanicHandler); the supervisor
// restarts it.
func (g *groupActor) Panicked(_ actor.Context, p any) {
	logs.Panic(g.log().Error(), p).Msg("group_actor_panicked_restarting")
}

// handle runs one request: the message being handled, or one that waited for the load.
// A panic from here answers r.
func (g *groupActor) handle(ctx actor.Context, r Request) {
	actor.Handling(ctx, r)
	if g.loading {
		g.queue = append(g.queue, r)
		return
	}
	if g.broken != 0 {
		// The file could not be used. The request waits while the offsets actor is asked
		// again: it reads the file anew at most every RetryLoadAfter (5 s), so a repaired
		// file is served without a restart, and until then the request gets the error.
		g.loading = true
		g.queue = append(g.queue, r)
		g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.Stat{Reply: p} }, g.onLoaded(ctx))
		return
	}
	if g.consumerHandles(ctx, r) {
		g.maybeForget(ctx)
		return
	}
	switch m := r.(type) {
	case *JoinGroup:
		g.handleJoin(ctx, m)
	case *SyncGroup:
		g.handleSync(ctx, m)
	case *Heartbeat:
		g.handleHeartbeat(m)
	case *LeaveGroup:
		g.handleLeave(ctx, m)
	case *DescribeGroup:
		g.handleDescribe(m)
	case *DeleteGroup:
		g.handleDeleteGroup(ctx, m)
	case *CommitOffsets:
		g.handleCommit(ctx, m)
	case *FetchOffsets:
		g.handleFetch(ctx, m)
	case *DeleteOffsets:
		g.handleDeleteOffsets(ctx, m)
	case *TxnCommitOffsets:
		g.handleTxnCommit(ctx, m)
	case *TxnOffsetMarker:
		g.handleTxnMarker(ctx, m)
	case *listEntry:
		g.handleListEntry(m)
	case *expireNow:
		g.expire(ctx, true)
	case *dropTopics:
		g.handleDropTopics(ctx, m)
	case interface{ inject(*groupActor) }:
		m.inject(g) // fault injection for the chaos tests
	}
	g.maybeForget(ctx)
}

// ask sends the offsets actor a message made with a promise to this actor; then runs with
// the answer. client, if set, is answered with an error should the group stop first.
func (g *groupActor) ask(ctx actor.Context, client Request, msg func(actor.Promise) any, then func(any)) {
	p := g.ops.Await(ctx, op{then: then, client: client})
	g.toOffsets(ctx, msg(p))
}

// onSettled runs what waited for the offsets actor's answer. A panic in it answers the
// client request it completes.
func (g *groupActor) onSettled(ctx actor.Context, m *actor.Settled) {
	o, ok := g.ops.Take(m)
	if !ok {
		return // an answer to an earlier incarnation
	}
	if o.client != nil {
		actor.Handling(ctx, o.client)
	}
	o.then(m.Value)
}

// shutdown answers every waiter with code and cancels every timer: on Stopping (the
// group moved or passivated: NOT_COORDINATOR) and on Restarting after a panic
// (COORDINATOR_NOT_AVAILABLE). Clients retry, rediscover the coordinator and rejoin.
func (g *groupActor) shutdown(code int16) {
	for _, r := range g.queue {
		r.fail(code)
	}
	g.queue = nil
	for _, m := range g.offsetsHeld {
		// A commit handed on with its client's promise (commitDirect) is not among the
		// ops: answered here. Any other held request answers the group's own promise,
		// whose op is answered below.
		if c, ok := m.(*offsets.Commit); ok {
			offsets.Fail(c, code)
		}
	}
	g.offsetsHeld = nil
	g.ops.Drain(func(o op) {
		if o.client != nil {
			o.client.fail(code)
		}
	})
	for _, m := range g.members {
		if m.join != nil {
			m.join.Reply.Resolve(joinError(code, m.id))
			m.join = nil
		}
		if m.sync != nil {
			m.sync.fail(code)
			m.sync = nil
		}
		if m.cancel != nil {
			m.cancel()
		}
	}
	for _, c := range g.pendingTimer {
		c()
	}
	g.shutdownConsumer(code)
	g.cfg.Settings.Pending.release(len(g.pending))
	g.pending, g.pendingTimer = nil, nil
	for _, c := range []actor.Cancel{g.joinCancel, g.syncCancel, g.releaseCancel} {
		if c != nil {
			c()
		}
	}
}

// flushTimeout bounds how long a releasing group waits for its offsets actor's Flush: a
// little longer than the offsets actor's own bound, so its waits end first.
const flushTimeout = offsets.StopWait + time.Second

// releaseDeadline ends a release whose Flush was not answered within flushTimeout.
type releaseDeadline struct{}

// A release, as states:
//
//	live ──release──▶ releasing ──Flush answered │ offsets Terminated │ releaseDeadline──▶
//	    Stop(self) ──▶ Stopping (offsets actor stopped, drained) ──▶ Terminated to the manager
//
// From releasing on, afterStop answers requests NOT_COORDINATOR and drops timers.
//
// onRelease begins the group's release (the manager passivates it or lets it go): every
// waiter is answered NOT_COORDINATOR and every timer cancelled, as on a stop, and the
// offsets actor is asked to make every write it accepted durable (offsets.Flush). The
// group stops itself once that is answered, once the offsets actor has stopped, or after
// flushTimeout, and handles nothing else meanwhile (afterStop). It never waits in its
// Receive: protoactor stops children with a system message that drops their mailboxes,
// so the Flush, which comes behind everything the group sent before, is what makes them
// durable first.
func (g *groupActor) onRelease(ctx actor.Context) {
	if g.stopped {
		return
	}
	g.unpublish()
	g.shutdown(kerr.NotCoordinator.Code)
	g.releasing = true
	if g.offsets == nil && !g.offsetsStopping {
		// Passivated: its file holds everything, so nothing is to be flushed; its
		// committed offsets' series go with the group.
		g.forgetPassivated()
		g.finishRelease(ctx)
		return
	}
	p := actor.NewPromise(ctx, ctx.Self())
	g.releaseID = p.ID()
	g.toOffsets(ctx, &offsets.Flush{Reply: p})
	g.releaseCancel = actor.After(ctx, flushTimeout, &releaseDeadline{})
}

// onHalt: the broker stops and leaves the group where it stands (Halt, manager.go).
// Every waiter is answered NOT_COORDINATOR and every timer cancelled, as a release
// does; what its offsets actor accepted goes on to the journal without the group, and
// nothing is flushed or stopped: the journal holds what the group's file lacks. From
// here on afterStop answers every request NOT_COORDINATOR and drops every timer.
func (g *groupActor) onHalt() {
	if g.stopped {
		return
	}
	g.unpublish()
	g.shutdown(kerr.NotCoordinator.Code)
}

// onFlushed: the offsets actor answered the release's Flush.
func (g *groupActor) onFlushed(ctx actor.Context, v any) {
	if r, ok := v.(*offsets.Result); !ok || r.ErrorCode != 0 {
		g.log().Warn().Interface("answer", v).Msg("offsets_flush_failed_acknowledged_writes_are_on_disk")
	}
	g.finishRelease(ctx)
}

// finishRelease stops the actor; protoactor stops its offsets actor, drained, first.
func (g *groupActor) finishRelease(ctx actor.Context) {
	if !g.releasing {
		return
	}
	g.releasing = false
	if g.releaseCancel != nil {
		g.releaseCancel()
		g.releaseCancel = nil
	}
	ctx.Stop(ctx.Self())
}

// idle: nothing would be lost by stopping this actor: no members, no rebalance, nothing
// in flight or due to be saved (a consumer-protocol save waits for consumerFlush). Its
// offsets and meta are on disk.
func (g *groupActor) idle() bool {
	return len(g.members) == 0 && len(g.pending) == 0 && g.ops.Len() == 0 && !g.loading &&
		g.state == stateEmpty && (g.cg == nil || len(g.cg.members) == 0 && len(g.cg.waiting) == 0)
}

// onIdle: the group saw no traffic for group.idle.passivation.ms.
func (g *groupActor) onIdle(ctx actor.Context) {
	if g.idle() {
		ctx.Send(ctx.Parent(), &passivate{group: g.id, pid: ctx.Self()})
		return
	}
	ctx.SetReceiveTimeout(g.cfg.Settings.IdlePassivation)
}

// maybeForget passivates at once a group that turned out to be only a name (a describe,
// heartbeat or fetch of a group that does not exist), so lookups of unknown ids do not
// pile up actors.
func (g *groupActor) maybeForget(ctx actor.Context) {
	if !g.exists && g.idle() && g.broken == 0 {
		ctx.Send(ctx.Parent(), &passivate{group: g.id, pid: ctx.Self()})
	}
}

// monoBase is what rebalanceStart counts from: a Duration on the monotonic clock is 8
// bytes where a time.Time is 24, in every group actor.
var monoBase = time.Now()

func (g *groupActor) setState(s state) {
	g.prevState, g.state = g.state, s
	g.stateSince = time.Now()
	if (s == stateStable || s == stateEmpty) && g.rebalanceStart != 0 {
		g.cfg.Settings.Metrics.rebalanceDone(g.rebalanceCause, g.stateSince.Sub(monoBase)-g.rebalanceStart)
		g.rebalanceStart = 0
	}
}

// saveEmpty records in the group file that the group went Empty (Apache writes the
// empty GroupMetadata record in onCompleteJoin): offset expiry counts from then, and a
// restart finds no members. No request waits on it; a failed write is logged, and the
// file keeps the last generation, whose members then expire after a restart.
func (g *groupActor) saveEmpty(ctx actor.Context) {
	meta := offsets.GroupMeta{ProtocolType: g.protocolType, Generation: g.generation,
		EmptySince: g.stateSince.UnixMilli()}
	g.saveMeta(ctx, nil, meta, func(code int16) {
		if code != 0 {
			g.log().Warn().Int16("error_code", code).Msg("group_meta_not_saved")
		}
	})
}

// generationMeta is the current generation as Apache's GroupMetadataValue keeps it:
// protocol, leader, and every member in joining order with its subscription to the
// selected protocol and the assignment assign gives it.
func (g *groupActor) generationMeta(assign func(*member) []byte) offsets.GroupMeta {
	ms := g.sortedMembers()
	meta := offsets.GroupMeta{
		ProtocolType: g.protocolType, Generation: g.generation, Protocol: g.protocol, Leader: g.leader,
		Members: make([]offsets.MemberMeta, len(ms)),
	}
	for i, m := range ms {
		meta.Members[i] = offsets.MemberMeta{
			MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			SessionTimeout: m.sessionTimeout, RebalanceTimeout: m.rebalanceTimeout,
			Subscription: m.metadataFor(g.protocol), Assignment: assign(m),
		}
	}
	return meta
}

// saveMeta writes meta to the group file through the offsets actor; then runs with 0
// once it is on disk, or with the write's error code (NOT_COORDINATOR, as Apache maps a
// storage error, §4.3 append errors). client, if set, is answered with an error should
// the group stop first.
func (g *groupActor) saveMeta(ctx actor.Context, client Request, meta offsets.GroupMeta, then func(code int16)) {
	g.ask(ctx, client, func(p actor.Promise) any { return &offsets.SaveMeta{Meta: meta, Reply: p} }, func(v any) {
		r, ok := v.(*offsets.Result)
		if !ok {
			then(notAvailable)
			return
		}
		then(r.ErrorCode)
	})
}

// loadMembers brings back the generation the file keeps (Apache GroupMetadataManager
// loading a group with members, §5.2): the group is Stable with the saved protocol,
// leader, members and assignments, and each member's session starts afresh from now, so
// members that keep heartbeating stay and the others expire as usual and make the
// group rebalance. A group bigger than group.max.size rebalances at once (Apache
// onLoaded).
func (g *groupActor) loadMembers(ctx actor.Context, meta offsets.GroupMeta) {
	now := time.Now()
	g.protocol = meta.Protocol
	g.leader = meta.Leader
	g.classicMaps()
	for _, mm := range meta.Members {
		g.joinSeq++
		m := &member{
			id: mm.MemberID, instanceID: mm.InstanceID, clientID: mm.ClientID, clientHost: mm.ClientHost,
			sessionTimeout: mm.SessionTimeout, rebalanceTimeout: mm.RebalanceTimeout,
			protocols:  []Protocol{{Name: meta.Protocol, Metadata: mm.Subscription}},
			assignment: mm.Assignment, joinSeq: g.joinSeq, deadline: now.Add(mm.SessionTimeout),
		}
		g.members[m.id] = m
		g.order = append(g.order, m)
		g.supported[meta.Protocol]++
		if m.instanceID != "" {
			g.instances[m.instanceID] = m.id
		}
		g.armSession(ctx, m)
	}
	g.computeTopics()
	g.setState(stateStable)
	g.log().Info().Int32("generation", g.generation).Str("protocol", logs.ID(g.protocol)).Str("leader", logs.ID(g.leader)).
		Int("members", len(g.members)).Msg("group_loaded_stable_with_its_members")
	if len(g.members) > g.cfg.Settings.MaxSize {
		g.prepareRebalance(ctx, causeMaxSize, "loaded group is larger than group.max.size")
	}
}

// sortedMembers lists members in joining order, in O(members): g.order is kept in that
// order as members join, and removed members are dropped from it here (a static member
// replaced under a new id is the same *member, so it keeps its place).
func (g *groupActor) sortedMembers() []*member {
	out := make([]*member, 0, len(g.members))
	for _, m := range g.order {
		if g.members[m.id] == m {
			out = append(out, m)
		}
	}
	if len(out) != len(g.order) {
		g.order = append(make([]*member, 0, len(out)), out...)
	}
	return out
}

// oldest is the member that joined first (the leader of last resort), nil when none.
// Removed members at the front of g.order are dropped as it goes, so removing the
// oldest members one after another costs O(1) each.
func (g *groupActor) oldest() *member {
	for len(g.order) > 0 {
		if m := g.order[0]; g.members[m.id] == m {
			return m
		}
		g.order[0] = nil
		g.order = g.order[1:]
	}
	return nil
}

func (g *groupActor) handleDescribe(r *DescribeGroup) {
	if !g.exists {
		r.Reply.Resolve(&Description{Group: g.id, ErrorCode: kerr.GroupIDNotFound.Code, State: stateDead.String()})
		return
	}
	d := &Description{Group: g.id, State: g.state.String(), ProtocolType: g.protocolType}
	stable := g.state == stateStable
	if stable {
		d.Protocol = g.protocol
	}
	for _, m := range g.sortedMembers() {
		dm := DescribedMember{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if stable {
			dm.Metadata = m.metadataFor(g.protocol)
			dm.Assignment = m.assignment
		}
		d.Members = append(d.Members, dm)
	}
	r.Reply.Resolve(d)
}

func (g *groupActor) handleListEntry(r *listEntry) {
	r.reply.Resolve(&listedGroup{
		ListedGroup: ListedGroup{Group: g.id, ProtocolType: g.protocolType, State: g.state.String(), Type: classicType},
		exists:      g.exists,
	})
}

// handleDeleteGroup: unknown → GROUP_ID_NOT_FOUND; members → NON_EMPTY_GROUP; Empty →
// the file goes and the group is forgotten (§4.12).
func (g *groupActor) handleDeleteGroup(ctx actor.Context, r *DeleteGroup) {
	switch {
	case !g.exists || g.state == stateDead:
		r.fail(kerr.GroupIDNotFound.Code)
	case g.state != stateEmpty || len(g.members) > 0:
		r.fail(kerr.NonEmptyGroup.Code)
	default:
		g.ask(ctx, r, func(p actor.Promise) any { return &offsets.DeleteAll{Reply: p} }, func(v any) {
			res, _ := v.(*offsets.Result)
			if res == nil {
				res = &offsets.Result{ErrorCode: notAvailable}
			}
			if res.ErrorCode == 0 && g.state == stateEmpty && len(g.members) == 0 {
				g.log().Info().Msg("group_deleted")
				g.reset()
				// A commit that came in after the delete was queued behind it and made a new
				// simple group (Apache handles them in the same order).
				g.exists = g.ops.Len() > 0
			}
			r.Reply.Resolve(&Result{ErrorCode: res.ErrorCode})
			g.maybeForget(ctx)
		})
	}
}
