package offsets

import "time"

// hold is an offsets actor's view of the hold markers naming its group (journal.Claimed.Hold):
// a damaged journal segment may have held acknowledged commits of the group, so the
// group answers COORDINATOR_NOT_AVAILABLE, rather than offsets that may be older than
// what its consumers were told is committed, until the operator has checked it and
// removed every marker (docs/offsets.md). The markers are looked at again at most every
// RetryLoadAfter, by a load job (load.go: loadDue, loadJob.run); no restart is needed.
// The file is not read while the group is held, so what the group serves once the
// markers are gone is the file as the operator left it.
type hold struct {
	markers   []string
	checkedAt time.Time
}
