package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Invariant 7, the consumer group protocol (KIP-848): the broker assigns and members
// move one heartbeat at a time, so ownership is judged by member epochs. A member holds a
// partition from the epoch it was given it at (its epoch when its client's
// OnPartitionsAssigned ran) to its epoch when it gave it up (OnPartitionsRevoked, or
// OnPartitionsLost once fenced), and two members never hold one partition at a common
// epoch: the coordinator hands a partition on only once its owner released it, at a
// later epoch, and a member fenced without knowing is fenced below the epoch its
// partitions move at. After the faults stop the group converges (Stable, every member
// at the group epoch, every subscribed partition assigned to exactly one member), every
// acknowledged OffsetCommit v9 is there afterwards (invariant 1), and the fences the
// coordinator answered (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) stay few: its state is
// durable, so an actor restart or a reload carries every member on at its epoch.

// held is one member's hold of one partition, over member epochs [from, to].
type held struct {
	member   string
	from, to int32
	open     bool
}

// owners is every hold the consumer-protocol members' callbacks reported.
type owners struct {
	mu    sync.Mutex
	holds map[string][]*held // "topic/partition" -> holds, in callback order
	open  map[string]map[string]*held
}

func newOwners() *owners {
	return &owners{holds: map[string][]*held{}, open: map[string]map[string]*held{}}
}

// hooks are the client options that report member's holds.
func (o *owners) hooks(member string) []kgo.Opt {
	epoch := func(cl *kgo.Client) int32 {
		_, e := cl.GroupMetadata()
		return e
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			o.assigned(member, epoch(cl), ps)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			o.released(member, epoch(cl), ps)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			o.released(member, epoch(cl), ps)
		}),
	}
}

func (o *owners) assigned(member string, epoch int32, ps map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open[member] == nil {
		o.open[member] = map[string]*held{}
	}
	for t, parts := range ps {
		for _, p := range parts {
			tp := fmt.Sprintf("%s/%d", t, p)
			if o.open[member][tp] != nil {
				continue // still held: a callback repeating what the member has
			}
			h := &held{member: member, from: epoch, to: epoch, open: true}
			o.open[member][tp] = h
			o.holds[tp] = append(o.holds[tp], h)
		}
	}
}

func (o *owners) released(member string, epoch int32, ps map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for t, parts := range ps {
		for _, p := range parts {
			tp := fmt.Sprintf("%s/%d", t, p)
			if h := o.open[member][tp]; h != nil {
				h.to, h.open = max(h.from, epoch), false
				delete(o.open[member], tp)
			}
		}
	}
}

// closing ends member's holds at epoch, its last, before its client leaves.
func (o *owners) closing(member string, epoch int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for tp, h := range o.open[member] {
		h.to, h.open = max(h.from, epoch), false
		delete(o.open[member], tp)
	}
}

// check is invariant 7's ownership half: no partition held by two members at a common
// epoch. It returns the violations and how many holds were checked.
func (o *owners) check() ([]string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	n := 0
	for tp, hs := range o.holds {
		n += len(hs)
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.member != b.member && a.from <= b.to && b.from <= a.to {
					out = append(out, fmt.Sprintf("invariant 7: %s held by %s at epochs %d..%d and by %s at %d..%d", tp, a.member, a.from, a.to, b.member, b.from, b.to))
				}
			}
		}
	}
	sort.Strings(out)
	return out, n
}

// converged is invariant 7's convergence: the group Stable through ConsumerGroupDescribe
// (so a fallback to the classic protocol cannot pass), with all g.members members, each
// at the group epoch, and every partition of the subscribed topics assigned to exactly
// one of them.
func converged(ctx context.Context, adm *kadm.Client, g groupSpec) error {
	ds, err := adm.DescribeConsumerGroups(ctx, g.name)
	if err != nil {
		return err
	}
	d := ds[g.name]
	if d.Err != nil {
		return d.Err
	}
	if d.State != "Stable" || len(d.Members) != g.members {
		return fmt.Errorf("%s at epoch %d with %d members", d.State, d.Epoch, len(d.Members))
	}
	owner := map[string]string{}
	var problems []string
	for _, m := range d.Members {
		if m.MemberEpoch != d.Epoch {
			problems = append(problems, fmt.Sprintf("member %s at epoch %d, the group at %d", m.ClientID, m.MemberEpoch, d.Epoch))
		}
		for t, ps := range m.Assignment {
			for p := range ps {
				tp := fmt.Sprintf("%s/%d", t, p)
				if o, dup := owner[tp]; dup {
					problems = append(problems, fmt.Sprintf("%s assigned to %s and %s", tp, o, m.ClientID))
				}
				owner[tp] = m.ClientID
			}
		}
	}
	for _, t := range topics {
		for p := range partitions {
			if _, ok := owner[fmt.Sprintf("%s/%d", t, p)]; !ok {
				problems = append(problems, fmt.Sprintf("%s/%d unassigned", t, p))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// maxFences bounds invariant 7's fences over a run: each member fenced at most once
// (a session that truly expired while faults delayed its heartbeats), never a storm of
// members fenced again and again after the coordinator restarted.
func maxFences() int {
	n := 0
	for _, g := range groups {
		if g.consumer {
			n += g.members
		}
	}
	return n
}
