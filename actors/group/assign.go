package group

import (
	"container/heap"
	"slices"
	"sort"
)

// Server-side assignors of consumer-protocol groups (KIP-848): uniform and range, named
// as Apache names them (group.consumer.assignors). Both are pure functions of the
// members, the subscribed topics' partition counts and the previous target; table tests
// in assign_test.go.

// assignMember is one member as an assignor sees it.
type assignMember struct {
	id         string
	instanceID string
	subscribed []string
	prev       assignment // its previous target: what uniform keeps
}

// assignFunc computes a target: member id → assignment. topics holds the partition count
// of every subscribed topic that exists.
type assignFunc func(members []assignMember, topics map[string]int32) map[string]assignment

var assignors = map[string]assignFunc{"uniform": assignUniform, "range": assignRange}

// assignUniform spreads every subscribed partition over the members subscribed to its
// topic so that counts differ by at most one where subscriptions allow, and is sticky:
// a member keeps every partition of its previous target it may still have, up to its
// fair share, and only the partitions needed to even the counts move (Apache's
// UniformAssignor has the same goals; its exact choices may differ).
func assignUniform(members []assignMember, topics map[string]int32) map[string]assignment {
	out := make(map[string]assignment, len(members))
	if len(members) == 0 {
		return out
	}
	// Members by id, worked on by index: counts, subscriptions and assignments in
	// slices, so a group of thousands costs no map per member beyond its assignment.
	ms := slices.Clone(members)
	sort.Slice(ms, func(i, j int) bool { return ms[i].id < ms[j].id })
	n := len(ms)
	subs := make([][]string, n) // member → topics that exist, sorted, unique
	asg := make([]assignment, n)
	cnt := make([]int, n)
	eligible := map[string][]int{} // topic → members, by id
	for i, m := range ms {
		asg[i] = assignment{}
		out[m.id] = asg[i]
		for _, t := range m.subscribed {
			if _, ok := topics[t]; ok && !slices.Contains(subs[i], t) {
				subs[i] = append(subs[i], t)
				eligible[t] = append(eligible[t], i)
			}
		}
		slices.Sort(subs[i])
	}
	subscribes := func(i int, t string) bool {
		_, ok := slices.BinarySearch(subs[i], t)
		return ok
	}
	// Fair share of a member: the partitions it could take over the members that could
	// take them; with one subscription for all, total/members rounded up.
	quota := func(i int) int {
		share := 0.0
		for _, t := range subs[i] {
			share += float64(topics[t]) / float64(len(eligible[t]))
		}
		return int(share + 0.999999)
	}
	taken := make(map[string][]bool, len(topics)) // topic → partition taken
	for t, c := range topics {
		if len(eligible[t]) > 0 {
			taken[t] = make([]bool, c)
		}
	}
	// Stickiness: keep previous partitions still valid, up to the quota.
	for i, m := range ms {
		q := quota(i)
		m.prev.each(func(t string, p int32) {
			if p >= topics[t] || cnt[i] >= q || !subscribes(i, t) || taken[t][p] {
				return
			}
			taken[t][p] = true
			asg[i].add(t, p)
			cnt[i]++
		})
	}
	// The rest, each to the eligible member with the fewest (the first by id among
	// equals): a heap of the topic's members by count, then id.
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if len(eligible[t]) == 0 {
			continue
		}
		h := &countHeap{cnt: cnt}
		for p := int32(0); p < topics[t]; p++ {
			if taken[t][p] {
				continue
			}
			if h.idx == nil {
				h.idx = slices.Clone(eligible[t])
				heap.Init(h)
			}
			best := h.idx[0]
			asg[best].add(t, p)
			cnt[best]++
			taken[t][p] = true
			heap.Fix(h, 0)
		}
	}
	// Even out: move one partition at a time from a member with the most to an eligible
	// member with at least two fewer, until none can move. Each move lowers the spread,
	// so this ends; with one subscription for all it moves only what the quota demands.
	order := make([]int, n)
	for moved := true; moved; {
		moved = false
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return cnt[order[a]] > cnt[order[b]] })
		if cnt[order[0]]-cnt[order[n-1]] < 2 {
			break
		}
		for _, hi := range order {
			for k := n - 1; k >= 0 && !moved; k-- {
				lo := order[k]
				if cnt[hi]-cnt[lo] < 2 {
					break
				}
				// The last movable partition, so the lowest ones stay put.
				var pick *topicPartition
				asg[hi].each(func(t string, p int32) {
					if subscribes(lo, t) {
						pick = &topicPartition{t, p}
					}
				})
				if pick != nil {
					asg[hi].remove(pick.topic, pick.partition)
					asg[lo].add(pick.topic, pick.partition)
					cnt[hi]--
					cnt[lo]++
					moved = true
				}
			}
			if moved {
				break
			}
		}
	}
	return out
}

// countHeap orders member indexes by their count, then by index (id order).
type countHeap struct {
	idx []int
	cnt []int
}

func (h *countHeap) Len() int { return len(h.idx) }
func (h *countHeap) Less(a, b int) bool {
	ia, ib := h.idx[a], h.idx[b]
	if h.cnt[ia] != h.cnt[ib] {
		return h.cnt[ia] < h.cnt[ib]
	}
	return ia < ib
}
func (h *countHeap) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *countHeap) Push(x any)    { h.idx = append(h.idx, x.(int)) }
func (h *countHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// assignRange gives each topic's partitions in contiguous ranges to the members
// subscribed to it, sorted by instance id (static members, so a rejoin gets the same
// range) then member id; the first partitions%members members get one more. Members with
// the same subscriptions get the same partition numbers of every topic (co-partitioning).
func assignRange(members []assignMember, topics map[string]int32) map[string]assignment {
	out := make(map[string]assignment, len(members))
	ms := slices.Clone(members)
	key := func(m assignMember) string {
		if m.instanceID != "" {
			return "0" + m.instanceID
		}
		return "1" + m.id
	}
	sort.Slice(ms, func(i, j int) bool { return key(ms[i]) < key(ms[j]) })
	byTopic := map[string][]string{}
	for _, m := range ms {
		out[m.id] = assignment{}
		seen := map[string]bool{}
		for _, t := range m.subscribed {
			if _, ok := topics[t]; ok && !seen[t] {
				seen[t] = true
				byTopic[t] = append(byTopic[t], m.id)
			}
		}
	}
	for t, ids := range byTopic {
		n := int(topics[t])
		per, extra := n/len(ids), n%len(ids)
		p := 0
		for i, id := range ids {
			k := per
			if i < extra {
				k++
			}
			for j := 0; j < k; j++ {
				out[id].add(t, int32(p))
				p++
			}
		}
	}
	return out
}
