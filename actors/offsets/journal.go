package offsets

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// The journal is the broker's one append-only log of offset changes, shared by every
// group it coordinates. A group file rewrite (tmp, fsync, rename, directory fsync) costs
// two journal commits of the filesystem, and the filesystem does about 1,600 of those a
// second however many groups write at once; an append to one file costs one fsync, and
// one fsync makes a whole batch durable. So a group's offsets actor makes a batch durable
// by appending it here, answers its waiters when the fsync that holds it returns, and
// rewrites its own file later (a checkpoint, Config.CheckpointInterval), off its Receive.
// A segment is deleted once every group with a record in it has checkpointed past it;
// at start the broker replays what is left (ReplayJournal) before it serves.
//
// Each write is one frame holding the batch's records (encodeRecord), in segments named
// after the sequence number of their first record, zero-filled ahead of use (see
// journalActor.spare): the format, and how a torn tail is told from damage in the middle,
// are package actors/journal's. Replay holds the groups of a segment damaged in the
// middle.

// JournalDir is the journal directory of node under the broker's data.dir. Each broker
// has its own, so brokers sharing a volume never write the same file.
func JournalDir(dataDir string, node int32) string {
	return filepath.Join(dataDir, "__cluster", "__offsets_journal", "node-"+strconv.Itoa(int(node)))
}

// DefaultSegmentBytes is the size after which the journal starts a new segment.
const DefaultSegmentBytes = 16 << 20

// JournalConfig is everything the journal actor needs.
type JournalConfig struct {
	// Dir is JournalDir(data.dir, node.id).
	Dir string
	// FS does the file access; nil is OSFS.
	FS storage.FS
	// Log is the broker logger.
	Log zerolog.Logger
	// Metrics is the offsets metrics; nil records nothing.
	Metrics *Metrics
	// FirstSeq is the sequence number of the first record, what ReplayJournal returned
	// (at least 1).
	FirstSeq uint64
	// SegmentBytes: a segment that reaches it is closed and a new one started; 0 is
	// DefaultSegmentBytes.
	SegmentBytes int64
	// UnsavedRetry: how often the journal itself tries to write the file of a group whose
	// actor could not (Unsaved) and that no actor has claimed since, so that its records
	// do not keep every later segment on disk until the broker restarts; 0 is
	// DefaultUnsavedRetry.
	UnsavedRetry time.Duration
	// Save writes an Unsaved's Data as its group's file (GroupFileSaver); nil: the
	// journal does not retry the files its groups left unsaved. It touches nothing but
	// the file, so the journal runs it on a goroutine of its own.
	Save func(group string, data []byte) error
	// Replayed is what Replay left: the segments it kept, the state of the groups whose
	// file it could not write, the held groups. nil: nothing (FirstSeq is used); else
	// Replayed.Next is the first sequence number.
	Replayed *Replayed
}

// DefaultUnsavedRetry is how often the journal retries the files its groups left unsaved.
const DefaultUnsavedRetry = 30 * time.Second

// Append asks the journal to make one group's record durable. When the fsync that holds
// it returns (or the write fails), the journal puts the outcome on Done (buffered, one
// slot) and then resolves Reply with nil: the sender wakes on the Settled message and
// reads Done, and a sender that is stopping can wait on Done without its mailbox.
type Append struct {
	Group string
	Data  []byte // encodeRecord
	Done  chan Appended
	Reply actor.Promise
}

// Appended is the outcome of an Append: its sequence number once durable, or the error.
type Appended struct {
	Seq uint64
	Err error
}

// Checkpointed tells the journal that group's file now holds every record of the group
// up to Seq, so segments holding only such records can go.
type Checkpointed struct {
	Group string
	Seq   uint64
}

// Claim asks the journal, as a group's offsets actor starts, for the state an earlier
// actor of the group could not write to the group file. Reply: *Claimed.
type Claim struct {
	Group string
	Reply actor.Promise
}

// Claimed answers a Claim: Unsaved is nil unless the group's file is behind the journal.
// Hold lists the hold markers naming the group (a damaged journal segment may have held
// acknowledged records of it): while any of them exists the group answers
// COORDINATOR_NOT_AVAILABLE.
type Claimed struct {
	Unsaved *Unsaved
	Hold    []string
}

// Unsaved is a group's state that its offsets actor could not write to the group file as
// it stopped or restarted (a full disk, say): every change in it is in the journal, whose
// records of the group stay pinned. The journal keeps it until a Checkpointed of the
// group covers Seq, and hands it to the group's next actor (Claim), which serves it
// instead of the older file. The journal does not read Data: it hands it on, and retries
// writing it with JournalConfig.Save. Not changed once sent.
type Unsaved struct {
	Group string
	// Seq is the group's last record that Data holds.
	Seq uint64
	// Data is the group file's content (encodeFile); nil when the group has no file.
	Data []byte
}

// JournalStat asks the journal for its segments (tests and diagnostics). Reply: *JournalStatus.
type JournalStat struct{ Reply actor.Promise }

// JournalStatus lists the journal's segment files, oldest first, and the groups that
// still pin them (whose records there are not checkpointed yet).
type JournalStatus struct {
	Segments []string
	Pinned   map[string][]string // segment → groups
}

// JournalProps makes the journal actor. Stop it with Poison after every offsets actor
// has stopped: it answers what it has accepted, then closes its segment.
func JournalProps(cfg JournalConfig) *actor.Props {
	if cfg.FS == nil {
		cfg.FS = storage.OSFS{}
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.Replayed != nil {
		cfg.FirstSeq = cfg.Replayed.Next
	}
	if cfg.FirstSeq == 0 {
		cfg.FirstSeq = 1
	}
	if cfg.UnsavedRetry <= 0 {
		cfg.UnsavedRetry = DefaultUnsavedRetry
	}
	return actor.PropsOf(func() actor.Actor {
		return &journalActor{cfg: cfg, next: cfg.FirstSeq, log: cfg.Log.With().Str("actor", "offsets_journal").Logger(),
			writeFailedLog: logs.NewLimiter(errorLogInterval), spareFailedLog: logs.NewLimiter(errorLogInterval)}
	})
}

// errorLogInterval: a failure that repeats with every write (a full disk) is logged once
// per interval, with the number of those left out.
const errorLogInterval = 10 * time.Second

// spareRetryAfter: after a spare segment could not be zero-filled, the next is not tried
// before this long (a full disk would otherwise be filled with zeros up to its last block
// for every append).
const spareRetryAfter = 5 * time.Second

// segment is one journal file and the last record each group has in it.
type segment struct {
	name   string
	groups map[string]uint64
	// damaged: found damaged at replay; once unpinned it goes to the quarantine
	// directory, not away.
	damaged bool
}

// journalActor is the actor that owns the journal directory. Its Receive blocks on the write
// and fsync of a batch (the offsets actors' planned exception to non-blocking Receives):
// meanwhile new appends pile up in its mailbox and all go into the next write.
type journalActor struct {
	cfg JournalConfig
	log zerolog.Logger

	f        storage.File // the active segment, nil until the first write or after a roll
	active   *segment
	size     int64
	prealloc bool       // f is a zero-filled spare: records overwrite, the size never changes
	closed   []*segment // full segments, oldest first
	next     uint64
	dirReady bool

	queue       []*Append
	writing     []*Append // the batch being written, until each is answered
	flushQueued bool
	buf         []byte

	// unsaved holds the state of groups whose actor could not write their file; handed
	// is what was last handed to each group's next actor (Claim), whose checkpoints then
	// write it. The others are retried every UnsavedRetry on a goroutine (retrying
	// until it reports); a Claim of a group being retried waits for it in deferred.
	unsaved     map[string]*Unsaved
	handed      map[string]*Unsaved
	retrying    map[string]*Unsaved
	deferred    map[string][]*Claim
	retryCancel actor.Cancel  // the armed retry timer, nil when none
	retriesDone chan struct{} // closed when the running retry round is over

	// The next segment, zero-filled ahead of use on a goroutine of its own: appending to
	// a preallocated file changes no size, so its fdatasync needs no commit of the
	// filesystem's journal (on ext4 those queue behind every group file rewrite).
	spare     string // a ready spare's path, "" when none
	preparing bool
	spareDone chan struct{} // closed when the spare being prepared is done
	sparePath string        // the spare being prepared
	spares    int
	spareFail time.Time // when a spare last failed
	stopped   bool

	// held maps groups held since a damaged segment (Replayed.Held) to their markers;
	// each group's actor is told in its Claim and checks the markers itself.
	held map[string][]string

	writeFailedLog *logs.Limiter
	spareFailedLog *logs.Limiter
}

type journalFlush struct{}

// spareReady is a spare segment's preparation finishing.
type spareReady struct {
	path string
	err  error
}

// spareMarker names spare segment files: spare-<n>.tmp. ReplayJournal removes leftovers.
const spareMarker = "spare-"

func (j *journalActor) Receive(ctx actor.Context) {
	defer j.survive(ctx)
	switch m := ctx.Message().(type) {
	case *actor.Started:
		j.adopt(ctx)
	case *Append:
		j.queue = append(j.queue, m)
		if !j.flushQueued {
			j.flushQueued = true
			ctx.Send(ctx.Self(), &journalFlush{})
		}
	case *journalFlush:
		j.flushQueued = false
		j.flush(ctx)
	case *spareReady:
		j.onSpare(m)
	case *Checkpointed:
		j.checkpointed(m.Group, m.Seq)
		if u := j.unsaved[m.Group]; u != nil && m.Seq >= u.Seq {
			delete(j.unsaved, m.Group)
			delete(j.handed, m.Group)
			j.log.Info().Str("group", logs.ID(m.Group)).Msg("offsets_unsaved_state_written")
		}
	case *Unsaved:
		j.onUnsaved(ctx, m)
	case *Claim:
		if j.retrying[m.Group] != nil {
			// Its file is being written from what the journal holds: the claim is
			// answered once that write is over.
			j.deferred[m.Group] = append(j.deferred[m.Group], m)
			return
		}
		j.answerClaim(m)
	case *retryUnsaved:
		j.retryCancel = nil
		j.retryRound(ctx)
	case *unsavedRound:
		j.onUnsavedRound(ctx, m)
	case *JournalStat:
		m.Reply.Resolve(j.status())
	case *actor.Stopping:
		if len(j.unsaved) > 0 {
			groups := make([]string, 0, len(j.unsaved))
			for g := range j.unsaved {
				groups = append(groups, g)
			}
			j.log.Error().Int("groups_behind", len(groups)).Strs("groups", logs.IDs(groups)).
				Msg("offsets_journal_stops_with_group_files_behind_replayed_at_next_start")
		}
		if j.retryCancel != nil {
			j.retryCancel()
		}
		if j.retriesDone != nil {
			// Its outcome goes nowhere: what it wrote is also replayed at the next start.
			<-j.retriesDone
		}
		for _, claims := range j.deferred {
			for _, c := range claims {
				j.answerClaim(c)
			}
		}
		j.flush(ctx)
		j.closeActive()
		j.checkpointed("", 0)
		j.stopped = true
		if j.spare != "" {
			_ = j.cfg.FS.Remove(j.spare)
		}
		if j.preparing {
			// Nothing of the journal outlives it: the spare being zero-filled is waited
			// for and removed (its spareReady goes nowhere).
			<-j.spareDone
			_ = j.cfg.FS.Remove(j.sparePath)
		}
	}
}

// survive turns a panic in Receive into a failed write instead of a restart: a restarted
// journal would lose its sequence numbers and which groups pin which segment, which is
// what keeps acknowledged records from being deleted or overwritten. The batch being
// written gets the error and the journal goes on in a new segment. An Append that the
// panic came before it was queued is queued (nothing else would answer it, and its
// group's offsets actor waits for it), and what is queued gets a flush of its own.
func (j *journalActor) survive(ctx actor.Context) {
	r := recover()
	if r == nil {
		return
	}
	err := fmt.Errorf("offsets journal panic: %v", r)
	batch := j.writing
	j.writing = nil
	if a, ok := ctx.Message().(*Append); ok && !slices.Contains(j.queue, a) && !slices.Contains(batch, a) {
		// It never reached the queue: it goes there now, behind the Appends its group
		// sent before it (a group takes the journal's answers in the order it sent).
		j.queue = append(j.queue, a)
	}
	j.log.Error().Err(err).Bytes("stack", debug.Stack()).Int("records", len(batch)).Msg("offsets_journal_panic")
	j.cfg.Metrics.journalWrote(err, 0, len(batch))
	j.fail(batch, err)
	if len(j.queue) > 0 {
		// The panic may have come from the flush the queue waited for (flushQueued
		// still set, its message gone): ask for another, or the queue waits for ever.
		j.flushQueued = true
		ctx.Send(ctx.Self(), &journalFlush{})
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				j.f, j.active = nil, nil
			}
		}()
		j.closeActive()
	}()
}

// flush writes every queued record with one write and one fsync, then answers each.
func (j *journalActor) flush(ctx actor.Context) {
	batch := j.queue
	j.queue = nil
	if len(batch) == 0 {
		return
	}
	// Until answered, the batch is j.writing: a panic answers what is left of it.
	j.writing = batch
	start := time.Now()
	// One frame for the whole batch: a write cut short never leaves some of its records
	// valid, so a batch answered with an error is not replayed in part.
	// The frame carries the sequence number of its first record, so that replay can tell
	// damage in the middle of a segment from a torn tail (journal.ScanSegment).
	j.buf = journal.StartFrame(j.buf)
	for _, a := range batch {
		j.buf = journal.AppendRecord(j.buf, a.Data)
	}
	journal.FinishFrame(j.buf, j.next)
	if j.f != nil && j.prealloc && j.size > 0 && j.size+int64(len(j.buf)) > j.cfg.SegmentBytes {
		j.closeActive() // full: the batch goes to the next segment
	}
	if err := j.open(ctx); err != nil {
		j.writeFailedLog.Event(j.log.Error()).Err(err).Int("records", len(batch)).Msg("offsets_journal_write_failed")
		j.cfg.Metrics.journalWrote(err, 0, len(batch))
		j.writing = nil
		j.fail(batch, err)
		return
	}
	first := j.next
	j.next += uint64(len(batch))
	_, err := j.f.Write(j.buf)
	if err != nil {
		err = fmt.Errorf("write %s: %w", j.active.name, err)
	} else if err = j.f.Datasync(); err != nil {
		err = fmt.Errorf("fdatasync %s: %w", j.active.name, err)
	}
	j.cfg.Metrics.journalWrote(err, time.Since(start), len(batch))
	if err != nil {
		// What was written may be cut short or not durable: the segment ends here and
		// the next write starts a new one (a retried fsync can report success for
		// pages a failed one dropped).
		j.writeFailedLog.Event(j.log.Error()).Err(err).Int("records", len(batch)).Msg("offsets_journal_write_failed")
		j.writing = nil
		j.closeActive()
		j.fail(batch, err)
		return
	}
	j.size += int64(len(j.buf))
	if cap(j.buf) > 4<<20 {
		j.buf = nil // a huge meta went through: do not keep its buffer
	}
	for i, a := range batch {
		seq := first + uint64(i)
		j.active.groups[a.Group] = seq
		j.writing = batch[i+1:]
		a.Done <- Appended{Seq: seq}
		a.Reply.Resolve(nil)
	}
	if !j.prealloc && j.size >= j.cfg.SegmentBytes {
		j.closeActive()
	}
	if j.size >= j.cfg.SegmentBytes/2 {
		// Zero-filling the next segment writes as much as a whole segment of records:
		// done once the active one is half full, not while the disk is busy with the
		// first appends after a roll, it is ready in time and out of the way.
		j.prepareSpare(ctx)
	}
}

// open starts a new segment when there is none: the spare renamed to the segment's name
// (or, without a spare, a new empty file), made durable in the directory before any
// record is acknowledged from it.
func (j *journalActor) open(ctx actor.Context) error {
	if j.f != nil {
		return nil
	}
	if !j.dirReady {
		if err := j.cfg.FS.MkdirAll(j.cfg.Dir); err != nil {
			return fmt.Errorf("create %s: %w", j.cfg.Dir, err)
		}
		for d := filepath.Dir(j.cfg.Dir); ; d = filepath.Dir(d) {
			// The new directories' entries in their parents, up to __cluster.
			if err := j.cfg.FS.SyncDir(d); err != nil {
				return fmt.Errorf("fsync directory %s: %w", d, err)
			}
			if filepath.Base(d) == "__cluster" || filepath.Dir(d) == d {
				break
			}
		}
		j.dirReady = true
	}
	name := journal.SegmentName(j.next)
	path := filepath.Join(j.cfg.Dir, name)
	prealloc := false
	if spare := j.spare; spare != "" {
		j.spare = ""
		if err := j.cfg.FS.Rename(spare, path); err != nil {
			j.log.Warn().Err(err).Str("spare", spare).Msg("offsets_journal_spare_unusable")
			_ = j.cfg.FS.Remove(spare)
		} else {
			prealloc = true
		}
	}
	var f storage.File
	var err error
	if prealloc {
		f, err = j.cfg.FS.OpenWrite(path)
	} else {
		f, err = j.cfg.FS.Create(path)
	}
	if err != nil {
		_ = j.cfg.FS.Remove(path)
		return fmt.Errorf("open journal segment: %w", err)
	}
	if err := j.cfg.FS.SyncDir(j.cfg.Dir); err != nil {
		_ = f.Close()
		_ = j.cfg.FS.Remove(path)
		return fmt.Errorf("fsync directory %s: %w", j.cfg.Dir, err)
	}
	j.f, j.size, j.prealloc = f, 0, prealloc
	j.active = &segment{name: name, groups: map[string]uint64{}}
	if !prealloc {
		j.prepareSpare(ctx)
	}
	return nil
}

// adopt takes over what Replay left: its kept segments (oldest first, before any new
// one), the unsaved state of groups whose file it could not write (retried like any
// other), and the held groups. The first segment is not made until the first append: a
// broker with no commits reserves no space.
func (j *journalActor) adopt(ctx actor.Context) {
	r := j.cfg.Replayed
	if r == nil {
		return
	}
	for _, k := range r.Kept {
		j.closed = append(j.closed, &segment{name: k.Name, groups: maps.Clone(k.Groups), damaged: k.Damaged})
	}
	for _, u := range r.Unsaved {
		j.onUnsaved(ctx, u)
	}
	j.held = r.Held
	j.checkpointed("", 0)
}

// prepareSpare zero-fills the next segment on a goroutine of its own.
func (j *journalActor) prepareSpare(ctx actor.Context) {
	if j.preparing || j.spare != "" || j.stopped {
		return
	}
	if !j.spareFail.IsZero() && time.Since(j.spareFail) < spareRetryAfter {
		return
	}
	j.preparing = true
	path := filepath.Join(j.cfg.Dir, spareMarker+strconv.Itoa(j.spares)+".tmp")
	j.spares++
	fsys, dir, size := j.cfg.FS, j.cfg.Dir, j.cfg.SegmentBytes
	done := make(chan struct{})
	j.spareDone, j.sparePath = done, path
	actor.Background(ctx, func() any {
		defer close(done)
		if err := fsys.MkdirAll(dir); err != nil {
			return &spareReady{path: path, err: fmt.Errorf("create %s: %w", dir, err)}
		}
		return &spareReady{path: path, err: zeroFill(fsys, path, size)}
	})
}

func (j *journalActor) onSpare(m *spareReady) {
	j.preparing = false
	switch {
	case m.err != nil:
		// The next segment starts empty instead; its appends cost a filesystem commit.
		j.spareFail = time.Now()
		j.spareFailedLog.Event(j.log.Warn()).Err(m.err).Msg("offsets_journal_spare_failed")
		_ = j.cfg.FS.Remove(m.path)
	case j.stopped:
		_ = j.cfg.FS.Remove(m.path)
	default:
		j.spare = m.path
		if j.f != nil && !j.prealloc {
			// The active segment was started without a spare (none was ready yet): end
			// it, so that the next append goes to the preallocated one.
			j.closeActive()
		}
	}
}

// zeroFill writes size zero bytes to a new file at path and fsyncs it.
func zeroFill(fsys storage.FS, path string, size int64) error {
	f, err := fsys.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	zeros := make([]byte, min(size, 1<<20))
	for left := size; left > 0 && err == nil; left -= int64(len(zeros)) {
		_, err = f.Write(zeros[:min(left, int64(len(zeros)))])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("preallocate %s: %w", path, err)
	}
	return nil
}

// closeActive ends the active segment: it joins the closed ones, to be deleted once
// its groups have checkpointed.
func (j *journalActor) closeActive() {
	if j.f == nil {
		return
	}
	if err := j.f.Close(); err != nil {
		j.log.Warn().Err(err).Str("segment", j.active.name).Msg("offsets_journal_close_failed")
	}
	if j.size == 0 && len(j.active.groups) == 0 {
		// No record was acknowledged from it (its first write failed, say): nothing to
		// keep, and a disk that keeps failing must not collect one file per attempt.
		path := filepath.Join(j.cfg.Dir, j.active.name)
		if err := j.cfg.FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			j.log.Warn().Err(err).Str("segment", j.active.name).Msg("offsets_journal_segment_remove_failed")
			j.closed = append(j.closed, j.active)
		}
		j.f, j.active = nil, nil
		return
	}
	j.closed = append(j.closed, j.active)
	j.f, j.active = nil, nil
	j.checkpointed("", 0)
}

// checkpointed unpins group's records up to seq and deletes the oldest closed segments
// that pin nothing. Segments go oldest first only: what is left is always every record
// since some point, which is what makes replay right.
func (j *journalActor) checkpointed(group string, seq uint64) {
	if group != "" {
		for _, s := range j.closed {
			if last, ok := s.groups[group]; ok && last <= seq {
				delete(s.groups, group)
			}
		}
		if j.active != nil {
			if last, ok := j.active.groups[group]; ok && last <= seq {
				delete(j.active.groups, group)
			}
		}
	}
	for len(j.closed) > 0 && len(j.closed[0].groups) == 0 {
		s := j.closed[0]
		if err := dropSegment(j.cfg.FS, j.cfg.Dir, s.name, s.damaged); err != nil {
			// Kept: replayed at the next start, which is harmless.
			j.log.Warn().Err(err).Str("segment", s.name).Msg("offsets_journal_segment_remove_failed")
			return
		}
		j.closed = j.closed[1:]
		if s.damaged {
			j.cfg.Metrics.quarantinedSegment()
		}
		j.log.Debug().Str("segment", s.name).Msg("offsets_journal_segment_removed")
	}
}

// onUnsaved keeps the state a group's actor could not write (the newest, by seq) and
// arms the retry.
func (j *journalActor) onUnsaved(ctx actor.Context, m *Unsaved) {
	if old := j.unsaved[m.Group]; old != nil && m.Seq < old.Seq {
		return
	}
	if j.unsaved == nil {
		j.unsaved = map[string]*Unsaved{}
	}
	j.unsaved[m.Group] = m
	j.armRetry(ctx)
}

func (j *journalActor) armRetry(ctx actor.Context) {
	if j.retryCancel == nil && !j.stopped {
		j.retryCancel = actor.After(ctx, j.cfg.UnsavedRetry, &retryUnsaved{})
	}
}

// answerClaim hands a group's unsaved state, if any, to the group's new actor.
func (j *journalActor) answerClaim(m *Claim) {
	u := j.unsaved[m.Group]
	if u != nil {
		if j.handed == nil {
			j.handed = map[string]*Unsaved{}
		}
		j.handed[m.Group] = u
	}
	m.Reply.Resolve(&Claimed{Unsaved: u, Hold: j.held[m.Group]})
}

type retryUnsaved struct{}

// unsavedRound is a retry round's outcome: errs[i] is the write of round[i].
type unsavedRound struct {
	round []*Unsaved
	errs  []error
}

// retryRound writes, one after another on a goroutine, the files of the unsaved groups
// no actor has claimed.
func (j *journalActor) retryRound(ctx actor.Context) {
	if j.retriesDone != nil || j.stopped {
		return
	}
	round := j.retryable()
	if len(round) == 0 {
		return
	}
	if j.retrying == nil {
		j.retrying, j.deferred = map[string]*Unsaved{}, map[string][]*Claim{}
	}
	for _, u := range round {
		j.retrying[u.Group] = u
	}
	done := make(chan struct{})
	j.retriesDone = done
	actor.Background(ctx, func() any {
		defer close(done)
		errs := make([]error, len(round))
		for i, u := range round {
			errs[i] = j.cfg.Save(u.Group, u.Data)
		}
		return &unsavedRound{round: round, errs: errs}
	})
}

// onUnsavedRound unpins what a retry round wrote, answers the claims that waited for it
// and arms the next round if anything is left.
func (j *journalActor) onUnsavedRound(ctx actor.Context, m *unsavedRound) {
	j.retriesDone = nil
	var failed []string
	var firstErr error
	for i, u := range m.round {
		delete(j.retrying, u.Group)
		if err := m.errs[i]; err != nil {
			failed = append(failed, u.Group)
			firstErr = cmp.Or(firstErr, err)
		} else if j.unsaved[u.Group] == u {
			delete(j.unsaved, u.Group)
			j.checkpointed(u.Group, u.Seq)
			j.log.Info().Str("group", logs.ID(u.Group)).Msg("offsets_unsaved_state_written")
		}
		for _, c := range j.deferred[u.Group] {
			j.answerClaim(c)
		}
		delete(j.deferred, u.Group)
	}
	if len(failed) > 0 {
		j.log.Error().Err(firstErr).Int("groups_failing", len(failed)).Strs("groups", logs.IDs(failed)).Dur("retry_ms", j.cfg.UnsavedRetry).
			Msg("offsets_unsaved_group_files_still_failing")
	}
	if len(j.retryable()) > 0 {
		j.armRetry(ctx)
	}
}

// retryable is the unsaved state no actor has claimed, which the journal writes itself.
func (j *journalActor) retryable() []*Unsaved {
	var out []*Unsaved
	for g, u := range j.unsaved {
		if j.cfg.Save != nil && j.handed[g] != u {
			out = append(out, u)
		}
	}
	return out
}

func (j *journalActor) fail(batch []*Append, err error) {
	for _, a := range batch {
		a.Done <- Appended{Err: err}
		a.Reply.Resolve(nil)
	}
}

func (j *journalActor) status() *JournalStatus {
	st := &JournalStatus{Pinned: map[string][]string{}}
	segs := j.closed
	if j.active != nil {
		segs = append(segs[:len(segs):len(segs)], j.active)
	}
	for _, s := range segs {
		st.Segments = append(st.Segments, s.name)
		for g := range s.groups {
			st.Pinned[s.name] = append(st.Pinned[s.name], g)
		}
	}
	return st
}

// groupsIn reads the group ids that damaged bytes still show: every record starts with
// {"group":"<id>", so each such string that still decodes is taken. A flipped bit inside
// an id gives another id (held for nothing) and hides the real one, which is why replay
// also holds every group with records in the damaged segment.
func groupsIn(b []byte) []string {
	const prefix = `{"group":`
	var out []string
	seen := map[string]bool{}
	for {
		i := bytes.Index(b, []byte(prefix))
		if i < 0 {
			return out
		}
		b = b[i+len(prefix):]
		var g jsonString
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&g); err == nil && !seen[string(g)] {
			seen[string(g)] = true
			out = append(out, string(g))
		}
	}
}
