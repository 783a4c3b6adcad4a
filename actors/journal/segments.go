package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"kaas/actors/actor"
	"kaas/storage"
)

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

// SpareMarker starts the names of spare segment files, spare-<n>.tmp: the next segment
// while it is zero-filled. The replay at start removes those left over.
const SpareMarker = "spare-"

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
