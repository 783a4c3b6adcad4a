package group

import "sync/atomic"

// PendingBudget bounds the KIP-394 pending members of every group of a broker together
// (group.max.pending.members.total). A pending member is an id handed out by a JoinGroup
// with no member id, kept until the client joins with it or its session timeout (up to
// group.max.session.timeout.ms, 30 minutes) passes; a client that never comes back
// holds one for that long, and Apache bounds neither how many one group nor how many
// one broker may hold. Each group takes a place before it adds a pending member and
// gives it back when the member joins, leaves or expires, or the group stops. Safe for
// concurrent use; nil is no bound.
type PendingBudget struct {
	max int64
	n   atomic.Int64
}

// NewPendingBudget bounds a broker's pending members at max (0 or less: no bound).
func NewPendingBudget(max int) *PendingBudget {
	if max <= 0 {
		return nil
	}
	return &PendingBudget{max: int64(max)}
}

// take reserves a place; false when the broker holds max pending members already.
func (b *PendingBudget) take() bool {
	if b == nil {
		return true
	}
	if b.n.Add(1) > b.max {
		b.n.Add(-1)
		return false
	}
	return true
}

// release gives back n places.
func (b *PendingBudget) release(n int) {
	if b != nil && n > 0 {
		b.n.Add(-int64(n))
	}
}

// Count is how many pending members the broker holds.
func (b *PendingBudget) Count() int64 {
	if b == nil {
		return 0
	}
	return b.n.Load()
}
