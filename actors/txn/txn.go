package txn

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/partition"
	"kaas/logs"
	"kaas/storage"
)

// Settings are the coordinator's bounds and timings (config: transaction.*;
// transaction.max.timeout.ms is checked by the connection, before the coordinator).
type Settings struct {
	// Expiration is transactional.id.expiration.ms: an id idle this long in Empty or
	// Complete* is forgotten (Dead).
	Expiration time.Duration
	// MaxPartitions bounds the partitions (and groups) of one transaction; 0: none.
	MaxPartitions int
	// Open bounds the transactions running at once on the broker (nil: no bound).
	Open *Budget
	// CheckpointDelay is how long after a transition the id's file is rewritten (more
	// transitions meanwhile share the write). Default 2 s.
	CheckpointDelay time.Duration
	// MarkerBackoff is the wait before markers that failed retriably are sent again.
	// Default 100 ms, doubling to 5 s.
	MarkerBackoff time.Duration
}

func (s *Settings) defaults() {
	if s.CheckpointDelay <= 0 {
		s.CheckpointDelay = 2 * time.Second
	}
	if s.MarkerBackoff <= 0 {
		s.MarkerBackoff = 100 * time.Millisecond
	}
	if s.Expiration <= 0 {
		s.Expiration = 7 * 24 * time.Hour
	}
}

// Budget counts the transactions running on the broker (Ongoing or Prepare*), bounded.
// Shared by the id actors as the groups' PendingBudget is: one atomic counter.
type Budget struct {
	max int64
	n   atomic.Int64
}

// NewBudget bounds running transactions at max (0 or less: no bound, only counted).
func NewBudget(max int) *Budget { return &Budget{max: int64(max)} }

func (b *Budget) take() bool {
	if b == nil {
		return true
	}
	if n := b.n.Add(1); b.max > 0 && n > b.max {
		b.n.Add(-1)
		return false
	}
	return true
}

func (b *Budget) force() {
	if b != nil {
		b.n.Add(1)
	}
}

func (b *Budget) release() {
	if b != nil {
		b.n.Add(-1)
	}
}

// Open is the number of running transactions.
func (b *Budget) Open() int64 {
	if b == nil {
		return 0
	}
	return b.n.Load()
}

// Config is what one transactional id's actor needs.
type Config struct {
	ID string
	// Meta is the id's replayed state; nil for an id the coordinator does not know yet.
	Meta     *Meta
	Journal  *actor.PID
	FS       storage.FS
	Dir      string // IDsDir
	Settings Settings
	Sides    Sides
	// Topics is the topics manager, which hands out producer ids (partition.InitProducerID)
	// for idempotent and transactional producers alike, so they never collide.
	Topics *actor.PID
	Log    zerolog.Logger
	Now    func() time.Time
	// Metrics count aborts by reason and markers by result (nil: not counted).
	Metrics *Metrics
	// Gate, in a cluster, says whether this broker still holds the lease it held when
	// the actor started: nothing is written (journal, file) once it does not (nil: a
	// broker alone, always).
	Gate func() bool
}

// errLeaseLapsed: a file not written because the broker's lease lapsed.
var errLeaseLapsed = errors.New("transaction state not saved: this broker's lease lapsed")

// mayWrite says whether the actor may write: not released, and the lease still held.
func (a *txnActor) mayWrite() bool {
	return !a.releasing && (a.cfg.Gate == nil || a.cfg.Gate())
}

// Props makes an id's actor.
func Props(cfg Config) *actor.Props {
	cfg.Settings.defaults()
	if cfg.FS == nil {
		cfg.FS = storage.OSFS{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return actor.PropsOf(func() actor.Actor {
		return &txnActor{cfg: cfg, log: cfg.Log.With().Str("actor", "transaction").Str("transactional_id", logs.ID(cfg.ID)).Logger()}
	})
}

// txnActor is one transactional id's coordinator.
type txnActor struct {
	cfg Config
	log zerolog.Logger

	// meta is the id's durable state (nil: not initialized yet); seq its journal record.
	meta     *Meta
	seq      uint64
	savedSeq uint64
	fencing  bool // the PrepareAbort of a fence is being written: shown as PrepareEpochFence
	counted  bool // the running transaction holds a place in Settings.Open

	// busy: a transition or a producer id request is under way; requests wait in queue.
	busy  bool
	queue []request
	waits actor.Pending[func(any)]
	// parked are requests that came while the producer's last transaction's markers were
	// being written and that Apache answers CONCURRENT_TRANSACTIONS, its client then
	// retrying after a backoff: the implicit adds (Produce v12, TxnOffsetCommit v5) of
	// the producer's next transaction (TV2: the producer already has the bumped epoch),
	// which Apache's partition leader retries (KAFKA-18654), the explicit adds of the
	// next one (TV1), an InitProducerId (a TV2 client's reload of its producer id after
	// its first EndTxn), an EndTxn of a valid epoch. They go on once the Complete* is
	// durable (the first add, implicit or TV1, written with it: completeWithNext), or get
	// CONCURRENT_TRANSACTIONS after parkWait; at most maxQueued wait.
	parked    []request
	parkTimer actor.Cancel
	parkGen   uint64

	saving, saveArmed bool
	dead              bool // expired: stops once its file is removed
	stopping          bool // the actor is stopping: nothing new is started
	// releasing: another broker coordinates the id now (cluster.go): nothing more is
	// written, the file is saved (releaseSaved) and the actor stops.
	releasing, releaseSaved bool

	// Timers, each with a guard its message carries.
	deadline    actor.Cancel
	deadlineGen uint64
	expiry      actor.Cancel
	expiryGen   uint64
	round       uint64 // the markers being sent
	remaining   []sideEffect
	backoff     time.Duration
	retry       actor.Cancel
	// completion waits for the running transaction's Complete* (an operator's abort).
	completion []func(done bool)

	// redo is the message a panic dropped and Panicked sent again, redos how often.
	redo  any
	redos int
}

// Internal messages.
type (
	deadlineFired struct{ gen uint64 }
	parkExpired   struct{ gen uint64 }
	expiryFired   struct{ gen uint64 }
	retryMarkers  struct{ round uint64 }
	saveNow       struct{}
	saveDone      struct {
		seq uint64
		err error
	}
	// describeOne asks an id's actor for its Description (the manager's Describe).
	describeOne struct{ reply actor.Promise }
	// summary tells the manager an id's state after each transition (List, metrics).
	summary struct {
		id      string
		pid     int64
		state   State
		startMs int64
	}
)

// maxQueued bounds the requests waiting behind a transition; more get
// CONCURRENT_TRANSACTIONS (retriable).
const maxQueued = 1024

// parkWait bounds how long an implicit add waits for the previous transaction's markers.
const parkWait = 2 * time.Second

func (a *txnActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopping:
		a.onStopping()
	case request:
		a.enqueue(ctx, m)
	case *actor.Settled:
		if then, ok := a.waits.Take(m); ok {
			then(m.Value)
		}
	case *describeOne:
		m.reply.Resolve(a.describe())
	case *deadlineFired:
		a.onDeadline(ctx, m)
	case *parkExpired:
		if m.gen == a.parkGen {
			a.unpark(ctx, false)
		}
	case *expiryFired:
		a.onExpiry(ctx, m)
	case *retryMarkers:
		if m.round == a.round {
			a.sendMarkers(ctx, a.remaining)
		}
	case *saveNow:
		a.saveArmed = false
		a.save(ctx)
	case *saveDone:
		a.onSaved(ctx, m)
	case *releaseID:
		a.onRelease(ctx)
	}
}

func (a *txnActor) now() int64 { return a.cfg.Now().UnixMilli() }

// maxRedeliveries bounds how often one message a panic dropped is sent again.
const maxRedeliveries = 3

// Panicked takes up what a panic in the actor's turn dropped (actor.PanicHandler). The
// actor resumes with its state (ResumeChildren), so a message of its own that the panic
// took is not done by anyone else: the answer to a journal write, to a producer id
// request or to a round of markers (lost, the actor stays busy for ever, every later
// request of the id queued behind it, or its transaction stays in Prepare*), a timer
// (the deadline, a marker retry, the expiry, a save) or a save's end. Such a message is
// sent to the actor again, after what it has queued; a panic that comes back with the
// same message is a bug of its handling, and after maxRedeliveries it is logged and
// dropped rather than looped on. Every handler is guarded (an answer taken once, a
// timer's generation or round), so one that the panic interrupted half way is ignored
// when it comes again. A request is answered by the actor layer (AnswerCrash), and its
// client retries.
func (a *txnActor) Panicked(ctx actor.Context, reason any) {
	msg := ctx.Message()
	switch msg.(type) {
	case *actor.Settled, *deadlineFired, *parkExpired, *expiryFired, *retryMarkers, *saveNow, *saveDone, *describeOne:
	default:
		return // a request (answered by the actor layer), or nothing of the actor's own
	}
	if msg != a.redo {
		a.redo, a.redos = msg, 0
	}
	if a.redos >= maxRedeliveries {
		a.log.Error().Interface("reason", reason).Str("message", fmt.Sprintf("%T", msg)).Int("times", a.redos).Msg("transaction_message_dropped_after_panics")
		a.redo, a.redos = nil, 0
		return
	}
	a.redos++
	ctx.Send(ctx.Self(), msg)
}

// onStarted takes up a replayed state: a Prepare* is driven to its Complete* (the
// markers are idempotent), an Ongoing transaction keeps its deadline.
func (a *txnActor) onStarted(ctx actor.Context) {
	a.meta = a.cfg.Meta
	if a.meta == nil {
		return
	}
	if a.meta.State.open() {
		a.cfg.Settings.Open.force()
		a.counted = true
	}
	a.summarize(ctx)
	switch a.meta.State {
	case PrepareCommit, PrepareAbort:
		a.log.Info().Str("state", a.meta.State.String()).Msg("transaction_completion_resumed")
		a.startMarkers(ctx)
	case Ongoing:
		a.armDeadline(ctx)
	default:
		a.armExpiry(ctx)
	}
}

func (a *txnActor) onStopping() {
	a.halt()
	a.waits.Drain(func(then func(any)) { then(nil) })
}

// halt starts nothing more: the timers are cancelled, the waiting requests answered
// NOT_COORDINATOR, the running transaction's place given back. What is under way (a
// journal write) still gets its answer.
func (a *txnActor) halt() {
	a.stopping = true
	for _, c := range []actor.Cancel{a.deadline, a.expiry, a.retry, a.parkTimer} {
		if c != nil {
			c()
		}
	}
	for _, r := range append(a.queue, a.parked...) {
		r.fail(codeNotCoord)
	}
	a.queue, a.parked = nil, nil
	a.notifyComplete(false)
	if a.counted {
		a.cfg.Settings.Open.release()
		a.counted = false
	}
}

// enqueue handles r now, or after the transition under way.
func (a *txnActor) enqueue(ctx actor.Context, r request) {
	if a.dead || a.stopping {
		r.fail(codeNotCoord)
		return
	}
	if a.busy {
		if len(a.queue) >= maxQueued {
			r.fail(codeConcurrent)
			return
		}
		a.queue = append(a.queue, r)
		actor.HandedOn(ctx)
		return
	}
	a.handle(ctx, r)
}

// drain handles queued requests until one starts a transition.
func (a *txnActor) drain(ctx actor.Context) {
	for !a.busy && len(a.queue) > 0 && !a.dead && !a.stopping {
		r := a.queue[0]
		a.queue = a.queue[1:]
		actor.Handling(ctx, r)
		a.handle(ctx, r)
	}
}

func (a *txnActor) handle(ctx actor.Context, r request) {
	if a.park(ctx, r) {
		return
	}
	switch m := r.(type) {
	case *InitProducerID:
		a.handleInit(ctx, m, noPID)
	case *AddPartitions:
		if m.VerifyOnly {
			m.Reply.Resolve(&PartitionsVerified{Codes: verify(a.meta, m.ProducerID, m.ProducerEpoch, m.Partitions)})
			return
		}
		add, answer, _ := nextAdd(m)
		a.handleAdd(ctx, add, answer)
	case *VerifyPartitions:
		if !m.Add {
			m.Reply.Resolve(&PartitionsVerified{Codes: verify(a.meta, m.ProducerID, m.ProducerEpoch, m.Partitions)})
			return
		}
		add, answer, _ := implicitAdd(m)
		a.handleAdd(ctx, add, answer)
	case *AddOffsets:
		add, answer, _ := nextAdd(m)
		a.handleAdd(ctx, add, answer)
	case *VerifyGroup:
		if !m.Add {
			m.Reply.Resolve(&GroupVerified{ErrorCode: verifyGroup(a.meta, m.ProducerID, m.ProducerEpoch, m.Group)})
			return
		}
		add, answer, _ := implicitAdd(m)
		a.handleAdd(ctx, add, answer)
	case *EndTxn:
		a.handleEnd(ctx, m, noPID)
	case *abortFor:
		a.handleAdminAbort(ctx, m) // admin.go
	case *checkFor:
		a.handleCheck(m)
	}
}

// park keeps a request that would be answered CONCURRENT_TRANSACTIONS only because the
// producer's last transaction is completing (Prepare*, its markers being written; not a
// fence being written) until its Complete* is durable, then handles it: the answer the
// client's retry would get, without the client's backoff (see parked).
func (a *txnActor) park(ctx actor.Context, r request) bool {
	m := a.meta
	if m == nil || (m.State != PrepareCommit && m.State != PrepareAbort) || a.fencing || len(a.parked) >= maxQueued {
		return false
	}
	if !waitsForCompletion(a.cfg.ID, m, r, a.now()) {
		return false
	}
	a.parked = append(a.parked, r)
	actor.HandedOn(ctx)
	a.armPark(ctx)
	return true
}

// armPark starts the parked requests' wait (parkWait) unless it runs already.
func (a *txnActor) armPark(ctx actor.Context) {
	if a.parkTimer == nil {
		a.parkGen++
		a.parkTimer = actor.After(ctx, parkWait, &parkExpired{gen: a.parkGen})
	}
}

// unpark lets the parked requests go on (the transaction completed), or answers them
// CONCURRENT_TRANSACTIONS (the wait ran out).
func (a *txnActor) unpark(ctx actor.Context, completed bool) {
	if a.parkTimer != nil {
		a.parkTimer()
		a.parkTimer = nil
	}
	a.parkGen++
	parked := a.parked
	a.parked = nil
	if !completed {
		for _, r := range parked {
			r.fail(codeConcurrent)
		}
		return
	}
	a.queue = append(parked, a.queue...)
}

// newProducerID asks the topics manager for a fresh producer id, then runs then with
// it (noPID when none came).
func (a *txnActor) newProducerID(ctx actor.Context, then func(pid int64)) {
	if a.cfg.Topics == nil {
		then(noPID)
		return
	}
	a.busy = true
	p := a.waits.Await(ctx, func(v any) {
		a.busy = false
		r, _ := v.(*partition.ProducerID)
		if r == nil || r.ErrorCode != 0 {
			then(noPID)
		} else {
			then(r.ID)
		}
		a.drain(ctx)
	})
	ctx.Send(a.cfg.Topics, &partition.InitProducerID{Reply: p})
}

func (a *txnActor) handleInit(ctx actor.Context, m *InitProducerID, newPID int64) {
	plan := planInit(a.cfg.ID, a.meta, initReq{TimeoutMs: m.TimeoutMs, PID: m.ProducerID, Epoch: m.ProducerEpoch}, newPID, a.now())
	switch {
	case plan.needPID && newPID >= 0:
		m.fail(codeNotAvailable) // cannot happen: a fresh id satisfies the plan
	case plan.needPID:
		a.newProducerID(ctx, func(pid int64) {
			if pid < 0 {
				m.fail(codeNotAvailable)
				return
			}
			a.handleInit(ctx, m, pid)
		})
	case plan.code != codeNone:
		m.fail(plan.code)
	case plan.fence:
		a.log.Info().Int64("producer_id", a.meta.ProducerID).Int16("epoch", a.meta.Epoch).Msg("transaction_fenced_by_new_producer")
		a.fence(ctx, plan.next, func(ok bool) {
			if ok {
				a.cfg.Metrics.aborted(abortFence)
			}
			m.fail(pick(ok, codeConcurrent, codeNotCoord))
		})
	default:
		a.write(ctx, plan.next, func(ok bool) {
			if !ok {
				m.fail(codeNotCoord)
				return
			}
			m.Reply.Resolve(&ProducerIDInitialized{ProducerID: a.meta.ProducerID, ProducerEpoch: a.meta.Epoch})
		})
	}
}

func (a *txnActor) handleAdd(ctx actor.Context, r addReq, answer func(int16)) {
	r.MaxTPs = a.cfg.Settings.MaxPartitions
	next, code := planAdd(a.meta, r, a.now())
	if code == codeTooMany {
		a.log.Warn().Int("max_partitions", r.MaxTPs).Msg("transaction_partitions_limit_reached")
	}
	if next == nil {
		answer(code)
		return
	}
	starts := !a.meta.State.open()
	if starts && !a.cfg.Settings.Open.take() {
		a.log.Warn().Int64("open", a.cfg.Settings.Open.Open()).Msg("transactions_open_limit_reached")
		answer(kerr.CoordinatorLoadInProgress.Code)
		return
	}
	if starts {
		a.counted = true
	}
	a.write(ctx, next, func(ok bool) {
		if !ok && starts {
			a.cfg.Settings.Open.release()
			a.counted = false
		}
		answer(pick(ok, codeNone, codeNotCoord))
	})
}

func (a *txnActor) handleEnd(ctx actor.Context, m *EndTxn, newPID int64) {
	plan := planEnd(a.meta, endReq{PID: m.ProducerID, Epoch: m.ProducerEpoch, Commit: m.Commit, TV2: m.TV2}, newPID, a.now())
	switch {
	case plan.needPID:
		a.newProducerID(ctx, func(pid int64) {
			if pid < 0 {
				m.fail(codeNotAvailable)
				return
			}
			a.handleEnd(ctx, m, pid)
		})
		return
	case plan.next == nil:
		m.Reply.Resolve(&TxnEnded{ErrorCode: plan.code, ProducerID: plan.pid, ProducerEpoch: plan.epoch})
		return
	}
	if !a.meta.State.open() && !a.counted { // an empty abort (TV2)
		a.cfg.Settings.Open.force()
		a.counted = true
	}
	a.write(ctx, plan.next, func(ok bool) {
		if !ok {
			m.fail(codeNotCoord)
			return
		}
		if plan.next.State == PrepareAbort {
			a.cfg.Metrics.aborted(abortClient)
		}
		// The Prepare* is durable: the decision is made, the client may go on. The
		// markers follow (startMarkers, from changed).
		m.Reply.Resolve(&TxnEnded{ProducerID: plan.pid, ProducerEpoch: plan.epoch})
	})
}

// fence writes next, the PrepareAbort of a fence, showing PrepareEpochFence meanwhile.
func (a *txnActor) fence(ctx actor.Context, next *Meta, then func(ok bool)) {
	a.fencing = true
	a.write(ctx, next, func(ok bool) {
		a.fencing = false
		then(ok)
	})
}

// write makes next durable in the journal; only then does it become the state, and
// then runs (ok false: the write failed, the state is unchanged).
func (a *txnActor) write(ctx actor.Context, next *Meta, then func(ok bool)) {
	if !a.mayWrite() {
		// Released to another broker, or the lease lapsed: nothing more is written here
		// (the new owner goes on from the id's file and this broker's journal).
		then(false)
		return
	}
	a.busy = true
	if a.cfg.Journal == nil {
		panic("transaction actor without a journal")
	}
	stamp(next, a.meta)
	p := a.waits.Await(ctx, func(v any) {
		a.busy = false
		defer a.finishRelease(ctx)
		r, _ := v.(*journal.Appended)
		if r == nil || r.Err != nil {
			if r != nil {
				a.log.Error().Err(r.Err).Str("state", next.State.String()).Msg("transaction_state_write_failed")
			}
			then(false)
			a.drain(ctx)
			return
		}
		prev := a.meta
		a.meta, a.seq = next, r.Seq
		if !a.mayWrite() {
			// The lease this broker held when it wrote lapsed meanwhile: another broker
			// may coordinate the id now and goes on from what it adopted. Nothing is
			// answered as done here (the record stays in this journal, which it reads).
			then(false)
			return
		}
		a.changed(ctx, prev)
		then(true)
		a.drain(ctx)
	})
	ctx.Send(a.cfg.Journal, &journal.Append{Key: a.cfg.ID, Data: encode(next), Reply: p})
}

// changed follows a durable transition: timers, the open count, the manager's summary,
// the file's save, and the markers of a Prepare*.
func (a *txnActor) changed(ctx actor.Context, prev *Meta) {
	m := a.meta
	if a.counted && !m.State.open() {
		a.cfg.Settings.Open.release()
		a.counted = false
	}
	if m.State == Ongoing && (prev == nil || prev.State != Ongoing || prev.StartMs != m.StartMs) {
		a.armDeadline(ctx)
	} else if m.State != Ongoing {
		a.cancelDeadline()
	}
	if m.State.quiet() {
		a.armExpiry(ctx)
	} else if a.expiry != nil {
		a.expiry()
		a.expiry = nil
		a.expiryGen++
	}
	a.summarize(ctx)
	if !a.saveArmed && !a.saving {
		a.saveArmed = true
		actor.After(ctx, a.cfg.Settings.CheckpointDelay, &saveNow{})
	}
	switch m.State {
	case PrepareCommit, PrepareAbort:
		a.startMarkers(ctx)
	case CompleteCommit, CompleteAbort:
		if prev != nil && (prev.State == PrepareCommit || prev.State == PrepareAbort) {
			a.log.Debug().Str("state", m.State.String()).Msg("transaction_completed")
		}
		if len(a.parked) > 0 || a.parkTimer != nil {
			a.unpark(ctx, true) // drained by write's continuation
		}
		a.notifyComplete(true)
	}
}

func (a *txnActor) summarize(ctx actor.Context) {
	if p := ctx.Parent(); p != nil {
		ctx.Send(p, &summary{id: a.cfg.ID, pid: a.meta.ProducerID, state: a.meta.State, startMs: a.meta.StartMs})
	}
}

// armDeadline sets the running transaction's timeout: aborted, fencing its producer,
// once StartMs + TimeoutMs has passed (Apache looks every 10 s; this fires on time).
func (a *txnActor) armDeadline(ctx actor.Context) {
	a.cancelDeadline()
	d := time.Duration(a.meta.StartMs+int64(a.meta.TimeoutMs)-a.now()) * time.Millisecond
	a.deadline = actor.After(ctx, max(d, 0), &deadlineFired{gen: a.deadlineGen})
}

func (a *txnActor) cancelDeadline() {
	if a.deadline != nil {
		a.deadline()
		a.deadline = nil
	}
	a.deadlineGen++
}

func (a *txnActor) onDeadline(ctx actor.Context, m *deadlineFired) {
	if m.gen != a.deadlineGen || a.meta == nil || a.meta.State != Ongoing {
		return
	}
	if a.busy {
		// A transition is being written (an EndTxn, say): look again after it.
		a.deadline = actor.After(ctx, 10*time.Millisecond, &deadlineFired{gen: a.deadlineGen})
		return
	}
	a.log.Info().Int64("producer_id", a.meta.ProducerID).Int16("epoch", a.meta.Epoch).
		Int32("timeout_ms", a.meta.TimeoutMs).Msg("transaction_timed_out_aborting")
	a.fence(ctx, fenced(a.meta, a.now()), func(ok bool) {
		if ok {
			a.cfg.Metrics.aborted(abortTimeout)
		}
		if !ok && !a.stopping { // look again shortly: the abort must happen
			a.deadline = actor.After(ctx, time.Second, &deadlineFired{gen: a.deadlineGen})
		}
	})
}

func (a *txnActor) armExpiry(ctx actor.Context) {
	if a.expiry != nil {
		a.expiry()
	}
	a.expiryGen++
	d := time.Duration(a.meta.UpdateMs-a.now())*time.Millisecond + a.cfg.Settings.Expiration
	a.expiry = actor.After(ctx, max(d, 0), &expiryFired{gen: a.expiryGen})
}

// onExpiry forgets an id idle past transactional.id.expiration.ms: Dead is recorded,
// its file removed, and the actor stops.
func (a *txnActor) onExpiry(ctx actor.Context, m *expiryFired) {
	if m.gen != a.expiryGen || a.meta == nil || a.dead {
		return
	}
	if a.busy || !expired(a.meta, a.cfg.Settings.Expiration.Milliseconds(), a.now()) {
		a.armExpiry(ctx)
		return
	}
	next := a.meta.clone()
	next.State, next.UpdateMs = Dead, a.now()
	a.write(ctx, next, func(ok bool) {
		if !ok {
			if !a.stopping {
				a.armExpiry(ctx)
			}
			return
		}
		a.log.Info().Msg("transactional_id_expired")
		a.dead = true
		for _, r := range a.queue {
			r.fail(codeNotCoord)
		}
		a.queue = nil
		a.save(ctx) // removes the file; the actor stops once it is gone
	})
}

// save writes the id's file off the turn, then lets the journal drop what it covers.
func (a *txnActor) save(ctx actor.Context) {
	if a.saving || a.meta == nil || a.seq <= a.savedSeq {
		if a.dead && !a.saving && a.seq <= a.savedSeq {
			ctx.Stop(ctx.Self())
		}
		return
	}
	a.saving = true
	m, seq, fsys, dir, gate := a.meta, a.seq, a.cfg.FS, a.cfg.Dir, a.cfg.Gate
	actor.Background(ctx, func() any {
		if gate != nil && !gate() {
			return &saveDone{seq: seq, err: errLeaseLapsed}
		}
		return &saveDone{seq: seq, err: saveID(fsys, dir, m, seq)}
	})
}

func (a *txnActor) onSaved(ctx actor.Context, m *saveDone) {
	a.saving = false
	defer a.finishRelease(ctx)
	if m.err != nil {
		a.log.Error().Err(m.err).Msg("transaction_state_save_failed")
		if a.releasing {
			return // the adopting broker reads this journal
		}
		if !a.saveArmed {
			a.saveArmed = true
			actor.After(ctx, a.cfg.Settings.CheckpointDelay, &saveNow{})
		}
		return
	}
	a.savedSeq = max(a.savedSeq, m.seq)
	ctx.Send(a.cfg.Journal, &journal.Checkpointed{Key: a.cfg.ID, Seq: m.seq})
	if a.seq > a.savedSeq || a.dead {
		a.save(ctx)
	}
}

func (a *txnActor) describe() Description {
	if a.meta == nil || a.dead {
		return Description{ID: a.cfg.ID, ErrorCode: kerr.TransactionalIDNotFound.Code}
	}
	m := a.meta
	st := m.State
	if a.fencing {
		st = PrepareEpochFence
	}
	return Description{ID: m.ID, State: st, ProducerID: m.ProducerID, Epoch: m.Epoch, TimeoutMs: m.TimeoutMs,
		StartMs: m.StartMs, Partitions: m.clone().Partitions}
}
