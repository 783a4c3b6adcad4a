package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Tracker records every record the group's members consume and proves, at the end, that
// every offset of the log was consumed at least once. It also paces the members: a member
// asks Admit before it processes a record, and Admit holds it while the count of distinct
// records reached the gate, so the scripted group events (leave, join, restart) happen at
// known points of the consumption instead of after a race.
type Tracker struct {
	records int
	end     map[int32]int64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change: a broadcast to waiters
	gate    int
	at      map[pos]int // position -> record index seen there
	index   []pos       // record index -> first position it was seen at (Partition -1: unseen)
	unique  int
	total   int
	members map[string]int
	err     error
}

type pos struct {
	Partition int32
	Offset    int64
}

// NewTracker tracks the consumption of records records, laid out in partitions ending at end.
func NewTracker(records int, end map[int32]int64) *Tracker {
	t := &Tracker{
		records: records,
		end:     end,
		changed: make(chan struct{}),
		at:      make(map[pos]int, records),
		index:   make([]pos, records),
		members: make(map[string]int),
	}
	for i := range t.index {
		t.index[i].Partition = -1
	}
	return t
}

// Open lets members consume until gate distinct records were seen.
func (t *Tracker) Open(gate int) {
	t.mu.Lock()
	t.gate = gate
	t.broadcast()
	t.mu.Unlock()
}

// Admit blocks while the gate is reached; it returns early when ctx is done, so a member
// being closed or rebalanced is never held.
func (t *Tracker) Admit(ctx context.Context) error {
	for {
		t.mu.Lock()
		open, ch := t.unique < t.gate, t.changed
		t.mu.Unlock()
		if open {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Consumed records that member got the record key/value at partition/offset. It returns
// (and keeps, for Wait) an error when the record is not one the scenario produced, or when
// one position yields two different records.
func (t *Tracker) Consumed(member string, partition int32, offset int64, key, value []byte) error {
	i, err := Index(key, value)
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.broadcast()
	p := pos{partition, offset}
	switch {
	case err != nil:
	case i < 0 || i >= t.records:
		err = fmt.Errorf("record index %d out of range", i)
	case t.at[p] != i && t.seenAt(p):
		err = fmt.Errorf("partition %d offset %d gave record %d, earlier record %d", partition, offset, i, t.at[p])
	case t.index[i].Partition >= 0 && t.index[i] != p:
		err = fmt.Errorf("record %d at partition %d offset %d, earlier at partition %d offset %d (produced twice?)",
			i, partition, offset, t.index[i].Partition, t.index[i].Offset)
	}
	if err != nil {
		err = fmt.Errorf("member %s: %w", member, err)
		if t.err == nil {
			t.err = err
		}
		return err
	}
	t.total++
	t.members[member]++
	if t.index[i].Partition < 0 {
		t.index[i] = p
		t.at[p] = i
		t.unique++
	}
	return nil
}

func (t *Tracker) seenAt(p pos) bool { _, ok := t.at[p]; return ok }

func (t *Tracker) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Wait blocks until n distinct records were consumed, a consumed record was wrong, or ctx
// is done; the error says how far consumption got.
func (t *Tracker) Wait(ctx context.Context, n int) error {
	for {
		t.mu.Lock()
		unique, err, ch := t.unique, t.err, t.changed
		t.mu.Unlock()
		if err != nil {
			return err
		}
		if unique >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d distinct records: only %d consumed (%s): %w", n, unique, t.Stats(), ctx.Err())
		}
	}
}

// Check proves that every offset below the log end of every partition was consumed.
func (t *Tracker) Check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	var missing []string
	for p, end := range t.end {
		for o := int64(0); o < end; o++ {
			if !t.seenAt(pos{p, o}) {
				missing = append(missing, fmt.Sprintf("%d/%d", p, o))
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("%d records never consumed (partition/offset: %s)", len(missing), head(missing, 10))
	}
	if t.unique != t.records {
		return fmt.Errorf("%d distinct records consumed, want %d", t.unique, t.records)
	}
	return nil
}

// Stats is what was consumed so far: distinct records, duplicates, records per member.
type Stats struct {
	Unique, Total int
	Members       map[string]int
}

func (s Stats) String() string {
	names := make([]string, 0, len(s.Members))
	for m := range s.Members {
		names = append(names, m)
	}
	sort.Strings(names)
	per := make([]string, len(names))
	for i, m := range names {
		per[i] = fmt.Sprintf("%s=%d", m, s.Members[m])
	}
	return fmt.Sprintf("%d distinct, %d duplicates, by member %s", s.Unique, s.Total-s.Unique, strings.Join(per, " "))
}

// Stats returns a snapshot of what was consumed.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]int, len(t.members))
	for k, v := range t.members {
		m[k] = v
	}
	return Stats{Unique: t.unique, Total: t.total, Members: m}
}

func head(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], " ") + fmt.Sprintf(" ... (%d more)", len(s)-n)
	}
	return strings.Join(s, " ")
}

// Frontier is, per partition, the first offset not yet consumed: everything below it was
// consumed, so a group that committed what it consumed has committed at least this.
func (t *Tracker) Frontier() map[int32]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := make(map[int32]int64, len(t.end))
	for p, end := range t.end {
		o := int64(0)
		for o < end && t.seenAt(pos{p, o}) {
			o++
		}
		f[p] = o
	}
	return f
}
