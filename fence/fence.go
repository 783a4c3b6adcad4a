// Package fence is a broker's permission to write the shared volume, and its view of
// whether a peer has lost that permission.
//
// Routing decides who should own a group or a partition; a fence decides who may write
// it. A broker writes only while its own lease is held and not past ValidUntil on its own
// monotonic clock, and it adopts a peer's groups and partitions only once Lapsed reports
// that peer's lease gone. Implementations: a lease file plus an exclusive lock on a plain
// shared volume (File, this package), and a coordination.k8s.io Lease per broker in
// Kubernetes (fence/kube). Dev is the broker alone: always valid, no peers.
package fence

import (
	"context"
	"time"
)

// Fence is one broker's lease on its own identity.
type Fence interface {
	// Start acquires this broker's lease, blocking until it is held or ctx ends, and
	// keeps renewing it until Stop.
	Start(ctx context.Context) error
	// ValidUntil is the instant until which this broker may write, measured on this
	// process's clock (time.Now, monotonic). The zero time when the lease is not held.
	// A writer checks it after its write is durable and before it acknowledges.
	ValidUntil() time.Time
	// Term counts the times the lease was taken: it grows whenever the lease is held
	// again after ValidUntil had passed (a pause, a failed renewal). What a broker loaded
	// under one term it must not acknowledge under another: a peer may have adopted it
	// in between.
	Term() uint64
	// Lapsed reports whether broker id's lease has lapsed as observed here (unchanged
	// for a whole lease duration on this clock, released, or never taken), so that what
	// it owned may be adopted. Lapsed of this broker's own id is false while held.
	Lapsed(id int32) bool
	// Changes is signalled (coalesced, never blocking the sender) whenever this broker's
	// lease is lost or regained, or a peer's Lapsed changes.
	Changes() <-chan struct{}
	// Stop releases the lease, so successors need not wait for it to lapse, and joins
	// every goroutine the fence started.
	Stop()
}

// Valid reports whether f allows a write now.
func Valid(f Fence) bool { return time.Now().Before(f.ValidUntil()) }

// Dev is the fence of a broker alone: it may always write and has no peers.
type Dev struct{ ch chan struct{} }

// NewDev returns the fence of a broker alone.
func NewDev() *Dev { return &Dev{ch: make(chan struct{})} }

func (*Dev) Start(context.Context) error { return nil }

// ValidUntil is far in the future.
func (*Dev) ValidUntil() time.Time { return time.Now().Add(24 * time.Hour) }

// Term is always 1.
func (*Dev) Term() uint64 { return 1 }

// Lapsed: a broker alone has no peers; any other id is lapsed.
func (*Dev) Lapsed(int32) bool { return true }

func (d *Dev) Changes() <-chan struct{} { return d.ch }

func (*Dev) Stop() {}

// notify signals ch without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
