package group_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
)

// Join storm with group.initial.rebalance.delay.ms=0, against kaas and against franz-go's
// kfake in the same run (go test -run NONE -bench JoinStorm -benchtime 1x ./actors/group).
// Each figure is printed for both, with the ratio kaas/kfake (time: lower is better;
// rates: higher is better).
//
// The storms (a), (a'), (a''), (b), (b') and (c') run their simulated members in a child
// process (this test binary again, TestStormChild), so that this process holds the broker
// alone: the clients' dials and syscalls do not share its CPU profile, and its CPU time
// (user and system, getrusage) is the broker's. Each storm prints, per broker, the time to
// one generation, the JoinGroup rate, the broker's CPU seconds and its CPU time per
// request answered; the child prints on stderr when the members' milestones came
// (connected, first JoinGroup answered, synced) and each request kind's mean wait. Each broker is started just before its cell and
// stopped just after it, so one broker's expiring sessions never run during the other's
// cell. kaas logs at info as a production broker does (JSON lines into a file), not
// through the test log. KAAS_BENCH_PROFILE_DIR, when set, is where each cell writes the
// CPU profile of this process (<cell>-<target>.cpu).

type target struct {
	name string
	addr string
}

// startKaas starts kaas for one cell, logging at info into a file as a production broker
// logs to its stderr; stop stops it (the benchmark's cleanup stops it too).
func startKaas(b *testing.B) (addr string, stop func()) {
	c := brokertest.Config(b)
	c.GroupInitialRebalanceDelay = 0
	f, err := os.Create(filepath.Join(b.TempDir(), "kaas.log"))
	if err != nil {
		b.Fatal(err)
	}
	kb, err := broker.Start(c, zerolog.New(f).Level(zerolog.InfoLevel).With().Timestamp().Logger())
	if err != nil {
		b.Fatal(err)
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = kb.Stop(ctx)
		_ = f.Close()
	}
	b.Cleanup(stop)
	return kb.Addr(), stop
}

func startKfake(b *testing.B) (addr string, stop func()) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(kf.Close) }
	b.Cleanup(stop)
	return kf.ListenAddrs()[0], stop
}

// starters start kaas and kfake, in that order.
var starters = []struct {
	name  string
	start func(b *testing.B) (string, func())
}{{"kaas", startKaas}, {"kfake", startKfake}}

// targets starts both brokers for a cell that uses them side by side (c).
func targets(b *testing.B) []target {
	var out []target
	for _, s := range starters {
		addr, _ := s.start(b)
		out = append(out, target{s.name, addr})
	}
	return out
}

// stormResult is one storm against one broker: the time to convergence, the JoinGroup
// requests its members sent and the requests answered in all (JoinGroup, SyncGroup,
// Heartbeat), the CPU time of the broker's process and of the members' (the child).
type stormResult struct {
	ms, joins, requests float64
	cpu, clientCPU      time.Duration
}

// compareStorms runs spec against kaas, then against kfake, each broker alone in this
// process, and prints the time to one generation, the JoinGroup rate and the broker's CPU
// seconds beside each other.
func compareStorms(b *testing.B, what string, spec stormSpec) []stormResult {
	var got []stormResult
	for _, s := range starters {
		addr, stop := s.start(b)
		endProfile := profileCell(b, s.name)
		cpu0, child0 := cpuTime(), childCPUTime()
		r := stormInChild(b, s.name, addr, spec)
		r.cpu, r.clientCPU = cpuTime()-cpu0, childCPUTime()-child0
		endProfile()
		stop()
		got = append(got, r)
		b.ReportMetric(r.ms, s.name+"_ms")
		b.ReportMetric(r.joins/(r.ms/1000), s.name+"_joins/s")
		b.ReportMetric(r.cpu.Seconds(), s.name+"_cpu_s")
		b.ReportMetric(r.cpu.Seconds()*1e6/r.requests, s.name+"_cpu_us/req")
		b.Logf("%s: %.0f ms, %.0f JoinGroup of %.0f requests; broker CPU %.2f s (%.1f µs a request), members' CPU %.2f s",
			s.name, r.ms, r.joins, r.requests, r.cpu.Seconds(), r.cpu.Seconds()*1e6/r.requests, r.clientCPU.Seconds())
	}
	k, f := got[0], got[1]
	perReq := func(r stormResult) float64 { return r.cpu.Seconds() * 1e6 / r.requests }
	fmt.Printf("%-46s kaas %6.0f ms %6.0f joins/s %5.2f cpu s %5.1f µs/req   kfake %6.0f ms %6.0f joins/s %5.2f cpu s %5.1f µs/req   kaas/kfake: time %.2f, joins/s %.2f, cpu %.2f, cpu/req %.2f\n",
		what, k.ms, k.joins/(k.ms/1000), k.cpu.Seconds(), perReq(k), f.ms, f.joins/(f.ms/1000), f.cpu.Seconds(), perReq(f),
		k.ms/f.ms, (k.joins/k.ms)/(f.joins/f.ms), k.cpu.Seconds()/f.cpu.Seconds(), perReq(k)/perReq(f))
	return got
}

// profileCell writes this process's CPU profile of the running cell into
// $KAAS_BENCH_PROFILE_DIR/<cell>-<target>.cpu when that is set (and no other profile
// runs); the function it returns ends it.
func profileCell(b *testing.B, target string) func() {
	dir := os.Getenv("KAAS_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "-").Replace(b.Name()) + "-" + target + ".cpu"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Logf("no cell profile: %v", err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPUTime is the CPU time (user and system) of this process's children that ended.
func childCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	// Members heartbeat every 100 ms with 10 s session and rebalance timeouts.
	b.Run("a_1000_members_one_group", func(b *testing.B) {
		compareStorms(b, "(a) 1000 members, one group: to one generation", stormSpec{groups: 1, members: 1000, prefix: "storm", session: 10 * time.Second, rebalance: 10 * time.Second})
	})
	b.Run("a2_500_members_one_group", func(b *testing.B) {
		compareStorms(b, "(a') 500 members, one group: to one generation", stormSpec{groups: 1, members: 500, prefix: "storm500", session: 10 * time.Second, rebalance: 10 * time.Second})
	})
	// (b) is read as JoinGroup requests/s (every JoinGroup the members sent, the KIP-394
	// step and rejoins included, over the time until every group synced one generation);
	// the time itself is printed beside it, as a broker that needs fewer rejoins converges
	// sooner with fewer requests.
	b.Run("b_1000_groups_of_3", func(b *testing.B) {
		compareStorms(b, "(b) 1000 groups of 3: to one generation each", stormSpec{groups: 1000, members: 3, prefix: "g", session: 10 * time.Second, rebalance: 10 * time.Second})
	})
	// The same two storms with every connection up first: the join storm alone, without
	// the broker accepting 1,000 or 3,000 connections at the same time.
	b.Run("a3_1000_members_one_group_connected", func(b *testing.B) {
		compareStorms(b, "(a\") (a) with the connections up first", stormSpec{groups: 1, members: 1000, prefix: "stormc", session: 10 * time.Second, rebalance: 10 * time.Second, dialFirst: true})
	})
	b.Run("b2_1000_groups_of_3_connected", func(b *testing.B) {
		compareStorms(b, "(b') (b) with the connections up first", stormSpec{groups: 1000, members: 3, prefix: "gc", session: 10 * time.Second, rebalance: 10 * time.Second, dialFirst: true})
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
	// would also exceed one process's file limit.
	b.Run("c2_10000_members_one_group", func(b *testing.B) {
		compareStorms(b, "(c') 10,000 members, one group: to one generation", stormSpec{groups: 1, members: 10000, prefix: "big", session: 45 * time.Second, rebalance: 300 * time.Second})
	})
}

// stormSpec is a storm: groups groups of members simulated members each (heartbeat every
// 100 ms), named <prefix>-<target> alone or <prefix>-<target><i> for many. dialFirst: every
// member's connection is up before the first request, and the time counts from then (the
// join storm without the connection storm).
type stormSpec struct {
	groups, members    int
	prefix             string
	session, rebalance time.Duration
	dialFirst          bool
}

// The child process of a storm: stormInChild runs this test binary again with only
// TestStormChild and the storm's settings in its environment; the child prints one line
// with the time to convergence and the JoinGroup requests sent.
const (
	stormAddrEnv      = "KAAS_STORM_ADDR"
	stormSpecEnv      = "KAAS_STORM_SPEC"
	stormLimit        = 60 * time.Second
	stormHeartbeat    = 100 * time.Millisecond
	stormSpecFormat   = "groups=%d members=%d prefix=%s session_ms=%d rebalance_ms=%d dial_first=%t"
	dialSettle        = 500 * time.Millisecond
	stormResultFormat = "storm converged=%t ms=%f joins=%f requests=%f generations=%s waits=%s"
)

// stormInChild runs spec against the broker at addr in a child process and returns the
// milliseconds until every group converged (the limit when they did not) and the
// JoinGroup requests sent.
func stormInChild(b *testing.B, name, addr string, spec stormSpec) stormResult {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStormChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), stormAddrEnv+"="+addr, stormSpecEnv+"="+fmt.Sprintf(stormSpecFormat,
		spec.groups, spec.members, spec.prefix+"-"+name, spec.session.Milliseconds(), spec.rebalance.Milliseconds(), spec.dialFirst))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s: storm child: %v\n%s", name, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var ok bool
		var r stormResult
		var gens, waits string
		if _, err := fmt.Sscanf(line, stormResultFormat, &ok, &r.ms, &r.joins, &r.requests, &gens, &waits); err == nil {
			if !ok {
				b.Logf("%s: no convergence in %v; members by last synced generation: %s", name, stormLimit, gens)
			}
			b.Logf("%s: members by last synced generation: %s; answers and their mean wait by kind: %s", name, gens, waits)
			return r
		}
	}
	b.Fatalf("%s: storm child said nothing:\n%s", name, out)
	return stormResult{}
}

// TestStormChild is the member side of the storms; it runs only in the benchmark's child
// process.
func TestStormChild(t *testing.T) {
	addr := os.Getenv(stormAddrEnv)
	if addr == "" {
		t.Skip("the member side of BenchmarkJoinStorm's storms, run in a child process")
	}
	var spec stormSpec
	var sessionMs, rebalanceMs int64
	if _, err := fmt.Sscanf(os.Getenv(stormSpecEnv), stormSpecFormat, &spec.groups, &spec.members, &spec.prefix, &sessionMs, &rebalanceMs, &spec.dialFirst); err != nil {
		t.Fatal(err)
	}
	cfg := simDefaults(stormHeartbeat)
	cfg.session, cfg.rebalance = time.Duration(sessionMs)*time.Millisecond, time.Duration(rebalanceMs)*time.Millisecond
	if spec.dialFirst {
		cfg.dialed, cfg.begin = &sync.WaitGroup{}, make(chan struct{})
	}
	start := time.Now()
	var groups [][]*simMember
	var stops []func()
	for i := range spec.groups {
		g := spec.prefix
		if spec.groups > 1 {
			g = fmt.Sprintf("%s%d", spec.prefix, i)
		}
		ms, stop := runSimsWith(t, addr, g, spec.members, cfg)
		groups, stops = append(groups, ms), append(stops, stop)
	}
	if spec.dialFirst {
		// Every connection is up; the broker gets a moment to accept them all (a dial
		// returns once the kernel has the connection, before the broker accepted it).
		cfg.dialed.Wait()
		time.Sleep(dialSettle)
		fmt.Fprintf(os.Stderr, "storm %s: %d connections up in %v\n", spec.prefix, spec.groups*spec.members, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		close(cfg.begin)
	}
	ok := waitConverged(t, groups, stormLimit)
	el := time.Since(start)
	gens := map[int32]int{}
	var joins int64
	var waited, answered [3]int64
	for _, ms := range groups {
		for _, m := range ms {
			gens[m.gen.Load()]++
			joins += m.joins.Load()
			for k := range waited {
				waited[k] += m.waited[k].Load()
				answered[k] += m.answered[k].Load()
			}
		}
	}
	stopAll(stops)
	// When the members' milestones came, counted from the start: the connection up, the
	// first JoinGroup answered (MEMBER_ID_REQUIRED: the group made and loaded), the last
	// SyncGroup answered.
	for k, name := range []string{"connected", "first JoinGroup answered", "synced"} {
		var ts []time.Duration
		for _, ms := range groups {
			for _, m := range ms {
				if v := m.marks[k].Load(); v != 0 {
					ts = append(ts, time.Duration(v-start.UnixNano()))
				}
			}
		}
		slices.Sort(ts)
		if len(ts) > 0 {
			fmt.Fprintf(os.Stderr, "storm %s: %s p10 %v p50 %v p90 %v max %v\n", spec.prefix, name, ts[len(ts)/10].Round(time.Millisecond),
				ts[len(ts)/2].Round(time.Millisecond), ts[len(ts)*9/10].Round(time.Millisecond), ts[len(ts)-1].Round(time.Millisecond))
		}
	}
	var requests int64
	var waits []string
	for k, name := range []string{"JoinGroup", "SyncGroup", "Heartbeat"} {
		requests += answered[k]
		if answered[k] > 0 {
			waits = append(waits, fmt.Sprintf("%s:%d,%v", name, answered[k], time.Duration(waited[k]/answered[k]).Round(time.Microsecond)))
		}
	}
	fmt.Printf("storm converged=%t ms=%d joins=%d requests=%d generations=%s waits=%s\n", ok, el.Milliseconds(), joins, requests,
		strings.ReplaceAll(fmt.Sprint(gens), " ", ","), strings.Join(waits, ";"))
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
