package group_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// Join storm with group.initial.rebalance.delay.ms=0, against kaas and against franz-go's
// kfake in the same run (go test -run x -bench JoinStorm -benchtime 1x ./actors/group).
// Each figure is printed for both, with the ratio kaas/kfake (time: lower is better;
// rates: higher is better).

type target struct {
	name string
	addr string
}

func targets(b *testing.B) []target {
	kb := brokertest.Start(b, func(c *config.Config) {
		c.GroupInitialRebalanceDelay = 0
		c.LogLevel = "warn"
	})
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	return []target{{"kaas", kb.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
}

func compare(b *testing.B, what, unit string, f func(t target) float64) {
	var got []float64
	for _, t := range targets(b) {
		v := f(t)
		got = append(got, v)
		b.ReportMetric(v, t.name+"_"+unit)
	}
	fmt.Printf("%-44s kaas %10.1f %s   kfake %10.1f %s   kaas/kfake %.2f\n", what, got[0], unit, got[1], unit, got[0]/got[1])
}

// waitConverged polls until every group's members synced one generation with one leader.
func waitConverged(tb testing.TB, groups [][]*simMember, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		all := true
		for _, ms := range groups {
			if _, ok := converged(ms); !ok {
				all = false
				break
			}
		}
		if all {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

func BenchmarkJoinStorm(b *testing.B) {
	b.Run("a_1000_members_one_group", func(b *testing.B) {
		compare(b, "(a) 1000 members, one group: to one generation", "ms", func(t target) float64 {
			start := time.Now()
			ms, stop := runSims(b, t.addr, "storm-"+t.name, 1000, 100*time.Millisecond)
			defer stop()
			if !waitConverged(b, [][]*simMember{ms}, 60*time.Second) {
				b.Logf("%s: no convergence in 60s", t.name)
			}
			return float64(time.Since(start).Milliseconds())
		})
	})
	b.Run("a2_500_members_one_group", func(b *testing.B) {
		compare(b, "(a') 500 members, one group: to one generation", "ms", func(t target) float64 {
			start := time.Now()
			ms, stop := runSims(b, t.addr, "storm500-"+t.name, 500, 100*time.Millisecond)
			defer stop()
			if !waitConverged(b, [][]*simMember{ms}, 60*time.Second) {
				b.Logf("%s: no convergence in 60s", t.name)
			}
			return float64(time.Since(start).Milliseconds())
		})
	})
	b.Run("b_1000_groups_of_3", func(b *testing.B) {
		compare(b, "(b) 1000 groups of 3: JoinGroup requests/s", "joins/s", func(t target) float64 {
			start := time.Now()
			var groups [][]*simMember
			var stops []func()
			for i := range 1000 {
				ms, stop := runSims(b, t.addr, fmt.Sprintf("g%d-%s", i, t.name), 3, 100*time.Millisecond)
				groups = append(groups, ms)
				stops = append(stops, stop)
			}
			ok := waitConverged(b, groups, 60*time.Second)
			el := time.Since(start)
			var joins int64
			for _, ms := range groups {
				for _, m := range ms {
					joins += m.joins.Load()
				}
			}
			stopAll(stops)
			if !ok {
				b.Logf("%s: not all groups converged", t.name)
			}
			return float64(joins) / el.Seconds()
		})
	})
	b.Run("c_heartbeats_10000_members", func(b *testing.B) {
		compare(b, "(c) 10,000 members (200 groups of 50): heartbeats/s", "hb/s", func(t target) float64 {
			return heartbeatRate(b, t.addr, t.name)
		})
	})
}

// heartbeatRate joins 10,000 members (200 groups of 50; each group's JoinGroup v3
// requests pipelined on one connection, below the 64 requests a connection reads ahead,
// so 10,000 members need only 200 sockets), syncs
// them, then heartbeats all of them from 32 pipelining connections for 2 s. With no
// initial delay the first member of a group completes generation 1 alone and is evicted
// when it does not rejoin within its 1 s rebalance timeout; the rest form generation 2.
func heartbeatRate(b *testing.B, addr, name string) float64 {
	type mem struct {
		g, id string
		gen   int32
	}
	var mu sync.Mutex
	var members []mem
	var wg sync.WaitGroup
	for gi := range 200 {
		g := fmt.Sprintf("hb%d-%s", gi, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw := brokertest.Dial(b, addr)
			defer raw.C.Close()
			for i := range 50 {
				raw.Send(joinReq(g, joinOpts{version: 3, session: 60000, rebalance: 1000}), int32(i))
			}
			var joined []*kmsg.JoinGroupResponse
			top := int32(0)
			for range 50 {
				resp := kmsg.NewPtrJoinGroupResponse()
				resp.Version = 3
				fb, err := raw.ReadFrame(30 * time.Second)
				if err != nil {
					return
				}
				if _, err := brokertest.Decode(fb, resp); err != nil || resp.ErrorCode != 0 {
					continue
				}
				joined = append(joined, resp)
				top = max(top, resp.Generation)
			}
			assign := map[string][]byte{}
			var leader *kmsg.JoinGroupResponse
			var ms []mem
			for _, j := range joined {
				if j.Generation != top {
					continue
				}
				assign[j.MemberID] = []byte{1}
				ms = append(ms, mem{g, j.MemberID, j.Generation})
				if j.LeaderID == j.MemberID {
					leader = j
				}
			}
			if leader == nil {
				return
			}
			// Every member syncs (a member that never does is removed after the rebalance
			// timeout, as in Apache): the leader first, the rest pipelined.
			raw.Roundtrip(syncReq(g, leader.MemberID, leader.Generation, assign), 1000)
			n := 0
			for _, m := range ms {
				if m.id != leader.MemberID {
					raw.Send(syncReq(g, m.id, m.gen, nil), int32(2000+n))
					n++
				}
			}
			for range n {
				if _, err := raw.ReadFrame(30 * time.Second); err != nil {
					return
				}
			}
			mu.Lock()
			members = append(members, ms...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(members) == 0 {
		b.Fatalf("%s: no member joined", name)
	}
	b.Logf("%s: %d members heartbeating", name, len(members))
	var count, bad atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	const conns, depth = 32, 64
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw := brokertest.Dial(b, addr)
			defer raw.C.Close()
			i := c
			for time.Now().Before(stop) {
				for k := range depth {
					m := members[(i+k*conns)%len(members)]
					raw.Send(hbReq(m.g, m.id, m.gen), int32(k))
				}
				for range depth {
					resp := kmsg.NewPtrHeartbeatResponse()
					resp.Version = 3
					b, err := raw.ReadFrame(10 * time.Second)
					if err != nil {
						return
					}
					if _, err := brokertest.Decode(b, resp); err != nil {
						return
					}
					if resp.ErrorCode != 0 && resp.ErrorCode != kerr.RebalanceInProgress.Code {
						bad.Add(1)
					}
				}
				count.Add(depth)
				i += depth * conns
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		b.Logf("%s: %d of %d heartbeats answered with an error", name, n, count.Load())
	}
	return float64(count.Load()) / 2
}
