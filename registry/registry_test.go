package registry

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"testing"
)

// fnv32a is FNV-1a 32-bit computed here from hash/fnv, independently of Hash.
func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// wantOwner is the documented rule, written out again: the hashed slot over the full set
// (size) when that broker is alive, else alive[sum % len(alive)] with alive sorted.
func wantOwner(sum uint32, size int, alive []int32) (int32, bool) {
	slot := int32(sum % uint32(size))
	for _, a := range alive {
		if a == slot {
			return slot, true
		}
	}
	if len(alive) == 0 {
		return 0, false
	}
	return alive[sum%uint32(len(alive))], true
}

func brokers(alive map[int32]bool) []Broker {
	var bs []Broker
	for id, a := range alive {
		bs = append(bs, Broker{ID: id, Alive: a, Endpoints: map[string]Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: 9092 + id}}})
	}
	return bs
}

func TestHashIsFNV1a(t *testing.T) {
	// FNV-1a 32-bit test vectors (offset basis for "", and the published "a" and "foobar").
	for s, want := range map[string]uint32{"": 0x811c9dc5, "a": 0xe40c292c, "foobar": 0xbf9cf968} {
		if got := Hash(s); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", s, got, want)
		}
	}
	// a partition adds its number to its topic's hash, wrapping at 2^32
	if got, want := PartitionHash("orders", 7), fnv32a("orders")+7; got != want {
		t.Errorf("PartitionHash(orders, 7) = %#x, want %#x", got, want)
	}
	base := uint32(0xbf9cf968) // FNV-1a("foobar"); + 2^31-1 goes past 2^32
	if got, want := PartitionHash("foobar", 0x7fffffff), base+0x7fffffff; got != want || got >= base {
		t.Errorf("PartitionHash wraps to %#x, want %#x", got, want)
	}
}

// Every broker alive: a key goes to FNV-1a(key) % size, for groups, transactional ids and
// partitions, by the view and by the registry's own methods.
func TestOwnersHashOverFullSet(t *testing.T) {
	const size = 5
	r := New(0, size)
	r.Set(brokers(map[int32]bool{0: true, 1: true, 2: true, 3: true, 4: true}))
	v := r.Snapshot()
	perOwner := map[int32]int{}
	for i := range 200 {
		key := fmt.Sprintf("group-%d", i)
		want := int32(fnv32a(key) % size)
		perOwner[want]++
		if got, ok := v.GroupOwner(key); !ok || got != want {
			t.Fatalf("GroupOwner(%s) = %d, %v; want %d", key, got, ok, want)
		}
		if got, ok := r.GroupOwner(key); !ok || got != want {
			t.Fatalf("Registry.GroupOwner(%s) = %d, %v; want %d", key, got, ok, want)
		}
		if got, ok := v.TxnOwner(key); !ok || got != want {
			t.Fatalf("TxnOwner(%s) = %d, %v; want %d", key, got, ok, want)
		}
		if b, ok := r.Coordinator(key); !ok || b.ID != want {
			t.Fatalf("Coordinator(%s) = %d, %v; want %d", key, b.ID, ok, want)
		}
		if b, ok := r.TxnCoordinator(key); !ok || b.ID != want {
			t.Fatalf("TxnCoordinator(%s) = %d, %v; want %d", key, b.ID, ok, want)
		}
		if r.IsCoordinator(key) != (want == 0) {
			t.Fatalf("IsCoordinator(%s) on broker 0 = %v, owner %d", key, r.IsCoordinator(key), want)
		}
	}
	if len(perOwner) != size {
		t.Errorf("200 groups reached only brokers %v", perOwner)
	}
	// one topic's partitions go round the set in turn from FNV-1a(topic) % size
	first := int32(fnv32a("orders") % size)
	for p := range int32(12) {
		want := (first + p) % size
		if got, ok := v.PartitionOwner("orders", p); !ok || got != want {
			t.Fatalf("PartitionOwner(orders, %d) = %d, %v; want %d", p, got, ok, want)
		}
		if got, ok := r.PartitionOwner("orders", p); !ok || got != want {
			t.Fatalf("Registry.PartitionOwner(orders, %d) = %d, %v; want %d", p, got, ok, want)
		}
		if r.IsLeader("orders", p) != (want == 0) {
			t.Fatalf("IsLeader(orders, %d) on broker 0 = %v, leader %d", p, r.IsLeader("orders", p), want)
		}
	}
}

// The modulus is the configured size, not the alive count: with brokers 0, 1 and 3 of 5
// alive, a key whose slot is alive stays there (a key hashing to 3 is not moved to
// alive[sum%3]); a key whose slot is 2 or 4 falls back to alive[sum % 3] of the sorted
// alive ids, whatever order the source listed them in.
func TestOwnerFallsBackIntoSortedAliveSubset(t *testing.T) {
	const size = 5
	alive := []int32{0, 1, 3}
	r := New(1, size)
	// listed out of order, with the dead ones in between
	r.Set([]Broker{{ID: 3, Alive: true}, {ID: 4}, {ID: 0, Alive: true}, {ID: 2}, {ID: 1, Alive: true}})
	v := r.Snapshot()
	if !reflect.DeepEqual(v.Alive, alive) {
		t.Fatalf("view alive = %v, want %v", v.Alive, alive)
	}
	var kept, moved int
	for i := range 300 {
		key := fmt.Sprintf("g%d", i)
		sum := fnv32a(key)
		want, _ := wantOwner(sum, size, alive)
		if slot := int32(sum % size); slot == 0 || slot == 1 || slot == 3 {
			kept++
			if want != slot {
				t.Fatalf("rule: %s slot %d alive but owner %d", key, slot, want)
			}
		} else {
			moved++
			if want != alive[sum%3] {
				t.Fatalf("rule: %s owner %d", key, want)
			}
		}
		if got, ok := v.GroupOwner(key); !ok || got != want {
			t.Fatalf("GroupOwner(%s) (slot %d) = %d, %v; want %d", key, sum%size, got, ok, want)
		}
		if got, ok := v.TxnOwner(key); !ok || got != want {
			t.Fatalf("TxnOwner(%s) (slot %d) = %d, %v; want %d", key, sum%size, got, ok, want)
		}
		psum := fnv32a("t") + uint32(i)
		pwant, _ := wantOwner(psum, size, alive)
		if got, ok := v.PartitionOwner("t", int32(i)); !ok || got != pwant {
			t.Fatalf("PartitionOwner(t, %d) (slot %d) = %d, %v; want %d", i, psum%size, got, ok, pwant)
		}
	}
	if kept == 0 || moved == 0 {
		t.Fatalf("keys kept %d, moved %d: the test needs both", kept, moved)
	}

	// the same alive set from another source order routes the same
	r2 := New(4, size)
	r2.Set([]Broker{{ID: 1, Alive: true}, {ID: 0, Alive: true}, {ID: 3, Alive: true}})
	v2 := r2.Snapshot()
	for i := range 300 {
		key := fmt.Sprintf("g%d", i)
		a, _ := v.GroupOwner(key)
		b, _ := v2.GroupOwner(key)
		if a != b {
			t.Fatalf("%s: owner %d on one broker, %d on another with the same alive set", key, a, b)
		}
	}
}

// No broker alive: no owner. A broker alive with an id outside the set owns nothing.
func TestOwnerNoneAliveAndOutsideSet(t *testing.T) {
	r := New(0, 3)
	if _, ok := r.Snapshot().GroupOwner("g"); ok {
		t.Fatal("an owner with nothing alive")
	}
	if _, ok := r.Coordinator("g"); ok {
		t.Fatal("a coordinator with nothing alive")
	}
	r.Set([]Broker{{ID: 0}, {ID: 1}, {ID: 7, Alive: true}})
	v := r.Snapshot()
	if len(v.Alive) != 0 {
		t.Fatalf("alive %v: broker 7 is outside a set of 3", v.Alive)
	}
	if id, ok := v.PartitionOwner("t", 0); ok {
		t.Fatalf("partition owned by %d with no broker of the set alive", id)
	}
	r.Set([]Broker{{ID: 2, Alive: true}, {ID: 7, Alive: true}})
	for i := range 50 {
		if id, ok := r.GroupOwner(fmt.Sprint(i)); !ok || id != 2 {
			t.Fatalf("group %d owned by %d, %v; want 2, the only broker of the set alive", i, id, ok)
		}
	}
}

// A dev registry (size 0) routes every key to itself.
func TestDevOwnsEverything(t *testing.T) {
	r := NewDev(Broker{ID: 3, Endpoints: map[string]Endpoint{"PLAINTEXT": {"127.0.0.1", 9092}}})
	if !r.Synced() || r.Size() != 0 || r.Self() != 3 {
		t.Fatalf("dev: synced %v size %d self %d", r.Synced(), r.Size(), r.Self())
	}
	for i := range 20 {
		if !r.IsCoordinator(fmt.Sprint("g", i)) || !r.IsLeader("t", int32(i)) {
			t.Fatalf("dev broker does not own key %d", i)
		}
		if id, ok := r.Snapshot().TxnOwner(fmt.Sprint("x", i)); !ok || id != 3 {
			t.Fatalf("dev TxnOwner = %d, %v", id, ok)
		}
	}
	if bs := r.Brokers(); len(bs) != 1 || bs[0].ID != 3 || !bs[0].Alive {
		t.Fatalf("dev brokers %+v", bs)
	}
}

// An explicit assignment wins over the hash while its broker is alive; while it is not,
// the key falls back into the alive subset as a hashed key does (alive[sum % len]).
func TestAssignmentWinsWhileAlive(t *testing.T) {
	const size = 3
	// pick keys whose hashed slot is not the assigned broker, so the assignment shows
	var group, txn string
	for i := 0; group == "" || txn == ""; i++ {
		k := fmt.Sprint("k", i)
		if fnv32a(k)%size != 2 && group == "" {
			group = k
		} else if fnv32a(k)%size != 1 && txn == "" {
			txn = k
		}
	}
	part := int32(0)
	for int32((fnv32a("orders")+uint32(part))%size) == 0 {
		part++
	}
	raw := fmt.Sprintf(`{"version":1,"consumerGroups":[{"group":%q,"broker":2}],"transactionalIds":[{"id":%q,"broker":1}],"partitions":[{"topic":"orders","partition":%d,"broker":0}]}`, group, txn, part)
	a, err := ParseAssignment([]byte(raw), size)
	if err != nil {
		t.Fatal(err)
	}
	r := New(0, size)
	r.Set(brokers(map[int32]bool{0: true, 1: true, 2: true}))
	r.SetAssignment(a)
	v := r.Snapshot()
	if v.Assign != a {
		t.Fatal("the snapshot does not carry the assignment")
	}
	if id, _ := v.GroupOwner(group); id != 2 {
		t.Errorf("assigned group %s owned by %d, want 2", group, id)
	}
	if id, _ := v.TxnOwner(txn); id != 1 {
		t.Errorf("assigned txn %s owned by %d, want 1", txn, id)
	}
	if id, _ := v.PartitionOwner("orders", part); id != 0 {
		t.Errorf("assigned orders/%d led by %d, want 0", part, id)
	}
	// keys the file does not name still hash
	if id, _ := v.GroupOwner(group + "-other"); id != int32(fnv32a(group+"-other")%size) {
		t.Errorf("unassigned group owned by %d", id)
	}
	// the assigned brokers die: each key falls back to alive[sum % len(alive)]
	r.Set(brokers(map[int32]bool{0: true, 1: false, 2: false}))
	v = r.Snapshot()
	if id, ok := v.GroupOwner(group); !ok || id != 0 {
		t.Errorf("group %s of dead broker 2 owned by %d, %v; want 0, the only alive", group, id, ok)
	}
	r.Set(brokers(map[int32]bool{0: true, 1: false, 2: true}))
	v = r.Snapshot()
	if id, ok := v.TxnOwner(txn); !ok || id != []int32{0, 2}[fnv32a(txn)%2] {
		t.Errorf("txn %s of dead broker 1 owned by %d, %v; want alive[sum %% 2] of [0 2]", txn, id, ok)
	}
	// every broker back and the assignment removed: the hash again
	r.Set(brokers(map[int32]bool{0: true, 1: true, 2: true}))
	r.SetAssignment(nil)
	if id, _ := r.Snapshot().GroupOwner(group); id != int32(fnv32a(group)%size) {
		t.Errorf("group %s owned by %d with the assignment removed, want its hashed slot %d", group, id, fnv32a(group)%size)
	}
}

// A view is frozen: later changes of the registry do not reach a snapshot taken before.
func TestSnapshotIsFrozen(t *testing.T) {
	r := New(0, 3)
	r.Set(brokers(map[int32]bool{0: true, 1: true, 2: true}))
	v := r.Snapshot()
	r.Set(brokers(map[int32]bool{0: true}))
	if !reflect.DeepEqual(v.Alive, []int32{0, 1, 2}) {
		t.Fatalf("old snapshot's alive set changed to %v", v.Alive)
	}
	if !v.IsAlive(2) || v.IsAlive(3) || v.IsAlive(-1) {
		t.Fatal("IsAlive wrong on the old snapshot")
	}
	if now := r.Snapshot(); !reflect.DeepEqual(now.Alive, []int32{0}) || now.IsAlive(1) {
		t.Fatalf("new snapshot alive %v", now.Alive)
	}
	v.Alive[0] = 9 // a caller scribbling on its copy
	if r.Snapshot().Alive[0] != 0 {
		t.Fatal("a snapshot shares its alive slice with the registry")
	}
}

func TestSetBrokersAll(t *testing.T) {
	r := New(1, 3)
	if r.Synced() || len(r.Brokers()) != 0 || len(r.All()) != 0 {
		t.Fatal("a new registry is not empty and unsynced")
	}
	in := []Broker{
		{ID: 2, Alive: true, Endpoints: map[string]Endpoint{"PLAINTEXT": {"h2", 9094}}},
		{ID: 0, Alive: false, Endpoints: map[string]Endpoint{"PLAINTEXT": {"h0", 9092}}},
		{ID: 1, Alive: true, Endpoints: map[string]Endpoint{"PLAINTEXT": {"h1", 9093}}},
	}
	r.Set(in)
	in[0].ID = 9 // the registry keeps its own copy of the slice
	ids := func(bs []Broker) (out []int32) {
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	if got := ids(r.Brokers()); !reflect.DeepEqual(got, []int32{1, 2}) {
		t.Errorf("Brokers = %v, want the alive ones by id [1 2]", got)
	}
	if got := ids(r.All()); !reflect.DeepEqual(got, []int32{0, 1, 2}) {
		t.Errorf("All = %v, want [0 1 2]", got)
	}
	if b, ok := r.Broker(2); !ok || b.Endpoints["PLAINTEXT"] != (Endpoint{"h2", 9094}) {
		t.Errorf("Broker(2) = %+v, %v", b, ok)
	}
	if _, ok := r.Broker(9); ok {
		t.Error("Broker(9) found: the caller's slice reached the registry")
	}
	all := r.All()
	all[0].ID = 7
	if got := ids(r.All()); !reflect.DeepEqual(got, []int32{0, 1, 2}) {
		t.Errorf("All after a caller changed its copy = %v", got)
	}
}

// Subscribers are signalled after a change of the broker set, of the synced flag and of
// the assignment; the signal is coalesced; an unchanged Set signals nothing and keeps the
// version; an ended subscription is signalled no more.
func TestSubscribeNotifications(t *testing.T) {
	r := New(0, 3)
	ch, stop := r.Subscribe()
	other, stopOther := r.Subscribe()
	defer stopOther()
	signalled := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	set := brokers(map[int32]bool{0: true, 1: true})
	v0 := r.Version()
	r.Set(set)
	if !signalled(ch) || !signalled(other) {
		t.Fatal("Set of a new broker set signalled nobody")
	}
	v1 := r.Version()
	if v1 == v0 {
		t.Fatal("Set did not change the version")
	}
	r.Set(brokers(map[int32]bool{1: true, 0: true}))
	if signalled(ch) || r.Version() != v1 {
		t.Fatal("an unchanged broker set signalled or changed the version")
	}
	r.Set(brokers(map[int32]bool{0: true, 1: false}))
	if !signalled(ch) {
		t.Fatal("a broker going down signalled nothing")
	}
	moved := brokers(map[int32]bool{0: true, 1: false})
	moved[0].Endpoints = map[string]Endpoint{"PLAINTEXT": {"elsewhere", 1}}
	r.Set(moved)
	if !signalled(ch) {
		t.Fatal("an endpoint change signalled nothing")
	}
	r.MarkSynced()
	if !signalled(ch) || !r.Synced() {
		t.Fatal("MarkSynced signalled nothing")
	}
	r.MarkSynced()
	if signalled(ch) {
		t.Fatal("a second MarkSynced signalled")
	}
	// two changes, one pending signal
	r.SetAssignment(nil)
	r.Set(brokers(map[int32]bool{2: true}))
	if !signalled(ch) {
		t.Fatal("SetAssignment and Set signalled nothing")
	}
	if signalled(ch) {
		t.Fatal("two changes left two signals; they coalesce into one")
	}
	drain := signalled(other)
	if !drain {
		t.Fatal("the other subscriber was not signalled")
	}
	stop()
	r.Set(brokers(map[int32]bool{0: true}))
	if signalled(ch) {
		t.Fatal("an ended subscription was signalled")
	}
	if !signalled(other) {
		t.Fatal("ending one subscription ended the other")
	}
}
