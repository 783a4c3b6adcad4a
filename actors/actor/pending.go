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
	// The one reply most actors wait for at a time lives in id/v; a map is made only
	// when a second is awaited alongside it. An idle actor holds no map: at 100,000
	// groups the maps made for one reply each cost 30 MB.
	id uint64 // of the entry in v; 0 when none (promise ids start at 1)
	v  T
	m  map[uint64]T
}

// Await makes a promise delivering to the actor of ctx and registers v under it.
func (p *Pending[T]) Await(ctx Context, v T) Promise {
	pr := NewPromise(ctx, ctx.Self())
	p.Register(pr, v)
	return pr
}

// Register records v under a promise the actor made itself (one delivering to it).
func (p *Pending[T]) Register(pr Promise, v T) {
	if p.id == 0 {
		p.id, p.v = pr.ID(), v
		return
	}
	if p.m == nil {
		p.m = map[uint64]T{}
	}
	p.m[pr.ID()] = v
}

// Take removes and returns the entry m answers; false for an answer nobody waits for
// (one that came after the entry was dropped: a late reply is not an error).
func (p *Pending[T]) Take(m *Settled) (T, bool) {
	if m.ID != 0 && m.ID == p.id {
		v := p.v
		var zero T
		p.id, p.v = 0, zero
		return v, true
	}
	v, ok := p.m[m.ID]
	if ok {
		delete(p.m, m.ID)
		if len(p.m) == 0 {
			p.m = nil
		}
	}
	return v, ok
}

// Len is the number of replies still awaited.
func (p *Pending[T]) Len() int {
	if p.id != 0 {
		return len(p.m) + 1
	}
	return len(p.m)
}

// Drain removes every entry and calls fn on each, oldest first: a stopping actor
// answers every caller still waiting. Answers that arrive later are dropped by Take.
func (p *Pending[T]) Drain(fn func(T)) {
	if p.Len() == 0 {
		return
	}
	m := p.m
	if m == nil {
		m = map[uint64]T{}
	}
	if p.id != 0 {
		m[p.id] = p.v
	}
	var zero T
	p.id, p.v, p.m = 0, zero, nil
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		fn(m[id])
	}
}
