package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
)

// Loading a group: the journal's claim, the file, the take-over of a cluster and the
// fence that ends it.

// claim asks the journal, before the first request is served, whether an earlier actor
// of this group left state it could not write to the file (journal.Unsaved). Requests wait in
// the stash until the journal answers.
func (a *offsetsActor) claim(ctx actor.Context) {
	p := actor.NewPromise(ctx, ctx.Self())
	a.claiming, a.claimID = true, p.ID()
	ctx.Send(a.cfg.Journal, &journal.Claim{Key: a.cfg.Group, Reply: p})
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
	if c, ok := v.(*journal.Claimed); ok && len(c.Hold) > 0 {
		a.hold.markers = c.Hold
	}
	if c, ok := v.(*journal.Claimed); ok && c.Unsaved != nil {
		u := c.Unsaved
		a.loaded, a.broken = true, nil
		st, exists, err := unsavedState(u)
		if err != nil {
			// Data is what encodeFile made: a bug, not a disk. The older file is not
			// served instead.
			a.log.Error().Err(err).Msg("offsets_state_from_journal_undecodable")
			a.broken, a.brokenAt = fmt.Errorf("state left with the journal: %w", err), a.cfg.Now()
		}
		disk, ok := a.diskEpoch()
		if a.cfg.Gate != nil && ok && disk > st.epoch {
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
		if r, ok := msg.(actor.Request); ok {
			actor.Handling(ctx, r) // a panic in its handler answers it
		}
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
		// created again goes on from there. A broker alone writes none, and a new
		// group's first touch costs no second lookup. A tombstone that cannot be read
		// leaves the group unavailable, as a file that cannot be: taken for none, it
		// would let a new group's file (and a peer's records of the deleted one) in
		// under an older epoch than the deletion's.
		if a.cfg.Gate != nil {
			switch e, ok, terr := readTombEpoch(a.cfg.FS, a.path); {
			case terr != nil:
				reason, a.broken = "tombstone", terr
			case ok:
				a.st.epoch, a.tomb = e, true
			}
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
	e, ok := a.diskEpoch()
	if ok && e > a.st.epoch {
		a.fence("file_of_newer_epoch")
		return false
	}
	// With the group's tombstone unreadable, whether a newer owner deleted it is
	// unknown: the write waits (the journal keeps the records) until it can be read.
	return !a.tombUnreadable
}

// diskEpoch is readEpoch of the group's file, in a cluster. An unreadable tombstone is
// logged once (until it is readable again) and remembered in tombUnreadable.
func (a *offsetsActor) diskEpoch() (uint64, bool) {
	if a.cfg.Gate == nil {
		return 0, false
	}
	e, ok, err := readEpoch(a.cfg.FS, a.path)
	if err != nil && !a.tombUnreadable {
		a.log.Error().Err(err).Str("tombstone", filepath.Base(tombPath(a.path))).
			Msg("offsets_tombstone_unreadable_file_not_written")
	}
	a.tombUnreadable = err != nil
	return e, ok
}
