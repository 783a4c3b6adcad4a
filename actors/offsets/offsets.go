package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"strings"
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
	// codeBadOffset answers a committed offset or leader epoch below -1, per partition.
	codeBadOffset = kerr.OffsetOutOfRange.Code
	// codeFenced answers everything once the group is no longer this broker's to write
	// (cluster): clients look the coordinator up again.
	codeFenced = kerr.NotCoordinator.Code
)

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
	// Metrics is shared by every group's actor; nil records nothing.
	Metrics *Metrics
	// Now stamps commits; nil is time.Now.
	Now func() time.Time
	// RetryLoadAfter is how long a group whose file failed to load waits before it reads
	// the file again (so an operator's repair is picked up without a restart); 0 is 5 s.
	RetryLoadAfter time.Duration
	// Journal is the broker's journal actor (JournalProps), required: a batch is durable
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

// Props makes the offsets actor of cfg.Group. Its parent (the group actor) should stop it
// with Poison, not Stop: protoactor drops the user messages still in a stopped actor's
// mailbox, and with them their promises; after Poison everything sent before is answered.
// A Config without a Journal is a wiring bug, and Props panics on it: the actor has no
// other way to make a change durable.
func Props(cfg Config) *actor.Props {
	if cfg.Journal == nil {
		panic("offsets.Props: Config.Journal is nil (the broker's journal actor, JournalProps)")
	}
	c := cfg.withDefaults() // one copy, shared by every incarnation
	return actor.PropsOf(func() actor.Actor { return newOffsetsActor(&c) })
}

// offsetsActor owns one group's file. It loads the file on its first request and keeps
// the durable state in memory; requests that change it queue, and a flushNow message
// the actor sends itself appends them all to the journal as one record.
//
// Group commit: the first request to queue sends flushNow to self. Everything already in
// the mailbox is ahead of it, so it joins the same batch; while up to maxInflight batches
// wait for the journal's fsync, new requests queue and all go into the next batch. Every
// waiter is answered right after the fsync that holds its request, and the state is
// touched only in Receive. The group file is rewritten behind the journal (a checkpoint,
// on a goroutine of its own); only a stopping or restarting actor writes it in Receive.
type offsetsActor struct {
	cfg  *Config // shared by the incarnations; never written
	name string  // file name in cfg.Dir
	path string
	log  logs.Tagged

	loaded   bool
	broken   error // the load failed; every request answers codeBroken
	brokenAt time.Time
	dirReady bool
	tomb     bool  // the group's tombstone (tombstone.go) may be on disk
	exists   bool  // the file exists on disk
	st       state // what the file holds
	metaJSON metaCache

	queue       []queued
	flushQueued bool
	took        bool // this turn's request was stashed or handed to its handler (answerUntaken)

	// The batches appended to the journal (journal.go) and not yet answered, the
	// sequence number of the last record applied to st and of the last one the file
	// holds, and the checkpoint being written or scheduled.
	inflight      []*batch // appended, oldest first; answered in this order
	lastSeq       uint64
	fileSeq       uint64
	ckpt          *ckptJob
	ckptScheduled bool
	ckptCancel    actor.Cancel

	// claiming: the journal has not yet said whether an earlier actor of the group left
	// state behind its file; requests wait in stash.
	claiming    bool
	claimID     uint64
	claimCancel actor.Cancel
	stash       []any
	hold        hold // hold.go: the group is held after a damaged journal segment
	// fenced: the gate closed, or another broker wrote the file under a newer epoch.
	// The group is no longer this actor's: everything answers NOT_COORDINATOR and
	// nothing is written.
	fenced bool
	// pub publishes the committed offsets served (kaas_group_committed_offset, lag).
	pub *metrics.GroupOffsets
	// failLog and ckptFailLog keep a failure that repeats with every batch or
	// checkpoint (a full disk) to one line per interval; made when first needed.
	failLog, ckptFailLog *logs.Limiter
}

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

	id   uint64 // the promise the journal resolves
	done chan Appended
}

// maxInflight is how many batches of one group may wait for the journal at once. Two
// keep the journal busy: the next batch is in its mailbox while an fsync runs, instead
// of being sent after the answer comes back. A batch is built on the state the batches
// before it will make (its ops and answers), and once durable its ops are applied to
// the actor's state: what the actor serves is always what the journal holds, also when
// a batch before it failed.
const maxInflight = 2

// ckptJob is a checkpoint written off Receive: the file as of journal record seq.
type ckptJob struct {
	seq  uint64
	done chan struct{} // closed when err and took are set
	err  error
	took time.Duration
	tomb bool // what a.tomb is once the write succeeded
}

// checkpointTick tells the actor to write its file.
type checkpointTick struct{}

// queued is a request waiting for the next write.
type queued struct {
	msg   any
	codes []int16 // a Commit's per-entry codes found before the write (OFFSET_METADATA_TOO_LARGE)
}

// flushNow tells the actor to write what has queued.
type flushNow struct{}

func newOffsetsActor(cfg *Config) *offsetsActor {
	name := FileName(cfg.Group)
	a := &offsetsActor{
		cfg:  cfg,
		name: name,
		path: filepath.Join(cfg.Dir, name),
		st:   newState(),
	}
	a.log = logs.Tag(&a.cfg.Log, "group", logs.ID(cfg.Group)).And("file", name)
	return a
}

// limited is the limiter *l, made at its first use: most groups never fail a write.
func limited(l **logs.Limiter) *logs.Limiter {
	if *l == nil {
		*l = logs.NewLimiter(errorLogInterval)
	}
	return *l
}

func (a *offsetsActor) Receive(ctx actor.Context) {
	a.took = false
	defer a.answerUntaken(ctx)
	msg := ctx.Message()
	switch m := msg.(type) {
	case *actor.Started:
		a.pub = a.cfg.Metrics.offsets().Group(a.cfg.Group)
		a.claim(ctx)
	case *actor.Stopping:
		a.onStopping(ctx)
	case *actor.Restarting:
		a.onRestarting(ctx)
	case *actor.Settled:
		if a.claiming && m.ID == a.claimID {
			a.onClaimed(ctx, m.Value)
			return
		}
		a.onAppended(ctx, m)
	case *claimTimeout:
		if a.claiming {
			// Serving the file now could hand out offsets older than the journal's: the
			// waiting requests are told to retry, and the actor goes on waiting.
			a.log.Error().Dur("waited_ms", a.cfg.ClaimWait).Int("requests", len(a.stash)).
				Msg("offsets_journal_claim_unanswered_requests_retried")
			a.failStash(codeLoading)
			a.claimCancel = actor.After(ctx, a.cfg.ClaimWait, &claimTimeout{})
		}
	case *checkpointTick:
		a.onCheckpointTick(ctx)
	case *ckptJob:
		a.onCheckpointDone(ctx, m)
	case *flushNow:
		a.flushQueued = false
		a.flush(ctx)
	default:
		a.took = true // from here the stash or the handler's guard answers a panic
		if a.claiming {
			a.stash = append(a.stash, msg)
			return
		}
		a.handle(ctx, msg)
	}
}

// answerUntaken answers the request of a Receive that panicked before it was stashed
// or handled (protoactor drops the message a panic came from, and its group would wait
// for the answer), then lets the panic go on to the supervisor.
func (a *offsetsActor) answerUntaken(ctx actor.Context) {
	if a.took {
		return
	}
	r := recover()
	if r == nil {
		return
	}
	a.log.Error().Interface("panic", r).Bytes("stack", debug.Stack()).Msg("offsets_actor_panic")
	fail(queued{msg: ctx.Message()}, codeCrashed)
	panic(r)
}

// handle serves one request.
func (a *offsetsActor) handle(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *Commit:
		defer a.answerOnPanic(m)
		a.handleCommit(ctx, m)
	case *Fetch:
		defer a.answerOnPanic(m)
		a.handleFetch(m)
	case *Stat:
		defer a.answerOnPanic(m)
		a.handleStat(m)
	case *Delete, *DeleteAll, *DropTopics, *SaveMeta, *Expire:
		defer a.answerOnPanic(m)
		a.handleChange(ctx, m)
	case *Flush:
		defer a.answerOnPanic(m)
		a.flushSync(ctx)
		m.Reply.Resolve(&Result{})
	}
}

// claim asks the journal, before the first request is served, whether an earlier actor
// of this group left state it could not write to the file (Unsaved). Requests wait in
// the stash until the journal answers.
func (a *offsetsActor) claim(ctx actor.Context) {
	p := actor.NewPromise(ctx, ctx.Self())
	a.claiming, a.claimID = true, p.ID()
	ctx.Send(a.cfg.Journal, &Claim{Group: a.cfg.Group, Reply: p})
	a.claimCancel = actor.After(ctx, a.cfg.ClaimWait, &claimTimeout{})
}

type claimTimeout struct{}

// onClaimed takes what the journal kept for the group (usually nothing), then serves
// the stashed requests in order.
func (a *offsetsActor) onClaimed(ctx actor.Context, v any) {
	a.claiming = false
	if a.claimCancel != nil {
		a.claimCancel()
	}
	if c, ok := v.(*Claimed); ok && len(c.Hold) > 0 {
		a.hold.markers = c.Hold
	}
	if c, ok := v.(*Claimed); ok && c.Unsaved != nil {
		u := c.Unsaved
		a.loaded, a.broken = true, nil
		st, exists, err := unsavedState(u)
		if err != nil {
			// Data is what encodeFile made: a bug, not a disk. The older file is not
			// served instead.
			a.log.Error().Err(err).Msg("offsets_state_from_journal_undecodable")
			a.broken, a.brokenAt = fmt.Errorf("state left with the journal: %w", err), a.cfg.Now()
		}
		if disk, ok := readEpoch(a.cfg.FS, a.path); a.cfg.Gate != nil && ok && disk > st.epoch {
			// Left by this broker as an earlier owner: the group's newer owner has
			// replayed it since. The file is the truth.
			a.log.Warn().Uint64("epoch", st.epoch).Uint64("file_epoch", disk).Msg("offsets_journal_state_older_than_file_dropped")
			a.loaded = false
		} else {
			a.st, a.exists = st, exists
			a.publishAll()
			a.lastSeq, a.fileSeq = u.Seq, 0
			a.log.Warn().Uint64("seq", u.Seq).Msg("offsets_state_taken_from_journal_file_behind")
			a.takeOver()
			a.scheduleCheckpoint(ctx)
		}
	}
	for len(a.stash) > 0 {
		msg := a.stash[0]
		a.stash[0] = nil
		a.stash = a.stash[1:]
		a.handle(ctx, msg)
	}
	a.stash = nil // the array would keep the requests that waited for the load
}

// failStash answers every stashed request with code. A SaveMeta without a reply has no
// one to answer: it stays stashed.
func (a *offsetsActor) failStash(code int16) {
	kept := a.stash[:0]
	for _, msg := range a.stash {
		if sm, ok := msg.(*SaveMeta); ok && !sm.Reply.Valid() {
			kept = append(kept, msg)
			continue
		}
		fail(queued{msg: msg}, code)
	}
	clear(a.stash[len(kept):])
	a.stash = kept
}

// ready loads the file on first use and says whether the group can be served.
func (a *offsetsActor) ready() bool {
	if a.holding() || a.fenced {
		return false
	}
	if a.broken != nil && a.cfg.Now().Sub(a.brokenAt) >= a.cfg.RetryLoadAfter {
		a.loaded = false
	}
	if !a.loaded {
		a.load()
	}
	return a.broken == nil
}

// load reads the file. A missing file is an empty group; a file that cannot be read or
// understood, or holds another group, puts the actor in broken mode: it is neither
// deleted nor overwritten, and every request answers COORDINATOR_NOT_AVAILABLE until a
// later load (after RetryLoadAfter) succeeds.
func (a *offsetsActor) load() {
	a.loaded = true
	// A leftover tmp file is a write that was cut short; the file itself is intact.
	if err := a.cfg.FS.Remove(a.path + tmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn().Err(err).Msg("offsets_tmp_cleanup_failed")
	}
	wasBroken := a.broken != nil
	b, err := a.cfg.FS.ReadFile(a.path)
	var reason string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a.st, a.exists, a.broken = newState(), false, nil
		// A group deleted in a cluster keeps its epoch in its tombstone: a group
		// created again goes on from there.
		if e, ok := readTombEpoch(a.cfg.FS, a.path); ok {
			a.st.epoch, a.tomb = e, true
		}
	case err != nil:
		reason, a.broken = "unreadable", fmt.Errorf("read %s: %w", a.path, err)
	default:
		id, st, derr := decodeFile(b)
		switch {
		case derr != nil:
			reason, a.broken = "corrupt", fmt.Errorf("%s: %w", a.path, derr)
		case id != a.cfg.Group:
			reason, a.broken = "corrupt", fmt.Errorf("%s: holds group %q", a.path, logs.ID(id))
		default:
			a.st, a.exists, a.broken = st, true, nil
		}
	}
	if a.broken != nil {
		a.brokenAt = a.cfg.Now()
		if !wasBroken {
			// Once per incarnation: the group keeps answering COORDINATOR_NOT_AVAILABLE
			// and the metric counts it; the retries are not logged again.
			a.cfg.Metrics.loadFailed(reason)
			a.log.Error().Err(a.broken).Str("reason", reason).
				Msg("offsets_file_unusable_group_unavailable_until_repaired")
		}
		return
	}
	a.publishAll()
	if wasBroken {
		a.log.Info().Int("offsets", len(a.st.offsets)).Msg("offsets_file_loaded_after_repair")
	}
	a.takeOver()
}

// takeOver, in a cluster, moves the group to the next ownership epoch and makes that
// durable before anything is served: from then on a record or file of an earlier owner
// is told apart (replay skips it, a checkpoint of it is refused).
func (a *offsetsActor) takeOver() {
	if a.cfg.Gate == nil || a.broken != nil {
		return
	}
	a.st.epoch++
	if !a.exists {
		return // nothing on disk to fence; the first write carries the epoch
	}
	if !a.mayWriteFile() {
		return
	}
	if err := a.writeFile(a.st, a.exists); err != nil {
		a.broken, a.brokenAt = fmt.Errorf("take over %s: %w", a.path, err), a.cfg.Now()
		a.log.Error().Err(err).Msg("offsets_takeover_write_failed")
		return
	}
	a.log.Info().Uint64("epoch", a.st.epoch).Msg("offsets_group_taken_over")
}

// fence marks the group as no longer this actor's.
func (a *offsetsActor) fence(reason string) {
	if !a.fenced {
		a.fenced = true
		// Another broker serves the group now: its lag is that broker's to report.
		a.pub.Remove()
		a.pub = nil
		a.log.Warn().Str("reason", reason).Uint64("epoch", a.st.epoch).Msg("offsets_group_fenced")
	}
}

// mayWriteFile, in a cluster, checks the gate and that the file on disk is not of a
// newer epoch than this actor's (another broker took the group over): either fences the
// actor and refuses the write.
func (a *offsetsActor) mayWriteFile() bool {
	if a.cfg.Gate == nil {
		return true
	}
	if a.fenced {
		return false
	}
	if !a.cfg.Gate() {
		a.fence("gate_closed")
		return false
	}
	if e, ok := readEpoch(a.cfg.FS, a.path); ok && e > a.st.epoch {
		a.fence("file_of_newer_epoch")
		return false
	}
	return true
}

func (a *offsetsActor) handleCommit(ctx actor.Context, m *Commit) {
	if !a.ready() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	codes := make([]int16, len(m.Entries))
	valid := 0
	for i, e := range m.Entries {
		// Apache compares String.length(), UTF-16 units, not bytes
		// (GroupMetadataManager.validateOffsetMetadataLength).
		if utf16Len(e.Metadata) > a.cfg.MaxMetadataBytes {
			codes[i] = kerr.OffsetMetadataTooLarge.Code
			continue
		}
		// Apache stores any offset; kaas refuses what its file reader would take for
		// damage (fileOffset.check): below -1, Kafka's "none", no offset or epoch means
		// anything a consumer could resume from.
		if e.Offset < -1 || e.LeaderEpoch < -1 {
			codes[i] = codeBadOffset
			continue
		}
		valid++
	}
	if valid == 0 {
		// Nothing to store: Apache writes nothing when every partition is oversized.
		m.Reply.Resolve(&CommitResult{Codes: codes})
		return
	}
	a.enqueue(ctx, queued{msg: m, codes: codes})
}

func (a *offsetsActor) handleFetch(m *Fetch) {
	if !a.ready() {
		m.Reply.Resolve(&FetchResult{ErrorCode: codeBroken})
		return
	}
	// Only what is on disk is visible: queued commits are not acknowledged yet, and the
	// pending (transactional) layer never is.
	res := &FetchResult{}
	if m.Partitions == nil {
		res.Offsets = make(map[TopicPartition]Committed, len(a.st.offsets))
		for tp, o := range a.st.offsets {
			res.Offsets[tp] = o
		}
	} else {
		res.Offsets = make(map[TopicPartition]Committed, len(m.Partitions))
		for _, tp := range m.Partitions {
			if o, ok := a.st.offsets[tp]; ok {
				res.Offsets[tp] = o
			}
		}
	}
	m.Reply.Resolve(res)
}

func (a *offsetsActor) handleStat(m *Stat) {
	if !a.ready() {
		m.Reply.Resolve(&Status{ErrorCode: codeBroken})
		return
	}
	m.Reply.Resolve(a.status())
}

func (a *offsetsActor) status() *Status {
	return &Status{Exists: a.exists, Meta: a.st.meta, Count: len(a.st.offsets)}
}

func (a *offsetsActor) handleChange(ctx actor.Context, m any) {
	if !a.ready() {
		fail(queued{msg: m}, codeBroken)
		return
	}
	// A SaveMeta without a reply is journaled like any change: the file must never hold
	// what the journal does not (replay would set older records over it).
	a.enqueue(ctx, queued{msg: m})
}

func (a *offsetsActor) enqueue(ctx actor.Context, q queued) {
	a.queue = append(a.queue, q)
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
	data, err := encodeRecord(a.cfg.Group, a.st.epoch, b.rec.ops)
	if err == nil {
		err = b.rec.err
	}
	if err != nil {
		a.queue = nil
		a.log.Error().Err(err).Int("requests", len(b.reqs)).Msg("offsets_write_failed")
		a.failBatch(b, codeWriteFailed)
		return
	}
	p := actor.NewPromise(ctx, ctx.Self())
	b.id, b.done = p.ID(), make(chan Appended, 1)
	a.inflight, a.queue = append(a.inflight, b), nil
	ctx.Send(a.cfg.Journal, &Append{Group: a.cfg.Group, Data: data, Done: b.done, Reply: p})
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
	if commitsOnly(a.queue) {
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
		b.results[i], changed, n = apply(&b.next, &b.exists, q, now, b.rec)
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
	if b.expired > 0 {
		a.log.Info().Int("expired", b.expired).Bool("file_removed", !b.exists).Msg("offsets_expired")
	}
	for i, q := range b.reqs {
		resolve(q.msg, b.results[i])
	}
}

// failBatch answers every request of a batch that did not become durable with code; the
// state stays as it was.
func (a *offsetsActor) failBatch(b *batch, code int16) {
	for _, q := range b.reqs {
		// A SaveMeta without a reply has no one to tell, and its meta is dropped: a
		// checkpoint must never write what the journal does not hold, or replay would
		// set older records over it.
		fail(q, code)
	}
}

// onAppended takes the journal's answer to the oldest batch in flight, then sends the
// next.
func (a *offsetsActor) onAppended(ctx actor.Context, m *actor.Settled) {
	if len(a.inflight) == 0 || m.ID != a.inflight[0].id {
		return // answered already, while stopping
	}
	a.finishInflight(ctx, <-a.inflight[0].done, true)
	a.flush(ctx)
}

// finishInflight answers the oldest batch in flight with the journal's outcome. A
// durable batch's ops are applied to the state; a failed one changes nothing (the
// batches after it carry only their own ops).
func (a *offsetsActor) finishInflight(ctx actor.Context, res Appended, schedule bool) {
	b := a.inflight[0]
	// The slot is cleared, and the slice dropped when empty: a resliced array would keep
	// the last batch (its requests, results and a copy of the state) for the actor's life.
	a.inflight[0] = nil
	if a.inflight = a.inflight[1:]; len(a.inflight) == 0 {
		a.inflight = nil
	}
	if res.Err != nil {
		limited(&a.failLog).Event(a.log.Error()).Err(res.Err).Int("requests", len(b.reqs)).Msg("offsets_write_failed")
		a.failBatch(b, codeWriteFailed)
		return
	}
	if a.cfg.Gate != nil && !a.cfg.Gate() {
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
	t := time.NewTimer(flushWait)
	defer t.Stop()
	for len(a.inflight) > 0 {
		select {
		case res := <-a.inflight[0].done:
			a.finishInflight(ctx, res, false)
		case <-t.C:
			a.log.Error().Dur("waited_ms", flushWait).Int("batches", len(a.inflight)).Msg("offsets_journal_did_not_answer")
			for _, b := range a.inflight {
				a.failBatch(b, codeWriteFailed)
			}
			a.inflight = nil
		}
	}
}

// flushWait bounds how long a stopping actor waits for the journal's answers to its
// batches in flight (the journal answers a failed write at once: this is for a journal
// stuck in fdatasync).
const flushWait = 5 * time.Second

// StopWait is how long a stopping offsets actor may take to answer Flush when its file
// writes do not hang: the group, which waits for it, waits a little longer, so the
// inner wait always ends first.
const StopWait = flushWait + 5*time.Second

func (a *offsetsActor) scheduleCheckpoint(ctx actor.Context) {
	if a.ckptScheduled {
		return
	}
	a.ckptScheduled = true
	a.ckptCancel = actor.After(ctx, a.cfg.CheckpointInterval, &checkpointTick{})
}

// onCheckpointTick rewrites the group file with everything journaled so far, on its own
// goroutine: commits go on meanwhile. One checkpoint runs at a time.
func (a *offsetsActor) onCheckpointTick(ctx actor.Context) {
	a.ckptScheduled = false
	if a.lastSeq <= a.fileSeq {
		return
	}
	if a.ckpt != nil {
		a.scheduleCheckpoint(ctx)
		return
	}
	if !a.mayWriteFile() {
		return
	}
	data, err := a.fileData(a.st, a.exists)
	if err != nil {
		a.log.Error().Err(err).Msg("offsets_checkpoint_failed")
		a.scheduleCheckpoint(ctx)
		return
	}
	job := &ckptJob{seq: a.lastSeq, done: make(chan struct{}), tomb: tombAfter(data, a.tomb)}
	a.ckpt = job
	fsys, dir, name, dropTomb, slots := a.cfg.FS, a.cfg.Dir, a.name, a.tomb, a.cfg.WriteSlots
	actor.Background(ctx, func() any {
		if slots != nil {
			slots <- struct{}{}
			defer func() { <-slots }()
		}
		start := time.Now()
		job.err = putFile(fsys, dir, name, data, dropTomb)
		job.took = time.Since(start)
		close(job.done)
		return job
	})
}

func (a *offsetsActor) onCheckpointDone(ctx actor.Context, job *ckptJob) {
	if a.ckpt != job {
		return // taken by waitCheckpoint
	}
	a.ckpt = nil
	a.checkpointDone(ctx, job)
	if a.lastSeq > a.fileSeq {
		a.scheduleCheckpoint(ctx)
	}
}

// checkpointDone records a finished checkpoint and tells the journal.
func (a *offsetsActor) checkpointDone(ctx actor.Context, job *ckptJob) {
	a.cfg.Metrics.wrote(job.err, job.took)
	if job.err != nil {
		// Memory and the journal still hold everything; the next checkpoint retries.
		limited(&a.ckptFailLog).Event(a.log.Error()).Err(job.err).Msg("offsets_checkpoint_failed")
		return
	}
	a.fileSeq = max(a.fileSeq, job.seq)
	a.tomb = job.tomb
	ctx.Send(a.cfg.Journal, &Checkpointed{Group: a.cfg.Group, Seq: job.seq})
}

// waitCheckpoint waits for the checkpoint being written, if any.
func (a *offsetsActor) waitCheckpoint(ctx actor.Context) {
	if job := a.ckpt; job != nil {
		// Not bounded: a second write of the same file while this one may still finish
		// could rename a half-written temporary file into place.
		<-job.done
		a.ckpt = nil
		a.checkpointDone(ctx, job)
	}
}

// checkpointNow writes the file at once with everything journaled (a stopping or
// restarting actor).
func (a *offsetsActor) checkpointNow(ctx actor.Context) {
	a.waitCheckpoint(ctx)
	if a.lastSeq <= a.fileSeq {
		return
	}
	if !a.mayWriteFile() {
		return // another broker's now: it replays this broker's journal for it
	}
	job := &ckptJob{seq: a.lastSeq, tomb: a.tomb}
	func() {
		if a.cfg.WriteSlots != nil {
			a.cfg.WriteSlots <- struct{}{}
			defer func() { <-a.cfg.WriteSlots }()
		}
		start := time.Now()
		job.err = a.writeFile(a.st, a.exists)
		job.took = time.Since(start)
		job.tomb = a.tomb // writeFile keeps it up to date
	}()
	a.checkpointDone(ctx, job)
	if job.err != nil {
		// The file is behind the journal. The journal keeps the group's records pinned
		// (a restart replays them) and this state in memory for the group's next actor,
		// which claims it instead of reading the older file.
		a.log.Error().Err(job.err).Msg("offsets_checkpoint_failed_state_left_with_journal")
		u, err := newUnsaved(a.cfg.Group, a.st, a.exists, a.lastSeq)
		if err != nil {
			a.log.Error().Err(err).Msg("offsets_state_not_encoded_for_journal")
			return
		}
		ctx.Send(a.cfg.Journal, u)
	}
}

// flushSync makes everything accepted durable before Flush is answered or the actor
// stops: the queue goes to the journal (waited for), then the file is rewritten. The
// file is never written with a change the journal does not hold before it.
func (a *offsetsActor) flushSync(ctx actor.Context) {
	a.waitInflight(ctx)
	if len(a.queue) > 0 {
		a.flush(ctx)
		a.waitInflight(ctx)
	}
	a.checkpointNow(ctx)
}

// writeFile writes the group file with s in Receive (a stopping or restarting actor, a
// take-over), or removes the file of a group that no longer has one.
func (a *offsetsActor) writeFile(s state, exists bool) error {
	data, err := a.fileData(s, exists)
	if err != nil {
		return err
	}
	if err := putFile(a.cfg.FS, a.cfg.Dir, a.name, data, a.tomb); err != nil {
		return err
	}
	a.tomb = tombAfter(data, a.tomb)
	return nil
}

// putFile writes data as the group file name in dir; data nil removes the file (a group
// that no longer has one), a tombstone's replaces it by the tombstone. dropTomb: the
// group's tombstone may be on disk, and a file written over it removes it.
func putFile(fsys storage.FS, dir, name string, data []byte, dropTomb bool) error {
	switch {
	case data == nil:
		return storage.RemoveDurably(fsys, dir, name)
	case isTombstone(data):
		return putTombstone(fsys, dir, name, data)
	}
	if err := storage.WriteFileAtomic(fsys, dir, name, data); err != nil {
		return err
	}
	if dropTomb {
		// The file carries an epoch at least the tombstone's: the tombstone is no longer
		// needed, and a crash that brings it back leaves it below the file.
		tomb := strings.TrimSuffix(name, fileSuffix) + tombSuffix
		if err := fsys.Remove(filepath.Join(dir, tomb)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove tombstone %s: %w", tomb, err)
		}
	}
	return nil
}

// tombAfter is whether the group's tombstone may be on disk once data is written by
// putFile, tomb what was true before.
func tombAfter(data []byte, tomb bool) bool {
	switch {
	case data == nil:
		return tomb
	case isTombstone(data):
		return true
	}
	return false
}

// fileData is the file content of s; it also makes sure the directory exists, once. A
// group that no longer exists has none (nil), or, in a cluster (a non-zero epoch), a
// tombstone.
func (a *offsetsActor) fileData(s state, exists bool) ([]byte, error) {
	if !exists {
		if s.epoch > 0 {
			return encodeTombstone(a.cfg.Group, s.epoch, a.cfg.Now())
		}
		return nil, nil
	}
	if !a.dirReady {
		if err := a.cfg.FS.MkdirAll(a.cfg.Dir); err != nil {
			return nil, fmt.Errorf("create %s: %w", a.cfg.Dir, err)
		}
		// The directory's own entry in its parent must be durable too, once.
		if err := a.cfg.FS.SyncDir(filepath.Dir(a.cfg.Dir)); err != nil {
			return nil, fmt.Errorf("fsync directory %s: %w", filepath.Dir(a.cfg.Dir), err)
		}
		a.dirReady = true
	}
	meta, err := a.metaJSON.encode(s.meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta of group %q: %w", logs.ID(a.cfg.Group), err)
	}
	return encodeFileWith(a.cfg.Group, s, meta)
}

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
			rec.set(e.TopicPartition, c)
		}
		*exists = true
		return &CommitResult{Codes: q.codes}, true, 0
	case *Delete:
		for _, tp := range m.Partitions {
			if _, ok := s.offsets[tp]; ok {
				delete(s.offsets, tp)
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
		for tp := range s.offsets {
			if drop[tp.Topic] {
				delete(s.offsets, tp)
				rec.del(tp)
				changed = true
			}
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
		s.meta = m.Meta
		rec.meta(m.Meta, m.Reply.Valid())
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
		return &Status{Exists: *exists, Meta: s.meta, Count: len(s.offsets)}, changed, len(gone)
	}
	return nil, false, 0
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

// onStopping makes everything accepted durable, so that a passivated or stopped group
// answers every request it accepted (with success or the write's error code) and leaves
// its file complete for the group's next actor.
func (a *offsetsActor) onStopping(ctx actor.Context) {
	a.pub.Remove()
	if a.claiming {
		// Stopped before the journal answered: nothing was served or changed.
		a.failStash(codeWriteFailed)
		if a.claimCancel != nil {
			a.claimCancel()
		}
		return
	}
	a.flushSync(ctx)
	if a.ckptCancel != nil {
		a.ckptCancel()
	}
}

// onRestarting answers the queue of the failed incarnation without writing it: its state
// may be what made it panic. What the journal already holds is durable: its waiters are
// answered and the file is brought up to it, since the next incarnation reloads the file.
func (a *offsetsActor) onRestarting(ctx actor.Context) {
	a.pub.Remove()
	a.waitInflight(ctx)
	for _, q := range a.queue {
		fail(q, codeCrashed)
	}
	a.queue = nil
	a.failStash(codeCrashed)
	if a.claimCancel != nil {
		a.claimCancel()
	}
	if !a.claiming {
		a.checkpointNow(ctx)
	}
	if a.ckptCancel != nil {
		a.ckptCancel()
	}
}

// answerOnPanic answers the request being handled when the handler panics, then lets
// the panic go on to the supervisor (which restarts the actor). A request already queued
// is left to onRestarting.
func (a *offsetsActor) answerOnPanic(msg any) {
	r := recover()
	if r == nil {
		return
	}
	a.log.Error().Interface("panic", r).Bytes("stack", debug.Stack()).Msg("offsets_actor_panic")
	if n := len(a.queue); n == 0 || a.queue[n-1].msg != msg {
		fail(queued{msg: msg}, codeCrashed)
	}
	panic(r)
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

// publishAll publishes the committed offsets as the actor now serves them.
func (a *offsetsActor) publishAll() {
	if a.pub == nil {
		return
	}
	at := make(map[metrics.TopicPartition]int64, len(a.st.offsets))
	for tp, c := range a.st.offsets {
		at[metrics.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = c.Offset
	}
	a.pub.Replace(at)
}

// publishOps publishes what a journaled batch changed.
func (a *offsetsActor) publishOps(ops []op) {
	if a.pub == nil {
		return
	}
	for _, o := range ops {
		switch {
		case o.Clear:
			a.pub.Replace(map[metrics.TopicPartition]int64{})
		case o.Set != nil:
			for _, f := range o.Set {
				a.pub.Set(string(f.Topic), f.Partition, f.Offset)
			}
		case o.Del != nil:
			for _, d := range o.Del {
				a.pub.Delete(string(d.Topic), d.Partition)
			}
		}
	}
}
