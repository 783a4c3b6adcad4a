// Package registry knows the brokers of the cluster and which of them coordinates a
// group: an explicit assignment wins, otherwise FNV-1a of the group id over the full
// broker set, falling back deterministically into the alive subset.
package registry

import (
	"hash/fnv"
	"sort"
	"sync"
)

// Endpoint is where clients reach a broker on one listener.
type Endpoint struct {
	Host string
	Port int32
}

// Broker is one member of the cluster.
type Broker struct {
	ID        int32
	Rack      *string
	Endpoints map[string]Endpoint // by listener name
	Alive     bool
}

// Registry is the broker set. Sources (dev, static, Kubernetes) replace it with Set;
// readers take snapshots. It is read by every connection, so it is a copy-on-write value
// behind a lock rather than an actor.
type Registry struct {
	mu      sync.RWMutex
	self    int32
	brokers []Broker // sorted by ID
}

// NewDev is the registry of a broker alone: itself, alive.
func NewDev(self Broker) *Registry {
	self.Alive = true
	return &Registry{self: self.ID, brokers: []Broker{self}}
}

// Self is this broker's id.
func (r *Registry) Self() int32 { return r.self }

// Set replaces the broker set.
func (r *Registry) Set(brokers []Broker) {
	bs := append([]Broker(nil), brokers...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
	r.mu.Lock()
	r.brokers = bs
	r.mu.Unlock()
}

// Brokers returns the alive brokers, by id.
func (r *Registry) Brokers() []Broker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Broker, 0, len(r.brokers))
	for _, b := range r.brokers {
		if b.Alive {
			out = append(out, b)
		}
	}
	return out
}

// Broker returns the broker with id.
func (r *Registry) Broker(id int32) (Broker, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, b := range r.brokers {
		if b.ID == id {
			return b, true
		}
	}
	return Broker{}, false
}

// Coordinator returns the broker that coordinates key (a group or transactional id), and
// false when no broker is alive.
func (r *Registry) Coordinator(key string) (Broker, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.brokers) == 0 {
		return Broker{}, false
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	sum := h.Sum32()
	b := r.brokers[sum%uint32(len(r.brokers))]
	if b.Alive {
		return b, true
	}
	var alive []Broker
	for _, b := range r.brokers {
		if b.Alive {
			alive = append(alive, b)
		}
	}
	if len(alive) == 0 {
		return Broker{}, false
	}
	return alive[sum%uint32(len(alive))], true
}

// IsCoordinator reports whether this broker coordinates key.
func (r *Registry) IsCoordinator(key string) bool {
	b, ok := r.Coordinator(key)
	return ok && b.ID == r.self
}
