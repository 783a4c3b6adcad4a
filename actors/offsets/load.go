package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"time"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// Loading a group: the journal's claim, the file, the take-over of a cluster and the
// fence that ends it.
//
//	claiming ──Claimed──▶ serving ──a request, loadDue──▶ loading ──*loadJob──▶ serving
//	         ──Claimed with Unsaved──▶ loading
//
// While claiming or loading (waiting), requests wait in the stash, at most ClaimWait at
// a time (stashTimeout: COORDINATOR_LOAD_IN_PROGRESS, and the wait goes on). Every file access of a load (the hold markers, the leftover tmp
// file, the group file or its tombstone, the take-over's rewrite) runs in a load job on
// a goroutine the actor system owns (actor.Background); requests that arrive meanwhile
// wait in the stash, as while the journal answers the claim, and are served in order
// when the job's outcome (*loadJob) comes back.

// claim asks the journal, before the first request is served, whether an earlier actor
// of this group left state it could not write to the file (journal.Unsaved). Requests wait in
// the stash until the journal answers.
func (a *offsetsActor) claim(ctx actor.Context) {
	p := actor.NewPromise(ctx, ctx.Self())
	a.claiming, a.claimID = true, p.ID()
	ctx.Send(a.cfg.Journal, &journal.Claim{Key: a.group, Reply: p})
	a.armStashWait(ctx)
}

// stashTimeout bounds how long requests wait in the stash (Config.ClaimWait): for the
// journal's answer to the claim, or for a load job held up by a slow disk.
type stashTimeout struct{}

// armStashWait arms the stash's bound, unless it is armed.
func (a *offsetsActor) armStashWait(ctx actor.Context) {
	if a.stashCancel == nil {
		a.stashCancel = actor.After(ctx, a.cfg.ClaimWait, &stashTimeout{})
	}
}

// onStashTimeout: requests waited ClaimWait. Serving the file now could hand out offsets
// older than the journal's, or than a file still being read: the waiting requests are
// told to retry, and the actor goes on waiting.
func (a *offsetsActor) onStashTimeout(ctx actor.Context) {
	a.stashCancel = nil
	if !a.waiting() {
		return
	}
	event := "offsets_load_slow_requests_retried"
	if a.claiming {
		event = "offsets_journal_claim_unanswered_requests_retried"
	}
	a.log().Error().Dur("waited_ms", a.cfg.ClaimWait).Int("requests", len(a.stash)).Msg(event)
	a.failStash(codeLoading)
	a.armStashWait(ctx)
}

// onClaimed takes what the journal kept for the group (usually nothing), then serves
// the stashed requests in order. A state the journal kept is checked against the file's
// epoch by a load job first (the stash waits for it).
func (a *offsetsActor) onClaimed(ctx actor.Context, v any) {
	a.claiming = false
	if c, ok := v.(*journal.Claimed); ok && len(c.Hold) > 0 {
		a.hold.markers = c.Hold
	}
	if c, ok := v.(*journal.Claimed); ok && c.Unsaved != nil {
		u := c.Unsaved
		st, exists, err := unsavedState(u)
		if err != nil {
			// Data is what encodeFile made: a bug, not a disk. The older file is not
			// served instead.
			a.loaded = true
			a.log().Error().Err(err).Msg("offsets_state_from_journal_undecodable")
			a.broken, a.brokenAt = fmt.Errorf("state left with the journal: %w", err), a.cfg.Now()
		} else {
			a.startLoad(ctx, &unsavedIn{st: st, exists: exists, seq: u.Seq, replayed: u.Replayed})
			return // the stash waits for the load
		}
	}
	a.serveStash(ctx, false)
}

// waiting says whether requests wait in the stash: for the journal's claim or a load.
func (a *offsetsActor) waiting() bool { return a.claiming || a.loading }

// needsLoad says whether msg must wait for a load job first (Flush needs no file).
func (a *offsetsActor) needsLoad(msg any) bool {
	if _, ok := msg.(*Flush); ok {
		return false
	}
	return a.loadDue()
}

// serveStash serves the requests that waited for the claim or a load, in order, until
// one of them needs a load (it and the rest wait for that one). After a load (loaded),
// none starts another: what the load found is served.
func (a *offsetsActor) serveStash(ctx actor.Context, loaded bool) {
	for len(a.stash) > 0 && !a.waiting() {
		msg := a.stash[0]
		if !loaded && a.needsLoad(msg) {
			a.startLoad(ctx, nil)
			return
		}
		a.stash[0] = nil
		a.stash = a.stash[1:]
		if r, ok := msg.(actor.Request); ok {
			actor.Handling(ctx, r) // a panic in its handler answers it
		}
		a.serve(ctx, msg)
	}
	if len(a.stash) == 0 {
		a.stash = nil // the array would keep the requests that waited for the load
		if a.stashCancel != nil && !a.waiting() {
			a.stashCancel()
			a.stashCancel = nil
		}
	}
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

// loadDue says whether a request must wait for a load job first: the file was not read
// yet, a failed load is due again (RetryLoadAfter), or the hold markers are due to be
// looked at again. The file is not read while the group is held, so what the group
// serves once the markers are gone is the file as the operator left it.
func (a *offsetsActor) loadDue() bool {
	if a.fenced {
		return false
	}
	if h := &a.hold; len(h.markers) > 0 {
		return h.checkedAt.IsZero() || a.cfg.Now().Sub(h.checkedAt) >= a.cfg.RetryLoadAfter
	}
	if a.broken != nil {
		return a.cfg.Now().Sub(a.brokenAt) >= a.cfg.RetryLoadAfter
	}
	return !a.loaded
}

// serving says whether the group is served from what was loaded: not held, not fenced,
// and its file usable.
func (a *offsetsActor) serving() bool {
	return len(a.hold.markers) == 0 && !a.fenced && a.broken == nil
}

// unsavedIn is a state the journal kept for the group (Claimed.Unsaved), decoded.
type unsavedIn struct {
	st       state
	exists   bool
	seq      uint64
	replayed bool // left by the start's replay to be written behind (no failure)
}

// loadJob is one load, run off Receive: what it is to do, then what it found.
type loadJob struct {
	// in
	fsys     storage.FS
	dir      string
	name     string
	path     string
	group    string
	gate     func() bool
	markers  []string   // hold markers to look at again; none when the group is not held
	readFile bool       // read the group file (unless markers are left)
	unsaved  *unsavedIn // the journal's state, checked against the file's epoch

	// out
	checked     time.Time // when markers were looked at; zero when they were not
	left        []string  // the markers still there
	read        bool      // the file (or the journal's state) was loaded: what follows is set
	st          state
	exists      bool
	tomb        bool // the group's tombstone is on disk
	reason      string
	err         error  // the load failed: the group answers codeBroken
	tmpErr      error  // a leftover tmp file could not be removed
	fromJrnl    bool   // st is the journal's state (unsaved), not the file's
	dropped     bool   // the journal's state was older than the file: the file was loaded
	epochErr    error  // the tombstone could not be read for the file's epoch
	epochRead   bool   // the file's epoch was read (epochErr is its outcome)
	fileEpoch   uint64 // the file's epoch, when it dropped the journal's state
	takenOver   bool   // the file was rewritten under st.epoch
	takeoverErr error  // that rewrite failed
	fence       string // why the take-over found the group another broker's
	panicked    any    // what run panicked with, raised again in the actor's turn
	stack       []byte
}

// startLoad runs a load job; its outcome comes back as the *loadJob itself.
func (a *offsetsActor) startLoad(ctx actor.Context, u *unsavedIn) {
	job := &loadJob{fsys: a.cfg.FS, dir: a.cfg.Dir, name: a.name, path: a.filePath(), group: a.group,
		gate: a.gate, unsaved: u}
	if len(a.hold.markers) > 0 {
		job.markers = append([]string(nil), a.hold.markers...)
	}
	job.readFile = u == nil && (!a.loaded || a.broken != nil)
	a.loading, a.loadJob = true, job
	a.armStashWait(ctx)
	now := a.cfg.Now()
	actor.Background(ctx, func() any {
		job.panicked, job.stack = recovered(func() { job.run(now) })
		return job
	})
}

// recovered runs f and returns what it panicked with, and where (nil when it did not).
// A job's panic is raised again in the actor's turn that takes its outcome: it is the
// actor's, answered and restarted as any panic of its Receive, not the process's end.
func recovered(f func()) (p any, stack []byte) {
	defer func() {
		if r := recover(); r != nil {
			p, stack = r, debug.Stack()
		}
	}()
	f()
	return nil, nil
}

// raise panics again, in the actor's turn, with what a job panicked with.
func (a *offsetsActor) raise(p any, stack []byte) {
	a.log().Error().Interface("panic", p).Bytes("stack", stack).Msg("offsets_job_panic")
	panic(p)
}

// run is the load's file access, on the job's goroutine.
func (j *loadJob) run(now time.Time) {
	if len(j.markers) > 0 {
		j.checked = now
		for _, m := range j.markers {
			if _, err := j.fsys.ReadFile(m); !errors.Is(err, fs.ErrNotExist) {
				j.left = append(j.left, m)
			}
		}
		if len(j.left) > 0 && j.unsaved == nil {
			return // held: the file is not read
		}
	}
	if !j.readFile && j.unsaved == nil {
		return
	}
	lock := fileLock(j.path)
	lock <- struct{}{}
	defer func() { <-lock }()
	j.read = true
	if u := j.unsaved; u != nil {
		disk, ok, err := readEpoch(j.fsys, j.path)
		j.epochRead, j.epochErr = true, err
		if j.gate != nil && ok && disk > u.st.epoch {
			// Left by this broker as an earlier owner: the group's newer owner has
			// replayed it since. The file is the truth.
			j.dropped, j.fileEpoch = true, disk
		} else {
			j.fromJrnl = true
			j.st, j.exists = u.st, u.exists
			j.takeOver()
			return
		}
	}
	j.load()
	j.takeOver()
}

// load reads the file. A missing file is an empty group; a file that cannot be read or
// understood, or holds another group, puts the actor in broken mode: it is neither
// deleted nor overwritten, and every request answers COORDINATOR_NOT_AVAILABLE until a
// later load (after RetryLoadAfter) succeeds.
func (j *loadJob) load() {
	// A leftover tmp file is a write that was cut short; the file itself is intact.
	if err := j.fsys.Remove(j.path + tmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		j.tmpErr = err
	}
	b, err := j.fsys.ReadFile(j.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		j.st, j.exists = newState(), false
		// A group deleted in a cluster keeps its epoch in its tombstone: a group
		// created again goes on from there. A broker alone writes none, and a new
		// group's first touch costs no second lookup. A tombstone that cannot be read
		// leaves the group unavailable, as a file that cannot be: taken for none, it
		// would let a new group's file (and a peer's records of the deleted one) in
		// under an older epoch than the deletion's.
		if j.gate != nil {
			switch e, ok, terr := readTombEpoch(j.fsys, j.path); {
			case terr != nil:
				j.reason, j.err = "tombstone", terr
			case ok:
				j.st.epoch, j.tomb = e, true
			}
		}
	case err != nil:
		j.reason, j.err = "unreadable", fmt.Errorf("read %s: %w", j.path, err)
	default:
		id, st, derr := decodeFile(b)
		switch {
		case derr != nil:
			j.reason, j.err = "corrupt", fmt.Errorf("%s: %w", j.path, derr)
		case id != j.group:
			j.reason, j.err = "corrupt", fmt.Errorf("%s: holds group %q", j.path, logs.ID(id))
		default:
			j.st, j.exists = st, true
		}
	}
}

// takeOver, in a cluster, moves the group to the next ownership epoch and makes that
// durable before anything is served: from then on a record or file of an earlier owner
// is told apart (replay skips it, a checkpoint of it is refused).
func (j *loadJob) takeOver() {
	if j.gate == nil || j.err != nil {
		return
	}
	j.st.epoch++
	if !j.exists {
		return // nothing on disk to fence; the first write carries the epoch
	}
	if !j.gate() {
		j.fence = "gate_closed"
		return
	}
	e, ok, err := readEpoch(j.fsys, j.path)
	j.epochRead, j.epochErr = true, err
	if err != nil {
		return // with the tombstone unreadable, the write waits (mayWriteFile)
	}
	if ok && e > j.st.epoch {
		j.fence = "file_of_newer_epoch"
		return
	}
	data, err := encodeFile(j.group, j.st)
	if err == nil {
		err = putFile(j.fsys, j.dir, j.name, data, j.tomb)
	}
	if err != nil {
		j.takeoverErr = err
		return
	}
	j.tomb, j.takenOver = false, true
}

// onLoad takes a load job's outcome and serves the requests that waited for it.
func (a *offsetsActor) onLoad(ctx actor.Context, job *loadJob) {
	if a.loadJob != job {
		return
	}
	a.loading, a.loadJob = false, nil
	if job.panicked != nil {
		a.raise(job.panicked, job.stack) // the stash is answered by Restarting
	}
	if !job.checked.IsZero() {
		h := &a.hold
		first := h.checkedAt.IsZero()
		h.checkedAt, h.markers = job.checked, job.left
		switch {
		case len(job.left) > 0 && first:
			a.log().Error().Strs("markers", job.left).Msg("offsets_group_held_journal_damaged_until_marker_removed")
		case len(job.left) == 0 && !first:
			a.log().Info().Msg("offsets_group_hold_released")
		}
	}
	if job.read {
		a.applyLoad(ctx, job)
	}
	a.serveStash(ctx, true)
}

// applyLoad takes what a load job read.
func (a *offsetsActor) applyLoad(ctx actor.Context, job *loadJob) {
	a.loaded = true
	if job.tmpErr != nil {
		a.log().Warn().Err(job.tmpErr).Msg("offsets_tmp_cleanup_failed")
	}
	if job.epochRead {
		a.noteTomb(job.epochErr)
	}
	if job.fromJrnl {
		a.broken = nil
		a.st, a.exists = job.st, job.exists
		a.publishAll()
		a.lastSeq, a.fileSeq = job.unsaved.seq, 0
		if job.unsaved.replayed {
			a.log().Debug().Uint64("seq", job.unsaved.seq).Msg("offsets_state_taken_from_replay_file_written_behind")
		} else {
			a.log().Warn().Uint64("seq", job.unsaved.seq).Msg("offsets_state_taken_from_journal_file_behind")
		}
		a.tookOver(job)
		a.scheduleCheckpoint(ctx)
		return
	}
	if job.dropped {
		a.log().Warn().Uint64("epoch", job.unsaved.st.epoch).Uint64("file_epoch", job.fileEpoch).
			Msg("offsets_journal_state_older_than_file_dropped")
	}
	wasBroken := a.broken != nil
	if job.err != nil {
		a.broken, a.brokenAt = job.err, a.cfg.Now()
		if !wasBroken {
			// Once per incarnation: the group keeps answering COORDINATOR_NOT_AVAILABLE
			// and the metric counts it; the retries are not logged again.
			a.cfg.Metrics.loadFailed(job.reason)
			a.log().Error().Err(a.broken).Str("reason", job.reason).
				Msg("offsets_file_unusable_group_unavailable_until_repaired")
		}
		return
	}
	a.st, a.exists, a.broken = job.st, job.exists, nil
	if job.tomb {
		a.tomb = true
	}
	a.publishAll()
	if wasBroken {
		a.log().Info().Int("offsets", len(a.st.offsets)).Msg("offsets_file_loaded_after_repair")
	}
	a.tookOver(job)
}

// tookOver takes the outcome of a load's take-over.
func (a *offsetsActor) tookOver(job *loadJob) {
	switch {
	case job.fence != "":
		a.fence(job.fence)
	case job.takeoverErr != nil:
		a.broken, a.brokenAt = fmt.Errorf("take over %s: %w", a.filePath(), job.takeoverErr), a.cfg.Now()
		a.log().Error().Err(job.takeoverErr).Msg("offsets_takeover_write_failed")
	case job.takenOver:
		a.tomb = false
		a.log().Info().Uint64("epoch", a.st.epoch).Msg("offsets_group_taken_over")
	}
}

// fence marks the group as no longer this actor's.
func (a *offsetsActor) fence(reason string) {
	if !a.fenced {
		a.fenced = true
		// Another broker serves the group now: its lag is that broker's to report.
		a.pub.Remove()
		a.pub = nil
		a.unpublishPending()
		a.log().Warn().Str("reason", reason).Uint64("epoch", a.st.epoch).Msg("offsets_group_fenced")
	}
}

// mayWriteFile, in a cluster, checks the gate (fencing the actor when it closed).
// Whether the file on disk is of a newer epoch than this actor's (another broker took
// the group over), or its tombstone unreadable, is checked by the write's own job, just
// before it writes (checkpointJob): the epoch is read again for every write, never
// remembered from the last one, since a broker that took the group over rewrites the
// file under its own epoch at any time, and that read is what fences the former owner.
func (a *offsetsActor) mayWriteFile() bool {
	if a.gate == nil {
		return true
	}
	if a.fenced {
		return false
	}
	if !a.gate() {
		a.fence("gate_closed")
		return false
	}
	return true
}

// noteTomb takes what a job found reading the group's epoch: an unreadable tombstone is
// logged once (until it is readable again) and remembered in tombUnreadable.
func (a *offsetsActor) noteTomb(err error) {
	if err != nil && !a.tombUnreadable {
		a.log().Error().Err(err).Str("tombstone", filepath.Base(tombPath(a.filePath()))).
			Msg("offsets_tombstone_unreadable_file_not_written")
	}
	a.tombUnreadable = err != nil
}
