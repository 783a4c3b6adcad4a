package group_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		var pipelined, serial []float64
		for _, t := range targets(b) {
			ms := joinForHeartbeats(b, t.addr, t.name)
			pipelined = append(pipelined, heartbeatRate(b, t.addr, t.name, ms, 32, 64))
			serial = append(serial, heartbeatRate(b, t.addr, t.name, ms, 256, 1))
			b.ReportMetric(pipelined[len(pipelined)-1], t.name+"_pipelined_hb/s")
			b.ReportMetric(serial[len(serial)-1], t.name+"_serial_hb/s")
		}
		fmt.Printf("%-44s kaas %10.1f hb/s   kfake %10.1f hb/s   kaas/kfake %.2f\n", "(c) 10,000 members, 32 conns x 64 pipelined", pipelined[0], pipelined[1], pipelined[0]/pipelined[1])
		fmt.Printf("%-44s kaas %10.1f hb/s   kfake %10.1f hb/s   kaas/kfake %.2f\n", "(c) 10,000 members, 256 conns x 1 in flight", serial[0], serial[1], serial[0]/serial[1])
	})
	// (c') One group of 10,000 consumer-like members (heartbeat every 100 ms, rejoin on
	// REBALANCE_IN_PROGRESS), from a standing start to one generation that every member
	// synced. Members share 160 connections (at most 63 each, below the 64 requests a kaas
	// connection takes in flight). kfake answers one request per connection at a time,
	// so a parked JoinGroup would hold every other member of its connection: it needs a
	// socket per member, and 10,000 of them on both ends exceed this process's file limit.
	b.Run("c2_10000_members_one_group", func(b *testing.B) {
		kb := brokertest.Start(b, func(c *config.Config) {
			c.GroupInitialRebalanceDelay = 0
			c.LogLevel = "warn"
		})
		var conns []*muxConn
		for range 160 {
			mc, err := dialMux(kb.Addr())
			if err != nil {
				b.Fatal(err)
			}
			defer mc.close()
			conns = append(conns, mc)
		}
		var next atomic.Int64
		cfg := simDefaults(100 * time.Millisecond)
		cfg.session, cfg.rebalance = 30*time.Second, 30*time.Second
		cfg.conn = func() *muxConn { return conns[int(next.Add(1))%len(conns)] }
		start := time.Now()
		ms, stop := runSimsWith(b, kb.Addr(), "big", 10000, cfg)
		ok := waitConverged(b, [][]*simMember{ms}, 60*time.Second)
		el := time.Since(start)
		stop()
		if !ok {
			gens := map[int32]int{}
			for _, m := range ms {
				gens[m.gen.Load()]++
			}
			b.Logf("kaas: no convergence in 60s; members by last synced generation: %v", gens)
		}
		b.ReportMetric(float64(el.Milliseconds()), "kaas_ms")
		fmt.Printf("%-44s kaas %10.1f ms    kfake n/a (a socket per member)\n", "(c') 10,000 members, one group: to one generation", float64(el.Milliseconds()))
	})
}

// hbMember is one member that heartbeats in benchmark (c).
type hbMember struct {
	g, id string
	gen   int32
}

// joinForHeartbeats makes 10,000 members (200 groups of 50) as consumers do: each member
// on its own connection, rejoining when its heartbeat says REBALANCE_IN_PROGRESS, until
// every group holds one generation. Groups join 20 at a time (1,000 sockets, both ends
// in this process). Members stop heartbeating once their group converged; their 60 s
// sessions outlast the setup and the measurement.
func joinForHeartbeats(b *testing.B, addr, name string) []hbMember {
	const groups, size, wave = 200, 50, 20
	cfg := simDefaults(100 * time.Millisecond)
	cfg.session, cfg.rebalance = 60*time.Second, 10*time.Second
	start := time.Now()
	var out []hbMember
	for w := 0; w < groups; w += wave {
		var all [][]*simMember
		var stops []func()
		var names []string
		for gi := w; gi < w+wave; gi++ {
			g := fmt.Sprintf("hb%d-%s", gi, name)
			ms, stop := runSimsWith(b, addr, g, size, cfg)
			all, stops, names = append(all, ms), append(stops, stop), append(names, g)
		}
		ok := waitConverged(b, all, 30*time.Second)
		stopAll(stops)
		if !ok {
			b.Fatalf("%s: groups %d-%d did not converge", name, w, w+wave-1)
		}
		for i, ms := range all {
			for _, m := range ms {
				out = append(out, hbMember{names[i], *m.id.Load(), m.gen.Load()})
			}
		}
	}
	b.Logf("%s: %d members joined in %v", name, len(out), time.Since(start).Round(time.Millisecond))
	return out
}

// heartbeatRate heartbeats every member round-robin from conns connections, depth
// requests in flight on each, for 2 s, and returns heartbeats/s. A response other than
// 0 is counted and logged: the rate is only meaningful if there are none.
func heartbeatRate(b *testing.B, addr, name string, members []hbMember, conns, depth int) float64 {
	var count, bad atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw := brokertest.Dial(b, addr)
			defer raw.C.Close()
			i := c
			var buf []byte
			for time.Now().Before(stop) {
				// One write per burst, as a pipelining client's buffered writer does.
				buf = buf[:0]
				for k := range depth {
					m := members[(i+k*conns)%len(members)]
					buf = append(buf, raw.Encode(hbReq(m.g, m.id, m.gen), int32(k))...)
				}
				raw.Write(buf)
				for range depth {
					resp := kmsg.NewPtrHeartbeatResponse()
					resp.Version = 3
					fb, err := raw.ReadFrame(10 * time.Second)
					if err != nil {
						return
					}
					if _, err := brokertest.Decode(fb, resp); err != nil {
						return
					}
					if resp.ErrorCode != 0 {
						bad.Add(1)
					}
				}
				count.Add(int64(depth))
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
