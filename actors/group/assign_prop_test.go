package group

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// Properties of the uniform assignor over random groups changing one member at a time
// (a join or a leave), each target computed from the previous one as the coordinator
// does: every partition assigned once to a subscribed member; with one subscription for
// all, counts within 1 of each other; and sticky: a member loses a partition only while
// it holds more than its fair share rounded down, so only what must move moves.
func TestUniformPropertiesOverJoinsAndLeaves(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 200; run++ {
		topics := map[string]int32{}
		var names []string
		for i := range 1 + r.IntN(3) {
			n := "t" + strconv.Itoa(i)
			topics[n] = int32(1 + r.IntN(40))
			names = append(names, n)
		}
		total := 0
		for _, n := range topics {
			total += int(n)
		}
		var ms []assignMember
		next := 0
		prev := map[string]assignment{}
		for step := 0; step < 30; step++ {
			if len(ms) < 2 || (r.IntN(3) > 0 && len(ms) < 60) {
				ms = append(ms, assignMember{id: "m" + strconv.Itoa(next), subscribed: names})
				next++
			} else {
				i := r.IntN(len(ms))
				ms = slices.Delete(ms, i, i+1)
			}
			for i := range ms {
				ms[i].prev = prev[ms[i].id]
			}
			got := assignUniform(ms, topics)
			checkComplete(t, ms, topics, got)
			if lo, hi := spread(ms, got); hi-lo > 1 {
				t.Fatalf("run %d step %d: spread %d..%d", run, step, lo, hi)
			}
			floor := total / len(ms)
			for _, m := range ms {
				had := m.prev.count()
				kept := 0
				m.prev.each(func(tp string, p int32) {
					if got[m.id].has(tp, p) {
						kept++
					}
				})
				if kept < min(had, floor) {
					t.Fatalf("run %d step %d: %s held %d, kept %d, fair share %d: a partition moved that need not",
						run, step, m.id, had, kept, floor)
				}
			}
			prev = got
		}
	}
}

// The assignor's choices are those of its first, simpler form (kept here as the
// reference) on random groups with mixed subscriptions and previous targets.
func TestUniformSameAsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for run := 0; run < 300; run++ {
		topics := map[string]int32{}
		var names []string
		for i := range 1 + r.IntN(4) {
			n := "t" + strconv.Itoa(i)
			topics[n] = int32(r.IntN(25))
			names = append(names, n)
		}
		names = append(names, "gone") // subscribed, does not exist
		var ms []assignMember
		for i := range 1 + r.IntN(20) {
			m := assignMember{id: "m" + strconv.Itoa(r.IntN(1000)) + "-" + strconv.Itoa(i), prev: assignment{}}
			for _, n := range names {
				if r.IntN(2) == 0 {
					m.subscribed = append(m.subscribed, n)
				}
			}
			for n, c := range topics {
				for p := int32(0); p < c+2; p++ {
					if r.IntN(4) == 0 {
						m.prev.add(n, p)
					}
				}
			}
			ms = append(ms, m)
		}
		got, want := assignUniform(ms, topics), assignUniformReference(ms, topics)
		for _, m := range ms {
			if !got[m.id].equal(want[m.id]) {
				t.Fatalf("run %d: %s got %v, reference %v", run, m.id, got[m.id], want[m.id])
			}
		}
	}
}

// assignUniformReference is assignUniform as first written: a scan of every member
// for every partition, counts recounted.
func assignUniformReference(members []assignMember, topics map[string]int32) map[string]assignment {
	out := make(map[string]assignment, len(members))
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	sort.Slice(ms, func(i, j int) bool { return ms[i].id < ms[j].id })
	subs := make(map[string]map[string]bool, len(ms))
	eligible := map[string][]string{}
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
	quota := func(id string) int {
		share := 0.0
		for t := range subs[id] {
			share += float64(topics[t]) / float64(len(eligible[t]))
		}
		return int(share + 0.999999)
	}
	taken := map[topicPartition]bool{}
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

func BenchmarkUniform1000(b *testing.B) {
	topics := map[string]int32{"t": 1000}
	ms := members(1000, "t")
	prev := assignUniform(ms, topics)
	ms = append(ms, assignMember{id: "new", subscribed: []string{"t"}})
	for i := range ms {
		ms[i].prev = prev[ms[i].id]
	}
	for b.Loop() {
		assignUniform(ms, topics)
	}
}
