package group

import (
	"strconv"
	"testing"
)

func members(n int, topics ...string) []assignMember {
	out := make([]assignMember, n)
	for i := range out {
		out[i] = assignMember{id: "m" + strconv.Itoa(i), subscribed: topics}
	}
	return out
}

// check: every partition of the subscribed topics assigned exactly once, to a member
// subscribed to it.
func checkComplete(t *testing.T, ms []assignMember, topics map[string]int32, got map[string]assignment) {
	t.Helper()
	seen := map[topicPartition]string{}
	for _, m := range ms {
		subs := map[string]bool{}
		for _, s := range m.subscribed {
			subs[s] = true
		}
		got[m.id].each(func(tp string, p int32) {
			if !subs[tp] {
				t.Fatalf("%s got %s/%d without subscribing", m.id, tp, p)
			}
			if o, dup := seen[topicPartition{tp, p}]; dup {
				t.Fatalf("%s/%d given to %s and %s", tp, p, o, m.id)
			}
			seen[topicPartition{tp, p}] = m.id
		})
	}
	for tp, n := range topics {
		for p := int32(0); p < n; p++ {
			if _, ok := seen[topicPartition{tp, p}]; !ok {
				t.Fatalf("%s/%d not assigned", tp, p)
			}
		}
	}
}

func spread(ms []assignMember, got map[string]assignment) (int, int) {
	lo, hi := 1<<30, 0
	for _, m := range ms {
		n := got[m.id].count()
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

func TestUniformBalancedAndSticky(t *testing.T) {
	topics := map[string]int32{"a": 6, "b": 5}
	ms := members(3, "a", "b")
	first := assignUniform(ms, topics)
	checkComplete(t, ms, topics, first)
	if lo, hi := spread(ms, first); hi-lo > 1 {
		t.Fatalf("spread %d..%d: %v", lo, hi, first)
	}
	// A fourth member: the others keep all but what it needs.
	ms4 := append(members(3, "a", "b"), assignMember{id: "m3", subscribed: []string{"a", "b"}})
	for i := range ms4[:3] {
		ms4[i].prev = first[ms4[i].id]
	}
	second := assignUniform(ms4, topics)
	checkComplete(t, ms4, topics, second)
	if lo, hi := spread(ms4, second); hi-lo > 1 {
		t.Fatalf("spread %d..%d: %v", lo, hi, second)
	}
	moved := 0
	for _, m := range ms4[:3] {
		first[m.id].each(func(tp string, p int32) {
			if !second[m.id].has(tp, p) {
				moved++
			}
		})
	}
	if moved != second["m3"].count() {
		t.Fatalf("%d partitions moved, the new member got %d", moved, second["m3"].count())
	}
	// A member leaves: only its partitions move.
	ms2 := []assignMember{{id: "m0", subscribed: []string{"a", "b"}, prev: second["m0"]},
		{id: "m1", subscribed: []string{"a", "b"}, prev: second["m1"]}, {id: "m3", subscribed: []string{"a", "b"}, prev: second["m3"]}}
	third := assignUniform(ms2, topics)
	checkComplete(t, ms2, topics, third)
	for _, m := range ms2 {
		if !second[m.id].subsetOf(third[m.id]) {
			t.Fatalf("%s lost partitions when m2 left: %v → %v", m.id, second[m.id], third[m.id])
		}
	}
}

func TestUniformHeterogeneous(t *testing.T) {
	topics := map[string]int32{"a": 4, "b": 4}
	ms := []assignMember{{id: "x", subscribed: []string{"a"}}, {id: "y", subscribed: []string{"a", "b"}}, {id: "z", subscribed: []string{"b", "missing"}}}
	got := assignUniform(ms, topics)
	checkComplete(t, ms, topics, got)
	if lo, hi := spread(ms, got); hi-lo > 1 {
		t.Fatalf("spread %d..%d: %v", lo, hi, got)
	}
}

func TestRange(t *testing.T) {
	topics := map[string]int32{"a": 5, "b": 5}
	ms := members(2, "a", "b")
	got := assignRange(ms, topics)
	checkComplete(t, ms, topics, got)
	// Co-partitioned: the same partition numbers of both topics; the first gets 3.
	if !got["m0"].equal(a("a", []int32{0, 1, 2}, "b", []int32{0, 1, 2})) || !got["m1"].equal(a("a", []int32{3, 4}, "b", []int32{3, 4})) {
		t.Fatalf("range: %v", got)
	}
	// Static members are ordered by instance id, so a replacement keeps its range.
	ms = []assignMember{{id: "zz", instanceID: "i0", subscribed: []string{"a"}}, {id: "aa", instanceID: "i1", subscribed: []string{"a"}}}
	got = assignRange(ms, map[string]int32{"a": 4})
	if !got["zz"].equal(a("a", []int32{0, 1})) {
		t.Fatalf("static range: %v", got)
	}
}
