// Package registry knows the brokers of the cluster and which of them coordinates a
// group or leads a partition: an explicit assignment (assignment.json) wins, otherwise
// FNV-1a 32-bit of the key over the full broker set (the configured cluster size, not the
// alive count), falling back deterministically into the sorted alive subset when the
// preferred broker is not alive.
//
// Sources feed it: dev (this broker alone), static (a peer list, alive by probing) and
// kubernetes (registry/kube, the EndpointSlices of the headless Service).
package registry

import (
	"context"
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

// Source feeds a registry: Set with the broker set it sees, then MarkSynced once its
// first complete view is in, until ctx ends.
type Source interface {
	Run(ctx context.Context, r *Registry) error
}

// Registry is the broker set. Sources replace it with Set; readers take snapshots. It is
// read by every connection, so it is a copy-on-write value behind a lock rather than an
// actor.
type Registry struct {
	self int32
	size int // the full broker set: ids 0..size-1

	mu      sync.RWMutex
	brokers []Broker // sorted by ID
	alive   []int32  // sorted ids of alive brokers (ids < size)
	synced  bool
	version uint64
	assign  *Assignment
	subs    map[int]chan struct{}
	nextSub int
	// suspect are the peers whose connection just ended and whose fate is not known
	// yet (Suspect).
	suspect map[int32]bool
	// closed, set by a source that holds connections, reports whether the one to a
	// peer has ended already, before the source's own reader has run.
	closed func(id int32) bool
}

// New returns a registry of a cluster of size brokers (ids 0..size-1) seen from broker
// self. Nothing is alive and it is not synced until a source says so.
func New(self int32, size int) *Registry {
	if size < 1 {
		size = 1
	}
	return &Registry{self: self, size: size, subs: map[int]chan struct{}{}}
}

// NewDev is the registry of a broker alone: itself, alive, synced.
func NewDev(self Broker) *Registry {
	r := New(self.ID, int(self.ID)+1)
	r.size = 0 // every key routes to self
	self.Alive = true
	r.Set([]Broker{self})
	r.MarkSynced()
	return r
}

// Self is this broker's id.
func (r *Registry) Self() int32 { return r.self }

// Size is the configured size of the full broker set (0 for dev).
func (r *Registry) Size() int { return r.size }

// Set replaces the broker set.
func (r *Registry) Set(brokers []Broker) {
	bs := make([]Broker, len(brokers))
	copy(bs, brokers)
	sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
	var alive []int32
	for _, b := range bs {
		if b.Alive && (r.size == 0 || int(b.ID) < r.size) {
			alive = append(alive, b.ID)
		}
	}
	r.mu.Lock()
	changed := !sameBrokers(r.brokers, bs)
	r.brokers = bs
	r.alive = alive
	if changed {
		r.version++
	}
	r.mu.Unlock()
	if changed {
		r.notify()
	}
}

func sameBrokers(a, b []Broker) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Alive != b[i].Alive || len(a[i].Endpoints) != len(b[i].Endpoints) {
			return false
		}
		for k, e := range a[i].Endpoints {
			if b[i].Endpoints[k] != e {
				return false
			}
		}
	}
	return true
}

// MarkSynced records that the source's first complete view is in.
func (r *Registry) MarkSynced() {
	r.mu.Lock()
	was := r.synced
	r.synced = true
	r.version++
	r.mu.Unlock()
	if !was {
		r.notify()
	}
}

// Synced reports whether the source's first complete view is in. Until then the group
// APIs answer COORDINATOR_NOT_AVAILABLE and the data APIs LEADER_NOT_AVAILABLE.
func (r *Registry) Synced() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.synced
}

// SetAssignment replaces the explicit assignments (nil: none).
func (r *Registry) SetAssignment(a *Assignment) {
	r.mu.Lock()
	r.assign = a
	r.version++
	r.mu.Unlock()
	r.notify()
}

// Version changes whenever the broker set, the synced flag or the assignment changes.
func (r *Registry) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// Subscribe returns a channel signalled (coalesced) after every change, and the function
// that ends the subscription.
func (r *Registry) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = ch
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}

func (r *Registry) notify() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// SetSuspect says whether a source has just lost its connection to peer id and does
// not know yet whether it is gone (a dial again will say). It changes nothing in the
// broker set and notifies no one.
func (r *Registry) SetSuspect(id int32, suspect bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if suspect {
		if r.suspect == nil {
			r.suspect = map[int32]bool{}
		}
		r.suspect[id] = true
	} else {
		delete(r.suspect, id)
	}
}

// Suspect reports whether the connection to peer id has just ended and its fate is not
// known yet: for a few milliseconds after a peer is killed, before the dial that
// follows is refused, Metadata names no leader on it rather than a dead one
// (broker.topicsCluster). A live peer that closed an idle connection is dialled again
// at once.
func (r *Registry) Suspect(id int32) bool {
	r.mu.RLock()
	suspect, closed := r.suspect[id], r.closed
	r.mu.RUnlock()
	return suspect || closed != nil && closed(id)
}

// Reachable reports whether broker id is alive in the registry and not suspect.
func (r *Registry) Reachable(id int32) bool {
	b, ok := r.Broker(id)
	return ok && b.Alive && !r.Suspect(id)
}

// SetClosed installs the check Suspect makes of a held connection (Static).
func (r *Registry) SetClosed(closed func(id int32) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = closed
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

// All returns every known broker, alive or not, by id.
func (r *Registry) All() []Broker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]Broker(nil), r.brokers...)
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

// Hash is FNV-1a 32-bit of s: the routing hash of groups and transactional ids.
func Hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// PartitionHash is the routing hash of a partition: FNV-1a 32-bit of the topic name plus
// the partition number, so one topic's partitions go round the broker set in turn.
func PartitionHash(topic string, partition int32) uint32 {
	return Hash(topic) + uint32(partition)
}

// View is a frozen routing table: the broker set's size, the alive ids and the
// explicit assignment. The ownership controller routes by the view it has applied, which
// may differ from the registry's latest for as long as it takes to hand groups over.
type View struct {
	Self   int32
	Size   int     // 0: dev, every key is Self's
	Alive  []int32 // sorted
	Assign *Assignment
}

// Snapshot is the registry's current view.
func (r *Registry) Snapshot() View {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return View{Self: r.self, Size: r.size, Alive: append([]int32(nil), r.alive...), Assign: r.assign}
}

// IsAlive reports whether id is in the view's alive set.
func (v View) IsAlive(id int32) bool {
	i := sort.Search(len(v.Alive), func(i int) bool { return v.Alive[i] >= id })
	return i < len(v.Alive) && v.Alive[i] == id
}

// route picks the owner of a key with hash sum and an optional explicit broker: the
// explicit broker or the hashed slot if alive, else alive[sum % len(alive)].
func (v View) route(sum uint32, explicit int32, hasExplicit bool) (int32, bool) {
	if v.Size == 0 { // dev: this broker alone
		return v.Self, true
	}
	want := int32(sum % uint32(v.Size))
	if hasExplicit {
		want = explicit
	}
	if v.IsAlive(want) {
		return want, true
	}
	if len(v.Alive) == 0 {
		return 0, false
	}
	return v.Alive[sum%uint32(len(v.Alive))], true
}

// GroupOwner returns the coordinator of group g; ok is false when no broker is alive.
func (v View) GroupOwner(g string) (int32, bool) {
	id, has := v.Assign.group(g)
	return v.route(Hash(g), id, has)
}

// TxnOwner returns the coordinator of transactional id t.
func (v View) TxnOwner(t string) (int32, bool) {
	id, has := v.Assign.txn(t)
	return v.route(Hash(t), id, has)
}

// PartitionOwner returns the leader of (topic, partition).
func (v View) PartitionOwner(topic string, partition int32) (int32, bool) {
	id, has := v.Assign.partition(topic, partition)
	return v.route(PartitionHash(topic, partition), id, has)
}

// GroupOwner returns the coordinator of group g by the registry's latest view.
func (r *Registry) GroupOwner(g string) (int32, bool) { return r.Snapshot().GroupOwner(g) }

// PartitionOwner returns the leader of (topic, partition) by the registry's latest view.
func (r *Registry) PartitionOwner(topic string, partition int32) (int32, bool) {
	return r.Snapshot().PartitionOwner(topic, partition)
}

// Coordinator returns the broker that coordinates group key, and false when no broker is
// alive (or the broker routed to is not known).
func (r *Registry) Coordinator(key string) (Broker, bool) {
	id, ok := r.GroupOwner(key)
	if !ok {
		return Broker{}, false
	}
	return r.Broker(id)
}

// TxnCoordinator returns the broker that coordinates transactional id t.
func (r *Registry) TxnCoordinator(t string) (Broker, bool) {
	id, ok := r.Snapshot().TxnOwner(t)
	if !ok {
		return Broker{}, false
	}
	return r.Broker(id)
}

// IsCoordinator reports whether this broker coordinates group key.
func (r *Registry) IsCoordinator(key string) bool {
	id, ok := r.GroupOwner(key)
	return ok && id == r.self
}

// IsLeader reports whether this broker leads (topic, partition).
func (r *Registry) IsLeader(topic string, partition int32) bool {
	id, ok := r.PartitionOwner(topic, partition)
	return ok && id == r.self
}
