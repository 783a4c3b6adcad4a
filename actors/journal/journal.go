package journal

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/logs"
	"kaas/storage"
)

// DefaultSegmentBytes is the size after which the journal starts a new segment.
const DefaultSegmentBytes = 16 << 20

// Config is everything the journal actor needs.
type Config struct {
	// Dir is the journal's directory (the offsets journal's: offsets.JournalDir).
	Dir string
	// FS does the file access; nil is OSFS.
	FS storage.FS
	// Log is the broker logger.
	Log zerolog.Logger
	// Metrics receives each write's outcome and each quarantined segment; nil records
	// nothing.
	Metrics Metrics
	// FirstSeq is the sequence number of the first record when there is no Recovered
	// (at least 1).
	FirstSeq uint64
	// SegmentBytes: a segment that reaches it is closed and a new one started; 0 is
	// DefaultSegmentBytes.
	SegmentBytes int64
	// UnsavedRetry: how often the journal itself tries to save the state of a key whose
	// user could not (Unsaved) and that no user has claimed since, so that its records
	// do not keep every later segment on disk until the broker restarts; 0 is
	// DefaultUnsavedRetry.
	UnsavedRetry time.Duration
	// Save writes an Unsaved's Data where its key's state lives (for the offsets journal,
	// the group file: offsets.GroupFileSaver); nil: the journal does not retry what its
	// users left unsaved. It touches nothing the journal owns, so the journal runs it on
	// a goroutine of its own.
	Save func(key string, data []byte) error
	// Recovered is what the replay of the journal's directory left to it (for the offsets
	// journal, offsets.Replay): the segments it kept, the unsaved state of the keys whose
	// state it could not save, the held keys. nil: nothing (FirstSeq is used); else
	// Recovered.Next is the first sequence number.
	Recovered *Recovered
}

// DefaultUnsavedRetry is how often the journal retries saving what its users left unsaved.
const DefaultUnsavedRetry = 30 * time.Second

// Metrics is what the journal reports to its user's metrics (the offsets journal's are
// offsets.Metrics).
type Metrics interface {
	// Wrote is one write of a batch of records: its error, or how long the write and
	// fdatasync took.
	Wrote(err error, took time.Duration, records int)
	// Quarantined is a damaged segment moved to the quarantine directory.
	Quarantined()
}

// noMetrics is Config.Metrics when none is set.
type noMetrics struct{}

func (noMetrics) Wrote(error, time.Duration, int) {}
func (noMetrics) Quarantined()                    {}

// Recovered is what the replay of a journal's directory leaves to the journal that goes
// on after it (Config.Recovered). The replay is its user's (it decodes the records).
type Recovered struct {
	// Next is the sequence number the journal goes on from.
	Next uint64
	// Kept are the segments left in place, oldest first, because some key's state could
	// not be saved (a full disk): the journal keeps them until those keys' states are.
	Kept []KeptSegment
	// Unsaved is the replayed state of each key whose state could not be saved. The
	// journal hands it to the key's next user (Claim), and retries saving it (Config.Save).
	Unsaved []*Unsaved
	// Held maps each key that may have lost acknowledged records to a damaged segment to
	// its hold markers: the journal hands them to the key's user (Claimed.Hold), which
	// does not serve the key while any of them exists.
	Held map[string][]string
}

// KeptSegment is a journal segment that replay left in place.
type KeptSegment struct {
	// Name is the segment's file name (SegmentName of its first record).
	Name string
	// Keys pin it: each one's last record in it, not yet saved elsewhere.
	Keys map[string]uint64
	// Damaged: it goes to the quarantine directory, not away, once nothing pins it.
	Damaged bool
}

// Append asks the journal to make one record of key durable. Reply: *Appended, once the
// fsync that holds it returns or the write fails. A sender's Appends are answered in the
// order it sent them; a sender that may need the answer while it stops makes Reply with
// actor.NewWaitable.
type Append struct {
	// Key is whose record it is (for the offsets journal, a group id): the record pins
	// its segment until a Checkpointed of the key covers it.
	Key string
	// Data is the record, not empty; the journal does not read it.
	Data  []byte
	Reply actor.Promise
}

// Appended is the outcome of an Append: its sequence number once durable, or the error.
type Appended struct {
	Seq uint64
	Err error
}

// AnswerCrash answers an Append the journal panicked on before it queued it
// (actor.Request): a write that failed, since no segment holds it.
func (m *Append) AnswerCrash(c *actor.Crashed) {
	m.Reply.Resolve(&Appended{Err: fmt.Errorf("offsets journal panic: %s", c.Panic)})
}

// Checkpointed tells the journal that key's state is now saved elsewhere (for the offsets
// journal, the group file) with every record of key up to Seq, so segments holding only
// such records can go.
type Checkpointed struct {
	Key string
	Seq uint64
}

// Claim asks the journal, as a key's user starts (for the offsets journal, a group's
// offsets actor), for the state an earlier user of key could not save. Reply: *Claimed.
type Claim struct {
	Key   string
	Reply actor.Promise
}

// Claimed answers a Claim: Unsaved is nil unless the key's saved state is behind the
// journal. Hold lists the hold markers naming the key (Recovered.Held: a damaged segment
// may have held acknowledged records of it), which the user checks itself.
type Claimed struct {
	Unsaved *Unsaved
	Hold    []string
}

// Unsaved is a key's state that its user could not save as it stopped or restarted (a
// full disk, say): every change in it is in the journal, whose records of the key stay
// pinned. The journal keeps it until a Checkpointed of the key covers Seq, and hands it
// to the key's next user (Claim), which serves it instead of the older saved state. The
// journal does not read Data: it hands it on, and retries saving it with Config.Save.
// Not changed once sent.
type Unsaved struct {
	Key string
	// Seq is the key's last record that Data holds.
	Seq uint64
	// Data is the state, in its user's encoding (for the offsets journal, the group
	// file's content; nil when the group has no file).
	Data []byte
}

// Stat asks the journal for its segments (tests and diagnostics). Reply: *Status.
type Stat struct{ Reply actor.Promise }

// Status lists the journal's segment files, oldest first, and the keys that still pin
// them (whose records there are not checkpointed yet).
type Status struct {
	Segments []string
	Pinned   map[string][]string // segment → keys
}

// Props makes the journal actor. Stop it with Poison after every user has stopped: it
// answers what it has accepted, then closes its segment.
func Props(cfg Config) *actor.Props {
	if cfg.FS == nil {
		cfg.FS = storage.OSFS{}
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Recovered != nil {
		cfg.FirstSeq = cfg.Recovered.Next
	}
	if cfg.FirstSeq == 0 {
		cfg.FirstSeq = 1
	}
	if cfg.UnsavedRetry <= 0 {
		cfg.UnsavedRetry = DefaultUnsavedRetry
	}
	return actor.PropsOf(func() actor.Actor {
		// The log names (this actor field, the event names, the "group" fields that name
		// keys) are those of the offsets journal, its first user, which operators and
		// tests search for.
		return &journalActor{cfg: cfg, next: cfg.FirstSeq, log: cfg.Log.With().Str("actor", "offsets_journal").Logger(),
			writeFailedLog: logs.NewLimiter(errorLogInterval), spareFailedLog: logs.NewLimiter(errorLogInterval)}
	}, actor.Resume())
}

// errorLogInterval: a failure that repeats with every write (a full disk) is logged once
// per interval, with the number of those left out.
const errorLogInterval = 10 * time.Second

// spareRetryAfter: after a spare segment could not be zero-filled, the next is not tried
// before this long (a full disk would otherwise be filled with zeros up to its last block
// for every append).
const spareRetryAfter = 5 * time.Second

// segment is one journal file and the last record each key has in it.
type segment struct {
	name string
	keys map[string]uint64
	// damaged: found damaged at replay; once unpinned it goes to the quarantine
	// directory, not away.
	damaged bool
}

// journalActor is the actor that owns the journal directory. Its Receive blocks on the write
// and fsync of a batch (the planned exception to non-blocking Receives): meanwhile new
// appends pile up in its mailbox and all go into the next write.
type journalActor struct {
	cfg Config
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

	// unsaved holds the state of keys whose user could not save it; handed is what was
	// last handed to each key's next user (Claim), whose checkpoints then save it. The
	// others are retried every UnsavedRetry on a goroutine (retrying until it reports);
	// a Claim of a key being retried waits for it in deferred.
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

	// held maps keys held since a damaged segment (Recovered.Held) to their markers;
	// each key's user is told in its Claim and checks the markers itself.
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

// SpareMarker starts the names of spare segment files, spare-<n>.tmp: the next segment
// while it is zero-filled. The replay at start removes those left over.
const SpareMarker = "spare-"

func (j *journalActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		j.adopt(ctx)
	case *Append:
		j.queue = append(j.queue, m)
		actor.HandedOn(ctx) // answered after its batch's fsync, or by Panicked
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
		j.checkpointed(m.Key, m.Seq)
		if u := j.unsaved[m.Key]; u != nil && m.Seq >= u.Seq {
			delete(j.unsaved, m.Key)
			delete(j.handed, m.Key)
			j.log.Info().Str("group", logs.ID(m.Key)).Msg("offsets_unsaved_state_written")
		}
	case *Unsaved:
		j.onUnsaved(ctx, m)
	case *Claim:
		if j.retrying[m.Key] != nil {
			// Its state is being saved from what the journal holds: the claim is
			// answered once that write is over.
			j.deferred[m.Key] = append(j.deferred[m.Key], m)
			return
		}
		j.answerClaim(m)
	case *retryUnsaved:
		j.retryCancel = nil
		j.retryRound(ctx)
	case *unsavedRound:
		j.onUnsavedRound(ctx, m)
	case *Stat:
		m.Reply.Resolve(j.status())
	case *actor.Stopping:
		if len(j.unsaved) > 0 {
			keys := make([]string, 0, len(j.unsaved))
			for k := range j.unsaved {
				keys = append(keys, k)
			}
			j.log.Error().Int("groups_behind", len(keys)).Strs("groups", logs.IDs(keys)).
				Msg("offsets_journal_stops_with_group_files_behind_replayed_at_next_start")
		}
		if j.retryCancel != nil {
			j.retryCancel()
		}
		deadline := time.Now().Add(stopWait)
		if j.retriesDone != nil && !waitClosed(j.retriesDone, deadline) {
			// Its outcome goes nowhere: what it wrote is also replayed at the next start.
			// Left running, it writes group files under their locks (offsets.GroupFileSaver).
			j.log.Error().Dur("waited_ms", stopWait).Msg("offsets_journal_stops_with_unsaved_retry_running")
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
			// The spare being zero-filled is waited for and removed (its spareReady goes
			// nowhere), within the bound: one still being written then is left to the
			// replay at the next start, which removes spares.
			if waitClosed(j.spareDone, deadline) {
				_ = j.cfg.FS.Remove(j.sparePath)
			} else {
				j.log.Warn().Str("spare", j.sparePath).Msg("offsets_journal_stops_with_spare_being_filled")
			}
		}
	}
}

// stopWait bounds how long a stopping journal waits for its goroutines: the retry round
// and the spare's zero-fill, together.
const stopWait = 5 * time.Second

// waitClosed waits for ch to be closed until deadline; false when it was not.
func waitClosed(ch <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Panicked mends what a panic left half done (actor.PanicHandler). The journal resumes
// after a panic instead of restarting (actor.Resume): a restarted journal would lose its
// sequence numbers and which keys pin which segment, which is what keeps acknowledged
// records from being deleted or overwritten. The batch being written gets the error and
// the journal goes on in a new segment; what is queued gets a flush of its own. An
// Append the panic came before it was queued is answered with the error by the actor
// layer (Append.AnswerCrash); its sender takes the journal's answers by batch, so one
// that overtakes the answers to its earlier Appends is not lost.
func (j *journalActor) Panicked(ctx actor.Context, r any) {
	err := fmt.Errorf("offsets journal panic: %v", r)
	batch := j.writing
	j.writing = nil
	j.log.Error().Err(err).Bytes("stack", debug.Stack()).Int("records", len(batch)).Msg("offsets_journal_panic")
	j.cfg.Metrics.Wrote(err, 0, len(batch))
	j.fail(batch, err)
	if len(j.queue) > 0 {
		// The panic may have come from the flush the queue waited for (flushQueued
		// still set, its message gone): ask for another, or the queue waits for ever.
		j.flushQueued = true
		ctx.Send(ctx.Self(), &journalFlush{})
	}
	func() {
		// A segment that cannot even be closed is dropped: the next write starts a new
		// one, and the panic is still answered.
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
	// damage in the middle of a segment from a torn tail (ScanSegment).
	j.buf = StartFrame(j.buf)
	for _, a := range batch {
		j.buf = AppendRecord(j.buf, a.Data)
	}
	FinishFrame(j.buf, j.next)
	if j.f != nil && j.prealloc && j.size > 0 && j.size+int64(len(j.buf)) > j.cfg.SegmentBytes {
		j.closeActive() // full: the batch goes to the next segment
	}
	if err := j.open(ctx); err != nil {
		j.writeFailedLog.Event(j.log.Error()).Err(err).Int("records", len(batch)).Msg("offsets_journal_write_failed")
		j.cfg.Metrics.Wrote(err, 0, len(batch))
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
	j.cfg.Metrics.Wrote(err, time.Since(start), len(batch))
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
		j.active.keys[a.Key] = seq
		j.writing = batch[i+1:]
		a.Reply.Resolve(&Appended{Seq: seq})
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
	name := SegmentName(j.next)
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
	j.active = &segment{name: name, keys: map[string]uint64{}}
	if !prealloc {
		j.prepareSpare(ctx)
	}
	return nil
}

// adopt takes over what the replay left: its kept segments (oldest first, before any new
// one), the unsaved state of keys whose state it could not save (retried like any other),
// and the held keys. The first segment is not made until the first append: a broker with
// no commits reserves no space.
func (j *journalActor) adopt(ctx actor.Context) {
	r := j.cfg.Recovered
	if r == nil {
		return
	}
	for _, k := range r.Kept {
		j.closed = append(j.closed, &segment{name: k.Name, keys: maps.Clone(k.Keys), damaged: k.Damaged})
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
	path := filepath.Join(j.cfg.Dir, SpareMarker+strconv.Itoa(j.spares)+".tmp")
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
// its keys have checkpointed.
func (j *journalActor) closeActive() {
	if j.f == nil {
		return
	}
	if err := j.f.Close(); err != nil {
		j.log.Warn().Err(err).Str("segment", j.active.name).Msg("offsets_journal_close_failed")
	}
	if j.size == 0 && len(j.active.keys) == 0 {
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

// checkpointed unpins key's records up to seq and deletes the oldest closed segments
// that pin nothing. Segments go oldest first only: what is left is always every record
// since some point, which is what makes replay right.
func (j *journalActor) checkpointed(key string, seq uint64) {
	if key != "" {
		for _, s := range j.closed {
			if last, ok := s.keys[key]; ok && last <= seq {
				delete(s.keys, key)
			}
		}
		if j.active != nil {
			if last, ok := j.active.keys[key]; ok && last <= seq {
				delete(j.active.keys, key)
			}
		}
	}
	for len(j.closed) > 0 && len(j.closed[0].keys) == 0 {
		s := j.closed[0]
		if err := DropSegment(j.cfg.FS, j.cfg.Dir, s.name, s.damaged); err != nil {
			// Kept: replayed at the next start, which is harmless.
			j.log.Warn().Err(err).Str("segment", s.name).Msg("offsets_journal_segment_remove_failed")
			return
		}
		j.closed = j.closed[1:]
		if s.damaged {
			j.cfg.Metrics.Quarantined()
		}
		j.log.Debug().Str("segment", s.name).Msg("offsets_journal_segment_removed")
	}
}

// onUnsaved keeps the state a key's user could not save (the newest, by seq) and arms
// the retry.
func (j *journalActor) onUnsaved(ctx actor.Context, m *Unsaved) {
	if old := j.unsaved[m.Key]; old != nil && m.Seq < old.Seq {
		return
	}
	if j.unsaved == nil {
		j.unsaved = map[string]*Unsaved{}
	}
	j.unsaved[m.Key] = m
	j.armRetry(ctx)
}

func (j *journalActor) armRetry(ctx actor.Context) {
	if j.retryCancel == nil && !j.stopped {
		j.retryCancel = actor.After(ctx, j.cfg.UnsavedRetry, &retryUnsaved{})
	}
}

// answerClaim hands a key's unsaved state, if any, to the key's new user.
func (j *journalActor) answerClaim(m *Claim) {
	u := j.unsaved[m.Key]
	if u != nil {
		if j.handed == nil {
			j.handed = map[string]*Unsaved{}
		}
		j.handed[m.Key] = u
	}
	m.Reply.Resolve(&Claimed{Unsaved: u, Hold: j.held[m.Key]})
}

type retryUnsaved struct{}

// unsavedRound is a retry round's outcome: errs[i] is the write of round[i].
type unsavedRound struct {
	round []*Unsaved
	errs  []error
}

// retryRound saves, one after another on a goroutine, the unsaved states no user has
// claimed.
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
		j.retrying[u.Key] = u
	}
	done := make(chan struct{})
	j.retriesDone = done
	actor.Background(ctx, func() any {
		defer close(done)
		errs := make([]error, len(round))
		for i, u := range round {
			errs[i] = j.cfg.Save(u.Key, u.Data)
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
		delete(j.retrying, u.Key)
		if err := m.errs[i]; err != nil {
			failed = append(failed, u.Key)
			firstErr = cmp.Or(firstErr, err)
		} else if j.unsaved[u.Key] == u {
			delete(j.unsaved, u.Key)
			j.checkpointed(u.Key, u.Seq)
			j.log.Info().Str("group", logs.ID(u.Key)).Msg("offsets_unsaved_state_written")
		}
		for _, c := range j.deferred[u.Key] {
			j.answerClaim(c)
		}
		delete(j.deferred, u.Key)
	}
	if len(failed) > 0 {
		j.log.Error().Err(firstErr).Int("groups_failing", len(failed)).Strs("groups", logs.IDs(failed)).Dur("retry_ms", j.cfg.UnsavedRetry).
			Msg("offsets_unsaved_group_files_still_failing")
	}
	if len(j.retryable()) > 0 {
		j.armRetry(ctx)
	}
}

// retryable is the unsaved state no user has claimed, which the journal saves itself.
func (j *journalActor) retryable() []*Unsaved {
	var out []*Unsaved
	for k, u := range j.unsaved {
		if j.cfg.Save != nil && j.handed[k] != u {
			out = append(out, u)
		}
	}
	return out
}

func (j *journalActor) fail(batch []*Append, err error) {
	for _, a := range batch {
		a.Reply.Resolve(&Appended{Err: err})
	}
}

func (j *journalActor) status() *Status {
	st := &Status{Pinned: map[string][]string{}}
	segs := j.closed
	if j.active != nil {
		segs = append(segs[:len(segs):len(segs)], j.active)
	}
	for _, s := range segs {
		st.Segments = append(st.Segments, s.name)
		for k := range s.keys {
			st.Pinned[s.name] = append(st.Pinned[s.name], k)
		}
	}
	return st
}

// QuarantineDir holds the damaged segments of the journal in dir, moved aside, with
// whatever its user's replay writes beside them (the offsets journal's hold markers).
func QuarantineDir(dir string) string { return filepath.Join(dir, "quarantine") }

// DropSegment deletes the segment name of the journal in dir, or moves a damaged one to
// the quarantine directory.
func DropSegment(fsys storage.FS, dir, name string, damaged bool) error {
	path := filepath.Join(dir, name)
	if damaged {
		to := filepath.Join(QuarantineDir(dir), name)
		if err := fsys.Rename(path, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("quarantine journal segment %s: %w", name, err)
		}
		if err := fsys.SyncDir(QuarantineDir(dir)); err != nil {
			return fmt.Errorf("fsync directory %s: %w", QuarantineDir(dir), err)
		}
		return nil
	}
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove journal segment %s: %w", name, err)
	}
	return nil
}
