package offsets

import (
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/logs"
	"kaas/metrics"
	"kaas/storage"
)

// Wire codes of the actor's own failures, in one table (the group actor passes them on).
var (
	// codeWriteFailed answers every request of a batch whose write failed. Apache maps a
	// storage error on the offsets log to NOT_COORDINATOR for OffsetCommit
	// (GroupMetadataManager.maybeConvertOffsetCommitError: KAFKA_STORAGE_ERROR → 16; 4.0's
	// CoordinatorOperationExceptionHelper does the same for every write). Clients treat it
	// as retriable: they look the coordinator up again and retry the commit.
	codeWriteFailed = kerr.NotCoordinator.Code
	// codeBroken answers everything while the group's file is corrupt or unreadable. It
	// is retriable, so consumers wait and keep their positions instead of resetting them
	// as an empty offsets map (or OFFSET_OUT_OF_RANGE-like guesses) would make them do.
	codeBroken = kerr.CoordinatorNotAvailable.Code
	// codeCrashed answers the requests of an incarnation that panicked.
	codeCrashed = kerr.CoordinatorNotAvailable.Code
	// codeLoading answers requests that waited ClaimWait for the journal to say whether
	// the group's file is behind it: serving the file could hand out older offsets. It is
	// what Apache answers while a coordinator loads its offsets, and clients retry it.
	codeLoading = kerr.CoordinatorLoadInProgress.Code
	// codeFenced answers everything once the group is no longer this broker's to write
	// (cluster): clients look the coordinator up again.
	codeFenced = kerr.NotCoordinator.Code
)

// CodePendingLimit answers a TxnCommit that would take its group past
// Config.MaxPendingOffsets pending transactional offsets. Apache has no such bound, so
// no code of its own: TRANSACTION_ABORTABLE says what the producer must do (abort,
// which drops its pending offsets); the TxnOffsetCommit handler gives versions that do
// not know it (v0-3) INVALID_TXN_STATE, as it does the coordinator's.
var CodePendingLimit = kerr.TransactionAbortable.Code

// DefaultMaxPendingOffsets bounds one group's pending transactional offsets (all its
// producers together; group.max.pending.txn.offsets): an exactly-once pipeline holds
// about one per input partition per producer between a TxnOffsetCommit and its EndTxn.
const DefaultMaxPendingOffsets = 100_000

// DefaultMaxMetadataBytes is Apache's offset.metadata.max.bytes.
const DefaultMaxMetadataBytes = 4096

// Dir is the offsets directory under the broker's data.dir.
func Dir(dataDir string) string {
	return filepath.Join(dataDir, "__cluster", "__consumer_offsets")
}

// Config is everything one group's offsets actor needs.
type Config struct {
	// Group is the group id, any string (FileName makes it safe).
	Group string
	// Dir is the offsets directory, Dir(data.dir).
	Dir string
	// FS does the file access; nil is OSFS.
	FS storage.FS
	// Log is the broker logger; the actor adds the group and file.
	Log zerolog.Logger
	// MaxMetadataBytes is offset.metadata.max.bytes, in UTF-16 units as Apache counts;
	// 0 is DefaultMaxMetadataBytes.
	MaxMetadataBytes int
	// MaxPendingOffsets bounds the group's pending transactional offsets (TxnCommit);
	// 0 is DefaultMaxPendingOffsets, negative is no bound.
	MaxPendingOffsets int
	// Metrics is shared by every group's actor; nil records nothing.
	Metrics *Metrics
	// Now stamps commits; nil is time.Now.
	Now func() time.Time
	// RetryLoadAfter is how long a group whose file failed to load waits before it reads
	// the file again (so an operator's repair is picked up without a restart); 0 is 5 s.
	RetryLoadAfter time.Duration
	// Journal is the broker's offsets journal actor (journal.Props), required: a batch is durable
	// once appended there, and the group file is rewritten behind it, CheckpointInterval
	// after a change.
	Journal *actor.PID
	// CheckpointInterval: how long journaled changes wait before the group file is
	// rewritten with them; 0 is DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// WriteSlots, shared by every group's actor of a broker, bounds how many checkpoints
	// (group file rewrites) run at once: each holds an OS thread in fsync, and 100,000
	// groups checkpointing together would otherwise need as many threads (Go stops the
	// process at 10,000). Nil is no bound.
	WriteSlots chan struct{}
	// WriteQueue, shared like WriteSlots and of as many, starts a checkpoint's goroutine
	// only when one of them is free: a checkpoint waiting its turn is then a queue entry,
	// not a goroutine (its stack, its encoded file) waiting for a slot. Nil: each
	// checkpoint waits for its slot on a goroutine of its own.
	WriteQueue *actor.Limiter
	// ClaimWait: how long requests wait for the journal's answer to the actor's Claim
	// before they are answered COORDINATOR_LOAD_IN_PROGRESS (the actor goes on waiting);
	// 0 is DefaultClaimWait.
	ClaimWait time.Duration
	// Gate, in a cluster, reports whether this broker may still write the group and
	// acknowledge its changes: its lease is held and has not been lost since the group
	// was loaded (cluster.State.MayWrite). With a Gate the actor takes the group over at
	// load — its file is rewritten under the next ownership epoch before anything is
	// served — journals under that epoch, refuses to answer a batch made durable after
	// the gate closed, and never writes its file over one of a newer epoch. Nil: a broker
	// alone, which always may.
	Gate func() bool
	// LeaveToJournal, when it reports true, says that the broker is stopping and replays
	// its journal at its next start (a broker alone: no other broker reads the group
	// file): a Flush and a stopping actor then make everything accepted durable in the
	// journal only, and leave the file behind it. The journal's segments keep the
	// records the file lacks (nothing is checkpointed past them), so a stop costs no
	// file write per group. Nil: the file is always written at stop.
	LeaveToJournal func() bool
	// IdleAfter: how long an offsets actor whose file holds everything waits, with no
	// request, before it asks its group actor to stop it (passivate.go); the group actor
	// spawns it again on the group's next request, which reads the file. 0: never.
	IdleAfter time.Duration
	// Written, when set, is told the group's file was written (or removed) by a
	// checkpoint, before the journal is: the listings of a start that left the files
	// behind (Pending.Forget) stop standing in for it before the actor can stop, so a
	// group deleted and stopped is never listed again from what the start left.
	Written func(group string)

	// slotWait, set by tests, is told of each checkpoint that finds every WriteSlot
	// taken, before it waits for one.
	slotWait func(group string)
}

// DefaultClaimWait bounds how long a request waits for the journal's answer to a Claim.
const DefaultClaimWait = 10 * time.Second

// DefaultWriteSlots is how many group file rewrites a broker runs at once: more do not
// go faster (ext4 serializes their journal commits).
const DefaultWriteSlots = 16

// DefaultCheckpointInterval is how long a group's journaled changes wait for its file.
const DefaultCheckpointInterval = 2 * time.Second

func (c Config) withDefaults() Config {
	if c.FS == nil {
		c.FS = storage.OSFS{}
	}
	if c.MaxMetadataBytes == 0 {
		c.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if c.MaxPendingOffsets == 0 {
		c.MaxPendingOffsets = DefaultMaxPendingOffsets
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RetryLoadAfter == 0 {
		c.RetryLoadAfter = 5 * time.Second
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.ClaimWait == 0 {
		c.ClaimWait = DefaultClaimWait
	}
	return c
}

// Props makes the offsets actor of cfg.Group. Its parent (the group actor) should have
// it Flush before it stops it: protoactor drops the user messages still in a stopped
// actor's mailbox, and with them their promises; once Flush is answered everything sent
// before is answered and durable.
// A Config without a Journal is a wiring bug, and Props panics on it: the actor has no
// other way to make a change durable.
func Props(cfg Config) *actor.Props {
	gate := cfg.Gate
	return NewKind(cfg, func() func() bool { return gate }).Props(cfg.Group)
}

// Kind makes the offsets actors of many groups from one Config (its Group and Gate
// unused), so that a live group does not keep a copy of what every group shares.
type Kind struct {
	cfg  Config
	gate func() func() bool
}

// NewKind checks and completes cfg for Props; it panics on a Config without a Journal
// (see Props). gate, when set, makes the Gate of each group as its Props are made (a
// gate holds the ownership term the group is loaded under, so it is the group's own).
func NewKind(cfg Config, gate func() func() bool) *Kind {
	if cfg.Journal == nil {
		panic("offsets.Props: Config.Journal is nil (the broker's journal actor, journal.Props)")
	}
	cfg.Gate = nil
	return &Kind{cfg: cfg.withDefaults(), gate: gate}
}

// Props makes the offsets actor of group, as Props of k's Config with Group set to it
// and Gate to one made now.
func (k *Kind) Props(group string) *actor.Props {
	var gate func() bool
	if k.gate != nil {
		gate = k.gate()
	}
	return actor.PropsOf(func() actor.Actor { return newOffsetsActor(&k.cfg, group, gate) })
}

// FreshProps makes the offsets actor of group, as Props, for a group that never had
// state (Fresh.Take): its first actor starts with an empty group, asking the journal
// nothing and reading no file, so a first request is served at once. Any later actor of
// these Props (after a panic, or a passivation) loads as Props' do: by then the group
// may have state. With a gate (a cluster) it is Props.
func (k *Kind) FreshProps(group string) *actor.Props {
	if k.gate != nil && k.gate() != nil {
		return k.Props(group)
	}
	var spawned atomic.Bool
	return actor.PropsOf(func() actor.Actor {
		a := newOffsetsActor(&k.cfg, group, nil)
		a.fresh = !spawned.Swap(true)
		return a
	})
}

// offsetsActor owns one group's file. It loads the file on its first request and keeps
// the durable state in memory; requests that change it queue, and a flushNow message
// the actor sends itself appends them all to the journal as one record.
//
// Group commit: the first request to queue sends flushNow to self. Everything already in
// the mailbox is ahead of it, so it joins the same batch; while up to maxInflight batches
// wait for the journal's fsync, new requests queue and all go into the next batch. Every
// waiter is answered right after the fsync that holds its request, and the state is
// touched only in Receive. The group file is read (a load) and rewritten behind the
// journal (a checkpoint) by jobs on goroutines of their own whose outcomes come back as
// messages; only a stopping or restarting actor waits for its last write, with a bound.
type offsetsActor struct {
	cfg   *Config     // shared by the incarnations and by the groups of a Kind; never written
	group string      // the group id (cfg.Group is not this group's when cfg is a Kind's)
	gate  func() bool // Config.Gate of this group (a Kind's cfg has none)
	name  string      // file name in cfg.Dir (filePath)

	// The flags are kept together, so that the actor packs into a smaller size class
	// (one per live group): with each bool in its own word it took 48 bytes more.
	loaded   bool
	dirReady bool
	tomb     bool // the group's tombstone (tombstone.go) may be on disk
	exists   bool // the file exists on disk
	// tombUnreadable: the last look found the group's tombstone unreadable (noteTomb);
	// no file is written until it reads again.
	tombUnreadable bool
	// fenced: the gate closed, or another broker wrote the file under a newer epoch.
	// The group is no longer this actor's: everything answers NOT_COORDINATOR and
	// nothing is written.
	fenced bool
	// flushQueued: a flushNow is on its way to the actor; ckptScheduled: a checkpoint
	// timer is armed (ckptCancel).
	flushQueued, ckptScheduled bool
	// claiming and loading: described with claimID and loadJob below.
	claiming, loading bool
	// passivate.go: idleAsked, the actor told its parent it is Idle; passivated, it
	// stops on its parent's Passivate.
	idleAsked, passivated bool
	// fresh: the group never had state (Kind.FreshProps); the actor starts loaded with
	// an empty group, without the journal's claim or a load.
	fresh bool

	broken   error // the load failed; every request answers codeBroken
	brokenAt time.Time
	st       state      // what the file holds
	metaJSON *metaCache // encodeMetaCached

	queue []queued

	// The batches appended to the journal (journal.go) and not yet answered, the
	// sequence number of the last record applied to st and of the last one the file
	// holds, and the checkpoint being written or scheduled.
	inflight   []*batch // appended, oldest first; answered in this order
	lastSeq    uint64
	fileSeq    uint64
	ckpt       *ckptJob
	ckptCancel actor.Cancel
	// The idle timer (passivate.go), and when the last request came (since monoBase).
	idleCancel  actor.Cancel
	lastRequest time.Duration

	// claiming: the journal has not yet said whether an earlier actor of the group left
	// state behind its file; loading: a load job (load.go) reads the file. Requests wait
	// in stash meanwhile, at most ClaimWait at a time (stashCancel).
	claimID     uint64
	loadJob     *loadJob
	stashCancel actor.Cancel
	stash       []any
	// flushes are the Flush requests waiting for everything accepted before them.
	flushes []*Flush
	hold    hold // hold.go: the group is held after a damaged journal segment
	// pub publishes the committed offsets served (kaas_group_committed_offset, lag).
	pub *metrics.GroupOffsets
	// pendingShown is what this actor added to the pending offsets gauge.
	pendingShown int
	// failLog and ckptFailLog keep a failure that repeats with every batch or
	// checkpoint (a full disk) to one line per interval; made when first needed.
	failLog, ckptFailLog *logs.Limiter
}

func newOffsetsActor(cfg *Config, group string, gate func() bool) *offsetsActor {
	name := FileName(group)
	a := &offsetsActor{
		cfg:   cfg,
		group: group,
		gate:  gate,
		name:  name,
		st:    newState(),
	}
	return a
}

// log is the broker's logger adding the group and its file to each event, made per event
// rather than kept (72 bytes per live group): most groups never log a line.
func (a *offsetsActor) log() logs.Tagged {
	return logs.Tag(&a.cfg.Log, "group", logs.ID(a.group)).And("file", a.name)
}

// filePath is the group's file (made when needed, not kept: 16 bytes per live group).
func (a *offsetsActor) filePath() string { return filepath.Join(a.cfg.Dir, a.name) }

// errorLogInterval: a failure that repeats with every write (a full disk) is logged once
// per interval, with the number of those left out.
const errorLogInterval = 10 * time.Second

// limited is the limiter *l, made at its first use: most groups never fail a write.
func limited(l **logs.Limiter) *logs.Limiter {
	if *l == nil {
		*l = logs.NewLimiter(errorLogInterval)
	}
	return *l
}

// Receive: lifecycle, then events, then requests. A panic answers the request the turn
// holds with codeCrashed (the actor layer, AnswerCrash); one already stashed or queued
// is handed on (actor.HandedOn) and answered by Restarting, or by Stopping with its
// write's outcome.
func (a *offsetsActor) Receive(ctx actor.Context) {
	msg := ctx.Message()
	switch m := msg.(type) {
	case *actor.Started:
		a.cfg.Metrics.started()
		a.pub = a.cfg.Metrics.offsets().Group(a.group)
		if a.fresh {
			// Nothing to claim or read: no earlier actor, no file, no record. Its idle
			// timer waits for the request it was spawned for, right behind Started
			// (armed now, from no request at all, every new group's timer would fire at
			// one instant, each on a goroutine of its own).
			a.fresh, a.loaded = false, true
			return
		}
		a.claim(ctx)
	case *actor.Stopping:
		a.onStopping(ctx)
		return
	case *actor.Restarting:
		a.onRestarting(ctx)
		return
	case *actor.Stopped:
		// Not a request: served as one, it armed the idle timer of a stopped actor,
		// whose PID (its cached process) kept the whole actor reachable until it fired.
		return
	case *actor.Settled:
		if a.claiming && m.ID == a.claimID {
			a.onClaimed(ctx, m.Value)
			return
		}
		a.onAppended(ctx, m)
	case *stashTimeout:
		a.onStashTimeout(ctx)
	case *loadJob:
		a.onLoad(ctx, m)
	case *checkpointTick:
		a.onCheckpointTick(ctx)
	case *ckptJob:
		a.onCheckpointDone(ctx, m)
	case *flushNow:
		a.flushQueued = false
		a.flush(ctx)
	case *idleTick:
		a.onIdleTick(ctx)
	case *Passivate:
		a.onPassivate(ctx)
		return
	default:
		if a.cfg.IdleAfter > 0 {
			a.lastRequest, a.idleAsked = time.Since(monoBase), false
		}
		a.handle(ctx, msg)
	}
	a.armIdle(ctx)
}

// Panicked logs a panic of the actor with its stack (actor.PanicHandler); its group
// actor restarts it.
func (a *offsetsActor) Panicked(_ actor.Context, r any) {
	a.log().Error().Interface("panic", r).Bytes("stack", debug.Stack()).Msg("offsets_actor_panic")
}

// handle serves one request, or stashes it while the claim or a load is under way (one
// that needs a load starts it).
func (a *offsetsActor) handle(ctx actor.Context, msg any) {
	if !a.waiting() && a.needsLoad(msg) {
		a.startLoad(ctx, nil)
	}
	if a.waiting() {
		a.stash = append(a.stash, msg)
		actor.HandedOn(ctx)
		return
	}
	a.serve(ctx, msg)
}

// serve serves one request with the group loaded.
func (a *offsetsActor) serve(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *Commit:
		a.handleCommit(ctx, m)
	case *Fetch:
		a.handleFetch(m)
	case *TxnCommit:
		a.handleTxnCommit(ctx, m)
	case *TxnEnd:
		a.handleTxnEnd(ctx, m)
	case *Stat:
		a.handleStat(m)
	case *Delete, *DeleteAll, *DropTopics, *SaveMeta, *Expire:
		a.handleChange(ctx, m)
	case *Flush:
		a.handleFlush(ctx, m)
	}
}

// onStopping makes everything accepted durable, so that a passivated or stopped group
// answers every request it accepted (with success or the write's error code) and leaves
// its file complete for the group's next actor.
func (a *offsetsActor) onStopping(ctx actor.Context) {
	if !a.passivated {
		// A passivated group's series stay: the group is live, and its next offsets
		// actor replaces them (or removes them as it stops).
		a.pub.Remove()
	}
	defer a.unpublishPending()
	if a.idleCancel != nil {
		a.idleCancel()
		a.idleCancel = nil
	}
	if a.stashCancel != nil {
		a.stashCancel()
	}
	if a.waiting() {
		// Stopped before the journal answered or the load was done: nothing waiting was
		// served or changed.
		a.failStash(codeWriteFailed)
	}
	if !a.claiming {
		if a.leavingToJournal() {
			a.journalSync(ctx)
		} else {
			a.flushSync(ctx)
		}
	}
	a.answerFlushes(&Result{})
	if a.ckptCancel != nil {
		a.ckptCancel()
	}
}

// leavingToJournal says whether the broker stops and leaves the group's file behind its
// journal (Config.LeaveToJournal).
func (a *offsetsActor) leavingToJournal() bool {
	return a.cfg.LeaveToJournal != nil && a.gate == nil && a.cfg.LeaveToJournal()
}

// onRestarting answers the queue of the failed incarnation without writing it: its state
// may be what made it panic. What the journal already holds is durable: its waiters are
// answered and the file is brought up to it, since the next incarnation reloads the file.
func (a *offsetsActor) onRestarting(ctx actor.Context) {
	a.pub.Remove()
	defer a.unpublishPending()
	if a.idleCancel != nil {
		a.idleCancel()
		a.idleCancel = nil
	}
	a.waitInflight(ctx)
	for _, q := range a.queue {
		fail(q, codeCrashed)
	}
	a.queue = nil
	a.failStash(codeCrashed)
	if a.stashCancel != nil {
		a.stashCancel()
	}
	if !a.claiming {
		a.checkpointNow(ctx, time.Now().Add(checkpointWait))
	}
	a.answerFlushes(&Result{})
	if a.ckptCancel != nil {
		a.ckptCancel()
	}
}

// utf16Len is the length of s as Java's String.length() counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// publishAll publishes the committed offsets as the actor now serves them. A negative
// one (-1 "none", -2 kafkajs's "earliest": any value a client commits is kept) is not a
// position and has no series: the leader's log end minus it is no lag.
func (a *offsetsActor) publishAll() {
	a.publishPending()
	if a.pub == nil {
		return
	}
	at := make(map[metrics.TopicPartition]int64, len(a.st.offsets))
	for tp, c := range a.st.offsets {
		if c.Offset >= 0 {
			at[metrics.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = c.Offset
		}
	}
	a.pub.Replace(at)
}

// publishOps publishes what a journaled batch changed.
func (a *offsetsActor) publishOps(ops []op) {
	a.publishPending()
	if a.pub == nil {
		return
	}
	for _, o := range ops {
		switch {
		case o.Clear:
			a.pub.Replace(map[metrics.TopicPartition]int64{})
		case o.Set != nil, o.TxnApply != nil:
			for _, f := range append(o.Set, o.TxnApply...) {
				if f.Offset < 0 {
					a.pub.Delete(string(f.Topic), f.Partition) // not a position (publishAll)
					continue
				}
				a.pub.Set(string(f.Topic), f.Partition, f.Offset)
			}
		case o.Del != nil:
			for _, d := range o.Del {
				a.pub.Delete(string(d.Topic), d.Partition)
			}
		}
	}
}

// publishPending brings the pending offsets gauge to what the actor serves.
func (a *offsetsActor) publishPending() {
	n := a.st.pendingCount()
	a.cfg.Metrics.pendingMoved(n - a.pendingShown)
	a.pendingShown = n
}

// unpublishPending takes the actor's pending offsets off the gauge (it stops).
func (a *offsetsActor) unpublishPending() {
	a.cfg.Metrics.pendingMoved(-a.pendingShown)
	a.pendingShown = 0
}
