package group_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	// REBALANCE_IN_PROGRESS, a Java consumer's 45 s session and 300 s rebalance timeout),
	// from a standing start to one generation that every member synced. Each member has
	// its own connection, as every Kafka consumer has its own to the coordinator: a
	// connection answers in order, so members sharing one would wait behind each other's
	// parked JoinGroup (on kaas, Apache and kfake alike). 10,000 sockets on both ends
	// exceed one process's file limit, so the members run in a child process
	// (TestStormChild) and the broker stays in this one, where -cpuprofile sees it.
	b.Run("c2_10000_members_one_group", func(b *testing.B) {
		compare(b, "(c') 10,000 members, one group: to one generation", "ms", func(t target) float64 {
			return stormInChild(b, t, 10000)
		})
	})
}

// The child process of (c'): stormInChild runs this test binary again with only
// TestStormChild and the storm's settings in its environment; the child prints one line
// with the time to convergence.
const (
	stormAddrEnv    = "KAAS_STORM_ADDR"
	stormMembersEnv = "KAAS_STORM_MEMBERS"
	stormGroupEnv   = "KAAS_STORM_GROUP"
	stormLimit      = 60 * time.Second
)

// stormInChild runs n members of one group against t in a child process and returns the
// milliseconds until they converged (the limit when they did not).
func stormInChild(b *testing.B, t target, n int) float64 {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStormChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), stormAddrEnv+"="+t.addr, stormMembersEnv+"="+strconv.Itoa(n),
		stormGroupEnv+"=big-"+t.name)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s: storm child: %v\n%s", t.name, err, out)
	}
	var ok bool
	var ms float64
	var gens string
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "storm converged=%t ms=%f generations=%s", &ok, &ms, &gens); err == nil {
			if !ok {
				b.Logf("%s: no convergence in %v; members by last synced generation: %s", t.name, stormLimit, gens)
			}
			return ms
		}
	}
	b.Fatalf("%s: storm child said nothing:\n%s", t.name, out)
	return 0
}

// TestStormChild is the member side of (c'); it runs only in the benchmark's child process.
func TestStormChild(t *testing.T) {
	addr := os.Getenv(stormAddrEnv)
	if addr == "" {
		t.Skip("the member side of BenchmarkJoinStorm (c'), run in a child process")
	}
	n, err := strconv.Atoi(os.Getenv(stormMembersEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg := simDefaults(100 * time.Millisecond)
	cfg.session, cfg.rebalance = 45*time.Second, 300*time.Second
	start := time.Now()
	ms, stop := runSimsWith(t, addr, os.Getenv(stormGroupEnv), n, cfg)
	ok := waitConverged(t, [][]*simMember{ms}, stormLimit)
	el := time.Since(start)
	gens := map[int32]int{}
	for _, m := range ms {
		gens[m.gen.Load()]++
	}
	stop()
	fmt.Printf("storm converged=%t ms=%d generations=%s\n", ok, el.Milliseconds(), strings.ReplaceAll(fmt.Sprint(gens), " ", ","))
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
