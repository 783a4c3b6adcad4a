package actor

import "sort"

// Pending is an actor's table of the replies it waits for, after etcd's pkg/wait: each
// promise the actor makes to itself is registered with what the actor needs when the
// answer comes (a continuation, the request it belongs to). The answer arrives in the
// actor's mailbox as *Settled; Take finds and forgets its entry. A Pending is part of one
// actor's state and is touched only in that actor's Receive.
//
// The zero Pending is ready to use.
type Pending[T any] struct {
	m map[uint64]T
}

// Await makes a promise delivering to the actor of ctx and registers v under it.
func (p *Pending[T]) Await(ctx Context, v T) Promise {
	pr := NewPromise(ctx, ctx.Self())
	p.Register(pr, v)
	return pr
}

// Register records v under a promise the actor made itself (one delivering to it).
func (p *Pending[T]) Register(pr Promise, v T) {
	if p.m == nil {
		p.m = map[uint64]T{}
	}
	p.m[pr.ID()] = v
}

// Take removes and returns the entry m answers; false for an answer nobody waits for
// (one that came after the entry was dropped: a late reply is not an error).
func (p *Pending[T]) Take(m *Settled) (T, bool) {
	v, ok := p.m[m.ID]
	if ok {
		delete(p.m, m.ID)
	}
	return v, ok
}

// Len is the number of replies still awaited.
func (p *Pending[T]) Len() int { return len(p.m) }

// Drain removes every entry and calls fn on each, oldest first: a stopping actor
// answers every caller still waiting. Answers that arrive later are dropped by Take.
func (p *Pending[T]) Drain(fn func(T)) {
	if len(p.m) == 0 {
		return
	}
	ids := make([]uint64, 0, len(p.m))
	for id := range p.m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	m := p.m
	p.m = nil
	for _, id := range ids {
		fn(m[id])
	}
}
