package group

import (
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
	ms := slices.Clone(members)
	sort.Slice(ms, func(i, j int) bool { return ms[i].id < ms[j].id })
	subs := make(map[string]map[string]bool, len(ms)) // member → topics
	eligible := map[string][]string{}                 // topic → members, by id
	for _, m := range ms {
		out[m.id] = assignment{}
		subs[m.id] = map[string]bool{}
		for _, t := range m.subscribed {
			if _, ok := topics[t]; ok && !subs[m.id][t] {
				subs[m.id][t] = true
				eligible[t] = append(eligible[t], m.id)
			}
		}
	}
	// Fair share of a member: the partitions it could take over the members that could
	// take them; with one subscription for all, total/members rounded up.
	quota := func(id string) int {
		share := 0.0
		for t := range subs[id] {
			share += float64(topics[t]) / float64(len(eligible[t]))
		}
		return int(share + 0.999999)
	}
	taken := map[topicPartition]bool{}
	// Stickiness: keep previous partitions still valid, up to the quota.
	for _, m := range ms {
		q := quota(m.id)
		m.prev.each(func(t string, p int32) {
			tp := topicPartition{t, p}
			if !subs[m.id][t] || p >= topics[t] || taken[tp] || out[m.id].count() >= q {
				return
			}
			taken[tp] = true
			out[m.id].add(t, p)
		})
	}
	// The rest, each to the eligible member with the fewest.
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if len(eligible[t]) == 0 {
			continue
		}
		for p := int32(0); p < topics[t]; p++ {
			if taken[topicPartition{t, p}] {
				continue
			}
			best := ""
			for _, id := range eligible[t] {
				if best == "" || out[id].count() < out[best].count() {
					best = id
				}
			}
			out[best].add(t, p)
			taken[topicPartition{t, p}] = true
		}
	}
	// Even out: move one partition at a time from a member with the most to an eligible
	// member with at least two fewer, until none can move. Each move lowers the spread,
	// so this ends; with one subscription for all it moves only what the quota demands.
	for moved := true; moved; {
		moved = false
		order := slices.Clone(ms)
		sort.SliceStable(order, func(i, j int) bool { return out[order[i].id].count() > out[order[j].id].count() })
		for _, hi := range order {
			for k := len(order) - 1; k >= 0 && !moved; k-- {
				lo := order[k]
				if out[hi.id].count()-out[lo.id].count() < 2 {
					break
				}
				// The last movable partition, so the lowest ones stay put.
				var pick *topicPartition
				out[hi.id].each(func(t string, p int32) {
					if subs[lo.id][t] {
						pick = &topicPartition{t, p}
					}
				})
				if pick != nil {
					out[hi.id].remove(pick.topic, pick.partition)
					out[lo.id].add(pick.topic, pick.partition)
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
