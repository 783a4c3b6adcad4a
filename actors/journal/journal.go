package journal

import (
	"fmt"
	"maps"
	"runtime/debug"
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
	// Name is the actor field of its log lines; "" is "offsets_journal" (the
	// transaction coordinator's journal is "transactions_journal").
	Name string
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
	// SaveMany writes the Data of several keys (offsets.GroupFilesSaver), durable together
	// when it returns: errs[i] is the outcome of keys[i]. nil: each goes through Save.
	SaveMany func(keys []string, data [][]byte) (errs []error)
	// Saved, when set, is told (on the journal's goroutine) each key whose unsaved state
	// is saved and dropped: by a round of saves, or by the key's user's Checkpointed.
	Saved func(key string)
	// WriteBehindBatch is how many keys a round of saves takes at most; 0 is
	// DefaultWriteBehindBatch. WriteBehindPause is the pause between two rounds while
	// the last one saved everything it took and replayed state is left to write (the
	// files a start leaves behind, Unsaved.Replayed); 0 is DefaultWriteBehindPause. They
	// bound how fast those files are written, so that serving is not starved.
	WriteBehindBatch int
	WriteBehindPause time.Duration
	// Recovered is what the replay of the journal's directory left to it (for the offsets
	// journal, offsets.Replay): the segments it kept, the unsaved state of the keys whose
	// state it could not save, the held keys. nil: nothing (FirstSeq is used); else
	// Recovered.Next is the first sequence number.
	Recovered *Recovered
}

// DefaultUnsavedRetry is how often the journal retries saving what its users left unsaved.
const DefaultUnsavedRetry = 30 * time.Second

// The defaults of Config.WriteBehindBatch and WriteBehindPause: at most 1,000 group files
// per round (one syncfs), a tenth of a second apart.
const (
	DefaultWriteBehindBatch = 1000
	DefaultWriteBehindPause = 100 * time.Millisecond
)

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
	if cfg.WriteBehindBatch <= 0 {
		cfg.WriteBehindBatch = DefaultWriteBehindBatch
	}
	if cfg.WriteBehindPause <= 0 {
		cfg.WriteBehindPause = DefaultWriteBehindPause
	}
	if cfg.Name == "" {
		cfg.Name = "offsets_journal"
	}
	return actor.PropsOf(func() actor.Actor {
		// The log names (this actor field, the event names, the "group" fields that name
		// keys) are those of the offsets journal, its only user, which operators and
		// tests search for: its keys are group ids, found by the same group field as
		// every other line about the group, and its events are one family with the
		// offsets_journal_* events of the replay (actors/offsets).
		return &journalActor{cfg: cfg, next: cfg.FirstSeq, log: cfg.Log.With().Str("actor", cfg.Name).Logger(),
			writeFailedLog: logs.NewLimiter(errorLogInterval), spareFailedLog: logs.NewLimiter(errorLogInterval)}
	}, actor.Resume())
}

// errorLogInterval: a failure that repeats with every write (a full disk) is logged once
// per interval, with the number of those left out.
const errorLogInterval = 10 * time.Second

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
	roundFailed bool          // the last round failed to save some key

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

// JournalName is the journal's Config.Name: the chaos suite's fault sites tell the
// offsets journal from the transaction coordinator's by it.
func (j *journalActor) JournalName() string { return j.cfg.Name }

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
			j.saved(m.Key)
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
			// The files the start left to write behind are replayed again as well: a
			// stop before they are all written is no failure.
			var keys []string
			behind := 0
			for k, u := range j.unsaved {
				if u.Replayed {
					behind++
				} else {
					keys = append(keys, k)
				}
			}
			if len(keys) > 0 {
				j.log.Error().Int("groups_behind", len(keys)).Strs("groups", logs.IDs(keys)).
					Msg("offsets_journal_stops_with_group_files_behind_replayed_at_next_start")
			}
			if behind > 0 {
				j.log.Info().Int("groups_behind", behind).Msg("offsets_journal_stops_with_files_to_write_behind_replayed_at_next_start")
			}
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
	// Taken once (the journal resumes after a panic, it is never made again): the
	// Props keep r, which must not keep every state the start left once it is written.
	r.Unsaved, r.Kept = nil, nil
	j.held = r.Held
	j.checkpointed("", 0)
}
