package offsets

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// Checkpoints: the group file rewritten behind the journal by a job on a goroutine the
// actor system owns. The actor's turn only encodes the state; the job reads the file's
// epoch (in a cluster), writes, and comes back as a message. A stopping or restarting
// actor waits for its last one, with a bound.

// ckptJob is a checkpoint written off Receive: the file as of journal record seq.
type ckptJob struct {
	seq   uint64
	run   func()        // the write, on the job's goroutine
	write func()        // run's work, with no recover
	done  chan struct{} // closed when run is over and the fields below are set
	err   error
	took  time.Duration
	tomb  bool // what a.tomb is once the write succeeded

	dirReady  bool   // the directory was made durable for this write
	epochRead bool   // the file's epoch was read (epochErr is its outcome)
	epochErr  error  // the tombstone could not be read: nothing was written
	fence     string // the file is of a newer epoch: nothing was written
	panicked  any    // what run panicked with, raised again in the actor's turn
	stack     []byte
}

// refused says whether the job wrote nothing because the file was not this actor's to
// write (or whether it is could not be read).
func (j *ckptJob) refused() bool { return j.epochErr != nil || j.fence != "" }

// checkpointTick tells the actor to write its file.
type checkpointTick struct{}

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
	// The timer has fired: its cancel would only keep it (and its message) reachable for
	// as long as the group stays idle.
	a.ckptScheduled, a.ckptCancel = false, nil
	if a.lastSeq <= a.fileSeq {
		return
	}
	if a.ckpt != nil {
		a.scheduleCheckpoint(ctx)
		return
	}
	a.startCheckpoint(ctx)
}

// startCheckpoint starts a checkpoint job; false when none started (the file is not
// the actor's to write, or the state could not be encoded).
func (a *offsetsActor) startCheckpoint(ctx actor.Context) bool {
	if !a.mayWriteFile() {
		return false
	}
	job, err := a.checkpointJob()
	if err != nil {
		a.log().Error().Err(err).Msg("offsets_checkpoint_failed")
		a.scheduleCheckpoint(ctx)
		return false
	}
	a.ckpt = job
	run := func() any {
		job.run()
		return job
	}
	if q := a.cfg.WriteQueue; q != nil {
		q.Background(ctx, run)
	} else {
		actor.Background(ctx, run)
	}
	return true
}

// checkpointJob is a job that writes the file with the actor's state as it is now.
func (a *offsetsActor) checkpointJob() (*ckptJob, error) {
	data, err := a.fileData(a.st, a.exists)
	if err != nil {
		return nil, err
	}
	job := &ckptJob{seq: a.lastSeq, done: make(chan struct{}), tomb: tombAfter(data, a.tomb)}
	fsys, dir, name, path, dropTomb, slots := a.cfg.FS, a.cfg.Dir, a.name, a.filePath(), a.tomb, a.cfg.WriteSlots
	group, slotWait, cluster, epoch := a.group, a.cfg.slotWait, a.gate != nil, a.st.epoch
	mkdir := a.exists && !a.dirReady
	job.run = func() {
		defer close(job.done)
		job.panicked, job.stack = recovered(job.write)
	}
	job.write = func() {
		lock := fileLock(path)
		lock <- struct{}{}
		defer func() { <-lock }()
		if cluster {
			// Read for every write: a broker that took the group over rewrites the
			// file under its newer epoch at any time, and this read is what fences
			// the former owner.
			e, ok, err := readEpoch(fsys, path)
			job.epochRead, job.epochErr = true, err
			if err != nil {
				// With the group's tombstone unreadable, whether a newer owner deleted
				// it is unknown: the write waits (the journal keeps the records) until
				// it can be read.
				return
			}
			if ok && e > epoch {
				job.fence = "file_of_newer_epoch"
				return
			}
		}
		if mkdir {
			if job.err = makeDir(fsys, dir); job.err != nil {
				return
			}
			job.dirReady = true
		}
		if slots != nil {
			takeSlot(slots, group, slotWait)
			defer func() { <-slots }()
		}
		start := time.Now()
		job.err = putFile(fsys, dir, name, data, dropTomb)
		job.took = time.Since(start)
	}
	return job, nil
}

// makeDir makes the offsets directory and its entry in its parent durable.
func makeDir(fsys storage.FS, dir string) error {
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("fsync directory %s: %w", filepath.Dir(dir), err)
	}
	return nil
}

// fileLocks order the writes of one group file, by whatever writes it (a checkpoint job,
// a load's take-over, the journal's retry through GroupFileSaver): a write that a
// stopping actor stopped waiting for may still be under way when the group's next actor
// writes, and two writes of one file at once could rename a half-written temporary file
// into place. Files share a lock by the hash of their path; a lock is only ever waited
// for on a job's goroutine, or with a bound.
var fileLocks = func() (l [1024]chan struct{}) {
	for i := range l {
		l[i] = make(chan struct{}, 1)
	}
	return l
}()

// fileLock is the lock of the group file at path: send to take it, receive to let go.
// Take it before a WriteSlot, never after.
func fileLock(path string) chan struct{} {
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	return fileLocks[h.Sum32()%uint32(len(fileLocks))]
}

// takeSlot takes one of slots, waiting while every one is taken; slotWait, when set
// (tests), is told of group's checkpoint waiting.
func takeSlot(slots chan struct{}, group string, slotWait func(string)) {
	if slotWait != nil {
		select {
		case slots <- struct{}{}:
			return
		default:
			slotWait(group)
		}
	}
	slots <- struct{}{}
}

func (a *offsetsActor) onCheckpointDone(ctx actor.Context, job *ckptJob) {
	if a.ckpt != job {
		return // taken by a stopping actor's checkpointNow
	}
	a.ckpt = nil
	if job.panicked != nil {
		a.raise(job.panicked, job.stack) // Restarting writes the file
	}
	a.checkpointResult(ctx, job)
	if a.lastSeq > a.fileSeq && !job.refused() {
		a.scheduleCheckpoint(ctx)
	}
	// A Flush that came while this job ran waits for one that holds what it did.
	a.settleFlushes(ctx, job.seq >= a.lastSeq || job.err != nil || job.refused())
}

// checkpointResult takes a finished checkpoint job's outcome.
func (a *offsetsActor) checkpointResult(ctx actor.Context, job *ckptJob) {
	if job.dirReady {
		a.dirReady = true
	}
	if job.epochRead {
		a.noteTomb(job.epochErr)
	}
	if job.fence != "" {
		a.fence(job.fence)
	}
	if job.refused() {
		return
	}
	a.checkpointDone(ctx, job)
}

// checkpointDone records a finished checkpoint and tells the journal.
func (a *offsetsActor) checkpointDone(ctx actor.Context, job *ckptJob) {
	a.cfg.Metrics.wrote(job.err, job.took)
	if job.err != nil {
		// Memory and the journal still hold everything; the next checkpoint retries.
		limited(&a.ckptFailLog).Event(a.log().Error()).Err(job.err).Msg("offsets_checkpoint_failed")
		return
	}
	a.fileSeq = max(a.fileSeq, job.seq)
	a.tomb = job.tomb
	if a.cfg.Written != nil {
		a.cfg.Written(a.group)
	}
	ctx.Send(a.cfg.Journal, &journal.Checkpointed{Key: a.group, Seq: job.seq})
}

// checkpointWait bounds how long a stopping or restarting actor waits for its file to be
// written: the checkpoint under way, then its own.
const checkpointWait = 5 * time.Second

// waitJob waits for job until deadline; false when it is still running.
func waitJob(job *ckptJob, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-job.done:
		return true
	case <-t.C:
		return false
	}
}

// checkpointNow writes the file with everything journaled, waiting until deadline (a
// stopping or restarting actor, which can no longer take a job's outcome from its
// mailbox). A write that does not finish by then is left running (the file lock makes a
// later write of the file wait for it) and the state is left with the journal, as after
// a failed write.
func (a *offsetsActor) checkpointNow(ctx actor.Context, deadline time.Time) {
	if job := a.ckpt; job != nil {
		if !waitJob(job, deadline) {
			a.log().Error().Dur("waited_ms", checkpointWait).Msg("offsets_checkpoint_did_not_finish")
			a.leaveWithJournal(ctx)
			return
		}
		a.ckpt = nil
		if job.panicked == nil {
			a.checkpointResult(ctx, job)
		}
	}
	if a.lastSeq <= a.fileSeq {
		return
	}
	if !a.mayWriteFile() {
		return // another broker's now: it replays this broker's journal for it
	}
	job, err := a.checkpointJob()
	if err != nil {
		a.log().Error().Err(err).Msg("offsets_checkpoint_failed_state_left_with_journal")
		a.leaveWithJournal(ctx)
		return
	}
	actor.Go(ctx, job.run)
	if !waitJob(job, deadline) {
		a.log().Error().Dur("waited_ms", checkpointWait).Msg("offsets_checkpoint_did_not_finish")
		a.leaveWithJournal(ctx)
		return
	}
	if job.panicked != nil {
		job.err = fmt.Errorf("checkpoint panic: %v", job.panicked)
		a.log().Error().Interface("panic", job.panicked).Bytes("stack", job.stack).Msg("offsets_job_panic")
	}
	a.checkpointResult(ctx, job)
	if job.err != nil && !job.refused() {
		a.log().Error().Err(job.err).Msg("offsets_checkpoint_failed_state_left_with_journal")
		a.leaveWithJournal(ctx)
	}
}

// leaveWithJournal hands the state the file is behind on to the journal: it keeps the
// group's records pinned (a restart replays them) and this state in memory for the
// group's next actor, which claims it instead of reading the older file.
func (a *offsetsActor) leaveWithJournal(ctx actor.Context) {
	u, err := newUnsaved(a.group, a.st, a.exists, a.lastSeq)
	if err != nil {
		a.log().Error().Err(err).Msg("offsets_state_not_encoded_for_journal")
		return
	}
	ctx.Send(a.cfg.Journal, u)
}

// flushSync makes everything accepted durable before the actor stops or restarts: the
// queue goes to the journal (waited for), then the file is rewritten (waited for). The
// file is never written with a change the journal does not hold before it. Each wait
// has its bound (flushWait, checkpointWait).
func (a *offsetsActor) flushSync(ctx actor.Context) {
	a.waitInflight(ctx)
	if len(a.queue) > 0 {
		a.flush(ctx)
		a.waitInflight(ctx)
	}
	a.checkpointNow(ctx, time.Now().Add(checkpointWait))
}

// journalSync makes everything accepted durable in the journal before the broker stops
// (Config.LeaveToJournal): the queue goes to the journal (waited for, with flushSync's
// bound); the file is not written. A checkpoint under way is left to finish on its own
// (the file lock orders it before any later write of the file): what the file lacks is
// in the journal's segments, which nothing has checkpointed past, and the next start
// replays them.
func (a *offsetsActor) journalSync(ctx actor.Context) {
	a.waitInflight(ctx)
	if len(a.queue) > 0 {
		a.flush(ctx)
		a.waitInflight(ctx)
	}
}

// handleFlush answers m once everything accepted before it is durable and the file
// written (settleFlushes), without waiting in the turn.
func (a *offsetsActor) handleFlush(ctx actor.Context, m *Flush) {
	a.flushes = append(a.flushes, m)
	actor.HandedOn(ctx) // answered by settleFlushes, or as the actor stops or restarts
	a.flush(ctx)
	a.settleFlushes(ctx, false)
}

// settleFlushes answers the waiting Flushes once nothing accepted waits for the journal
// and the file holds what it did: a checkpoint is started for them if the file is behind
// (after one that tried to write everything, tried, they are answered whatever its
// outcome: the journal holds every change), unless the broker stops and leaves the file
// to the replay at its next start (Config.LeaveToJournal).
func (a *offsetsActor) settleFlushes(ctx actor.Context, tried bool) {
	if len(a.flushes) == 0 || len(a.queue) > 0 || len(a.inflight) > 0 || a.ckpt != nil {
		return
	}
	if !tried && a.lastSeq > a.fileSeq && !a.leavingToJournal() && a.startCheckpoint(ctx) {
		return
	}
	a.answerFlushes(&Result{})
}

// answerFlushes answers every waiting Flush with r.
func (a *offsetsActor) answerFlushes(r *Result) {
	for _, f := range a.flushes {
		f.Reply.Resolve(r)
	}
	a.flushes = nil
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

// fileData is the file content of s. A group that no longer exists has none (nil), or,
// in a cluster (a non-zero epoch), a tombstone.
func (a *offsetsActor) fileData(s state, exists bool) ([]byte, error) {
	if !exists {
		if s.epoch > 0 {
			return encodeTombstone(a.group, s.epoch, a.cfg.Now())
		}
		return nil, nil
	}
	meta, err := encodeMetaCached(&a.metaJSON, s.meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta of group %q: %w", logs.ID(a.group), err)
	}
	return encodeFileWith(a.group, s, meta)
}
