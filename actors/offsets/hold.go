package offsets

import (
	"errors"
	"io/fs"
	"time"
)

// hold is an offsets actor's view of the hold markers naming its group (journal.Claimed.Hold):
// a damaged journal segment may have held acknowledged commits of the group, so the
// group answers COORDINATOR_NOT_AVAILABLE, rather than offsets that may be older than
// what its consumers were told is committed, until the operator has checked it and
// removed every marker (docs/offsets.md). The markers are looked at again at most every
// RetryLoadAfter; no restart is needed.
type hold struct {
	markers   []string
	checkedAt time.Time
}

// holding reports whether the group is still held, reading the markers when they are due.
// The file is not read while the group is held, so what the group serves once the
// markers are gone is the file as the operator left it.
func (a *offsetsActor) holding() bool {
	h := &a.hold
	if len(h.markers) == 0 {
		return false
	}
	now := a.cfg.Now()
	if !h.checkedAt.IsZero() && now.Sub(h.checkedAt) < a.cfg.RetryLoadAfter {
		return true
	}
	first := h.checkedAt.IsZero()
	h.checkedAt = now
	left := h.markers[:0]
	for _, m := range h.markers {
		if _, err := a.cfg.FS.ReadFile(m); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, m)
		}
	}
	h.markers = left
	if len(left) > 0 {
		if first {
			a.log.Error().Strs("markers", left).Msg("offsets_group_held_journal_damaged_until_marker_removed")
		}
		return true
	}
	if !first {
		a.log.Info().Msg("offsets_group_hold_released")
	}
	return false
}
