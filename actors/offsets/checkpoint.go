package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// Checkpoints: the group file rewritten behind the journal, off Receive except while the
// actor stops or restarts.

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
	group, slotWait := a.cfg.Group, a.cfg.slotWait
	actor.Background(ctx, func() any {
		if slots != nil {
			takeSlot(slots, group, slotWait)
			defer func() { <-slots }()
		}
		start := time.Now()
		job.err = putFile(fsys, dir, name, data, dropTomb)
		job.took = time.Since(start)
		close(job.done)
		return job
	})
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
	ctx.Send(a.cfg.Journal, &journal.Checkpointed{Key: a.cfg.Group, Seq: job.seq})
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
			takeSlot(a.cfg.WriteSlots, a.cfg.Group, a.cfg.slotWait)
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
