// Package eos is the consume-transform-produce member the exactly-once kill tests run
// (e2e/txn on a broker alone, e2e/cluster on three): franz-go's GroupTransactSession
// copying a topic in transactions while brokers are killed under it, and the ledger that
// counts what the members saw, so a killer can aim at a moment (after n commits, while an
// EndTxn is in flight).
package eos

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Ledger counts the transactions the members committed and the EndTxn calls in flight.
type Ledger struct {
	mu      sync.Mutex
	cond    *sync.Cond
	commits int
	ending  int
	stopped bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	l := &Ledger{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Commits is the number of transactions committed so far.
func (l *Ledger) Commits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commits
}

// WaitFor waits until at least n transactions are committed and, with ending, an EndTxn
// is in flight; or until deadline passes or the ledger is stopped. It reports whether
// the moment came.
func (l *Ledger) WaitFor(n int, ending bool, deadline time.Time) bool {
	wake := time.AfterFunc(time.Until(deadline), func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer wake.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := func() bool { return l.commits >= n && (!ending || l.ending > 0) }
	for !ok() && !l.stopped && time.Now().Before(deadline) {
		l.cond.Wait()
	}
	return ok()
}

// Stop wakes every waiter for good.
func (l *Ledger) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *Ledger) add(ending, commits int) {
	l.mu.Lock()
	l.ending += ending
	l.commits += commits
	l.cond.Broadcast()
	l.mu.Unlock()
}

// Member is one consume-transform-produce member: it reads In at read_committed in
// Group and writes each record to Out, its value suffixed with "|"+Tag, one
// transaction per poll of at most MaxRecords (default 40), the group's offsets in it.
type Member struct {
	Seeds          []string
	TxnID, Tag     string
	Group, In, Out string
	SessionTimeout time.Duration // the group session's
	RetryTimeout   time.Duration // the client's
	MaxRecords     int
}

// Run copies until stop is closed. Any error from Begin or End (an indeterminate EndTxn,
// a fenced epoch) closes the session and opens a new one with the same transactional id,
// as applications are told to.
func (m Member) Run(l *Ledger, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(m.Seeds...), kgo.TransactionalID(m.TxnID),
			kgo.TransactionTimeout(10*time.Second), kgo.ConsumerGroup(m.Group), kgo.ConsumeTopics(m.In),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.SessionTimeout(m.SessionTimeout),
			kgo.DefaultProduceTopic(m.Out), kgo.FetchMaxWait(200*time.Millisecond), kgo.RetryTimeout(m.RetryTimeout))
		if err != nil {
			return
		}
		m.loop(sess, l, stop)
		sess.Close()
	}
}

func (m Member) loop(sess *kgo.GroupTransactSession, l *Ledger, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		max := m.MaxRecords
		if max <= 0 {
			max = 40
		}
		fs := sess.PollRecords(ctx, max)
		cancel()
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(context.Background(), &kgo.Record{Key: r.Key, Value: []byte(string(r.Value) + "|" + m.Tag)}, nil)
		})
		l.add(1, 0)
		committed, err := sess.End(context.Background(), kgo.TryCommit)
		if err == nil && committed {
			l.add(-1, 1)
		} else {
			l.add(-1, 0)
		}
		if err != nil {
			return
		}
	}
}
