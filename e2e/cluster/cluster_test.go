// Package cluster runs three kaas processes on one data directory (static registry) with
// a real franz-go consumer group over a produced stream, and kills, restarts and pauses
// brokers under it.
package cluster

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/e2e/proc"
	"kaas/internal/testwait"
	"kaas/registry"
)

const (
	brokers = 3
	topic   = "stream"
	group   = "readers"
	parts   = 6
)

var (
	seedFlag = flag.Uint64("cluster.seed", 0, "run this one seed (replay)")
	longFlag = flag.Bool("cluster.long", false, "run the long seed set (make chaos-cluster)")
)

// cluster is three broker processes sharing dir.
type cluster struct {
	t     testing.TB
	bin   string
	dir   string
	ports []int
	procs []*proc.Broker
	extra []string // flags every broker of this cluster starts with
}

// newCluster starts three brokers; with inject, built with the chaos tag and the
// injector on (KAAS_CHAOS_SEED, set by the caller).
func newCluster(t testing.TB, inject bool, extra ...string) *cluster {
	bin := proc.Build(t)
	if inject {
		bin = proc.BuildTagged(t, "chaos")
	}
	c := &cluster{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "data"), extra: extra}
	for i := 0; i < brokers; i++ {
		c.ports = append(c.ports, proc.FreePort(t))
	}
	c.procs = make([]*proc.Broker, brokers)
	t.Cleanup(func() {
		// The brokers' shared log outlives the test's directory when it failed.
		if b, err := os.ReadFile(filepath.Join(filepath.Dir(c.dir), "broker.log")); err == nil && t.Failed() {
			// one file a run, named by the test (seed), so a later failing seed keeps it
			name := strings.NewReplacer("/", "-", "=", "-").Replace(t.Name())
			out := filepath.Join(os.TempDir(), "kaas-cluster-chaos-"+name+".log")
			if os.WriteFile(out, b, 0o644) == nil {
				t.Logf("the brokers' log: %s", out)
			}
		}
	})
	for i := range c.procs {
		c.start(i)
	}
	return c
}

// injected sums, from the brokers' log, the faults their injectors fired, by kind (each
// process logs its running counts every few seconds; a restarted one starts from zero).
func (c *cluster) injected() map[string]int {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(c.dir), "broker.log"))
	if err != nil {
		return nil
	}
	banked, last := map[string]int{}, map[float64]map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "chaos_injector_") {
			continue
		}
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		node, _ := ev["node_id"].(float64)
		now := map[string]int{}
		total, prevTotal := 0, 0
		for k, v := range ev {
			if f, ok := v.(float64); ok && k != "seed" && k != "node_id" {
				now[k] = int(f)
				total += int(f)
			}
		}
		for _, v := range last[node] {
			prevTotal += v
		}
		if total < prevTotal { // a new process of this node
			for k, v := range last[node] {
				banked[k] += v
			}
		}
		last[node] = now
	}
	for _, m := range last {
		for k, v := range m {
			banked[k] += v
		}
	}
	return banked
}

func (c *cluster) peers() string {
	var ps []string
	for i, p := range c.ports {
		ps = append(ps, fmt.Sprintf("%d@127.0.0.1:%d", i, p))
	}
	return strings.Join(ps, ",")
}

func (c *cluster) start(i int) {
	c.procs[i] = proc.Start(c.t, c.bin, c.dir, c.ports[i], append([]string{
		"--node.id=" + strconv.Itoa(i), "--registry=static", "--registry.peers=" + c.peers(),
		"--group.initial.rebalance.delay.ms=0", "--offsets.checkpoint.interval.ms=500"}, c.extra...)...)
}

func (c *cluster) seeds() []string {
	var s []string
	for _, p := range c.ports {
		s = append(s, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return s
}

// ledger is what the clients saw: every acknowledged record, every consumed one, and the
// committed offsets read back over time.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]string // value -> "partition/offset" the producer was told
	consumed  map[string]bool
	committed map[int32]int64
	backwards []string
	// commitAcked is, per partition, the highest offset an OffsetCommit was acknowledged
	// for.
	commitAcked map[int32]int64
	// consumedAt is, per partition, the highest offset the group consumed.
	consumedAt map[int32]int64
}

func (l *ledger) commitAck(p int32, at int64) {
	l.mu.Lock()
	if at > l.commitAcked[p] {
		l.commitAcked[p] = at
	}
	l.mu.Unlock()
}

func (l *ledger) ack(r *kgo.Record) {
	l.mu.Lock()
	l.acked[string(r.Value)] = fmt.Sprintf("%d/%d", r.Partition, r.Offset)
	l.mu.Unlock()
}

// maxAcked is the largest offset acknowledged on partition p (-1: none).
func (l *ledger) maxAcked(p int32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	most := int64(-1)
	for _, at := range l.acked {
		var part int32
		var off int64
		if n, _ := fmt.Sscanf(at, "%d/%d", &part, &off); n == 2 && part == p {
			most = max(most, off)
		}
	}
	return most
}

func (l *ledger) consume(r *kgo.Record) {
	l.mu.Lock()
	l.consumed[string(r.Value)] = true
	if at, ok := l.consumedAt[r.Partition]; !ok || r.Offset > at {
		l.consumedAt[r.Partition] = r.Offset
	}
	l.mu.Unlock()
}

// lastConsumed is the highest offset consumed of every partition (-1: none yet).
func (l *ledger) lastConsumed() map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]int64{}
	for p := int32(0); p < parts; p++ {
		out[p] = -1
		if at, ok := l.consumedAt[p]; ok {
			out[p] = at
		}
	}
	return out
}

func (l *ledger) counts() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.consumed)
}

// observe records the committed offsets read back, and any that went backwards.
func (l *ledger) observe(offs kadm.OffsetResponses) {
	l.mu.Lock()
	defer l.mu.Unlock()
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil || o.At < 0 {
			return
		}
		if prev, ok := l.committed[o.Partition]; ok && o.At < prev {
			l.backwards = append(l.backwards, fmt.Sprintf("partition %d: %d after %d", o.Partition, o.At, prev))
		}
		l.committed[o.Partition] = max(l.committed[o.Partition], o.At)
	})
}

func coordinatorOf(ctx context.Context, cl *kgo.Client) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if len(resp.Coordinators) == 1 {
		return resp.Coordinators[0].NodeID, nil
	}
	return resp.NodeID, nil
}

func leaderOf(ctx context.Context, adm *kadm.Client, p int32) (int32, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return -1, err
	}
	return md.Topics[topic].Partitions[p].Leader, nil
}

// TestClusterChaos runs the fault schedule of each seed: kill -9 the group's
// coordinator, kill -9 a partition leader, pause a broker past its lease (a seed picks
// their order, the partition and the paused broker), each followed by a restart or a
// resume. Every acknowledged record is in the log once, at the offset it was
// acknowledged at, and consumed; no committed offset goes backwards; every acknowledged
// commit survives; the group keeps its generation over the coordinator's kill; and a
// restarted coordinator gets its group back. One seed runs in `go test`; `make
// chaos-cluster` runs the long set; -cluster.seed=N replays one.
func TestClusterChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three broker processes and a consumer group")
	}
	seeds := []uint64{1, 101}
	switch {
	case *seedFlag != 0:
		seeds = []uint64{*seedFlag}
	case *longFlag:
		seeds = []uint64{1, 2, 3, 4, 5, 6, 101, 102, 103, 104}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// Seeds from 100 up also run the fault injector inside every broker.
			inject := seed >= 100
			if inject {
				t.Setenv("KAAS_CHAOS_SEED", strconv.FormatUint(seed, 10))
			}
			runClusterChaos(t, seed, inject)
		})
	}
}

type fault int

const (
	killCoordinator fault = iota
	killLeader
	pauseBroker
)

func (f fault) String() string {
	return [...]string{"kill -9 the coordinator", "kill -9 a partition leader", "pause the coordinator past its lease"}[f]
}

func runClusterChaos(t *testing.T, seed uint64, inject bool) {
	rng := rand.New(rand.NewPCG(seed, 0x6b616173))
	order := []fault{killCoordinator, killLeader, pauseBroker}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if os.Getenv("KAAS_CHAOS_NO_PAUSE") != "" {
		order = slices.DeleteFunc(order, func(f fault) bool { return f == pauseBroker })
	}
	t.Logf("seed %d (replay: go test ./e2e/cluster -run TestClusterChaos -cluster.seed=%d -v): %v", seed, seed, order)
	c := newCluster(t, inject)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	end, _ := ctx.Deadline() // the polls below share the run's deadline
	testwait.For(t, time.Until(end), 100*time.Millisecond, func() error {
		resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
		if err != nil || resp.Err != nil {
			return fmt.Errorf("create topic: %v / %v", err, resp.Err)
		}
		return nil
	})
	l := &ledger{acked: map[string]string{}, consumed: map[string]bool{}, committed: map[int32]int64{}, commitAcked: map[int32]int64{},
		consumedAt: map[int32]int64{}}

	// The producer: acks=all, idempotent, values 0, 1, 2, ...
	prodCtx, stopProd := context.WithCancel(ctx)
	var prodWG, wg sync.WaitGroup
	prodWG.Add(1)
	go func() {
		defer prodWG.Done()
		prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RecordDeliveryTimeout(90*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		defer prod.Close()
		for i := 0; prodCtx.Err() == nil; i++ {
			v := strconv.Itoa(i)
			prod.Produce(prodCtx, kgo.StringRecord(v), func(r *kgo.Record, err error) {
				if err == nil {
					l.ack(r)
				}
			})
			if i%50 == 49 {
				_ = prod.Flush(prodCtx)
				time.Sleep(20 * time.Millisecond)
			}
		}
		_ = prod.Flush(context.Background())
	}()

	// Three members, committing what they consumed after each poll.
	consCtx, stopCons := context.WithCancel(ctx)
	var members struct {
		sync.Mutex
		cls []*kgo.Client
	}
	for m := 0; m < 3; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			members.Lock()
			members.cls = append(members.cls, cl)
			members.Unlock()
			for consCtx.Err() == nil {
				fs := cl.PollFetches(consCtx)
				fs.EachRecord(l.consume)
				cl.CommitOffsetsSync(consCtx, cl.UncommittedOffsets(), func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					if err != nil {
						if consCtx.Err() == nil {
							t.Logf("commit: %v", err)
						}
						return
					}
					for i, rt := range resp.Topics {
						for j, rp := range rt.Partitions {
							if rp.ErrorCode != 0 {
								continue
							}
							if i < len(req.Topics) && j < len(req.Topics[i].Partitions) {
								l.commitAck(rp.Partition, req.Topics[i].Partitions[j].Offset)
							}
						}
					}
				})
			}
		}()
	}
	// The watcher: committed offsets read back never go backwards.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for consCtx.Err() == nil {
			if offs, err := adm.FetchOffsets(consCtx, group); err == nil {
				l.observe(offs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// progress waits until consumption moves on by n records.
	progress := func(what string, n int) {
		t.Helper()
		_, from := l.counts()
		testwait.For(t, 60*time.Second, 20*time.Millisecond, func() error {
			if a, now := l.counts(); now < from+n {
				return fmt.Errorf("%s: consumption stalled (%d acked, %d consumed)", what, a, now)
			}
			return nil
		})
	}
	// The generation the members are in, as they see it (-1 until all three agree: the
	// group's file can lag behind a generation while its journal holds it).
	generation := func() int32 {
		members.Lock()
		defer members.Unlock()
		gen := int32(-1)
		if len(members.cls) < 3 {
			return -1
		}
		for i, cl := range members.cls {
			_, g := cl.GroupMetadata()
			if i > 0 && g != gen {
				return -1
			}
			gen = g
		}
		return gen
	}
	progress("start", 300)
	// settle waits for all three members in one Stable generation that assigns every
	// partition, unchanged over 100 records consumed (the cooperative assignor's
	// revocation round may follow a Stable one), and returns it.
	settle := func() int32 {
		for {
			testwait.For(t, time.Until(end), 50*time.Millisecond, testwait.Cond("the group never settled", func() bool {
				return generation() >= 0 && settled(d(adm, ctx))
			}))
			gen := generation()
			progress("settling", 100)
			if generation() == gen && settled(d(adm, ctx)) {
				return gen
			}
		}
	}
	settle()

	for _, f := range order {
		switch f {
		case killCoordinator:
			// Members go on with the new coordinator, same generation; once the killed
			// broker is back, the group is on the broker its hash names.
			gen := settle()
			coord, err := coordinatorOf(ctx, admCl)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("killing coordinator %d (generation %d)", coord, gen)
			c.procs[coord].Kill()
			progress("after the coordinator's kill", 300)
			// Membership survives the move (the cluster's promise) when the move is the
			// only fault. With the injector inside the brokers, a delayed or doubled
			// session timer or a panicking group may legitimately expire a member, and
			// the members rejoin by the protocol: invariants 2 and 4 check that run.
			if g := generation(); g != gen && !inject {
				t.Errorf("generation %d after the coordinator moved, want %d (no rebalance)", g, gen)
			} else if g != gen {
				t.Logf("generation %d after the coordinator moved with in-broker faults (was %d)", g, gen)
			}
			c.start(int(coord))
			// With every broker back the group is where the hash over all three puts it:
			// the restarted broker if it was the group's own, not if it held the group
			// only while the hash's broker was down (seed 4: a partition leader's kill
			// left the group on its fallback, the one killed next).
			home, _ := registry.View{Size: brokers, Alive: []int32{0, 1, 2}}.GroupOwner(group)
			testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
				if now, err := coordinatorOf(ctx, admCl); err != nil || now != home {
					return fmt.Errorf("with broker %d restarted, the group never returned to broker %d, its hash's (now %d, %v)", coord, home, now, err)
				}
				return nil
			})
			progress("after the coordinator's restart", 300)
		case killLeader:
			p := rng.Int32N(parts)
			leader, err := leaderOf(ctx, adm, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("killing partition %d's leader %d", p, leader)
			c.procs[leader].Kill()
			progress("after the leader's kill", 300)
			c.start(int(leader))
			progress("after the leader's restart", 300)
		case pauseBroker:
			// The group's coordinator, which also leads partitions, with the clients'
			// default settings: its watchdog ends its connections once its lease has
			// ended, as a kill would, and the group goes on on the peers that adopt it.
			gen := settle()
			paused, err := coordinatorOf(ctx, admCl)
			if err != nil {
				t.Fatal(err)
			}
			led := map[int32]int64{} // the partitions it leads, and their last acknowledged offset
			for p := int32(0); p < parts; p++ {
				if ld, err := leaderOf(ctx, adm, p); err == nil && ld == paused {
					led[p] = l.maxAcked(p)
				}
			}
			t.Logf("pausing coordinator %d (leader of partitions %v, generation %d)", paused, slices.Sorted(maps.Keys(led)), gen)
			before := l.lastConsumed()
			c.procs[paused].Pause()
			pausedAt := time.Now()
			// Consumption resumes on every partition, those it led included, within the
			// lease and 5 s (Done-when of the pause; lease.duration.ms is 3 s here).
			const resumeWithin = 3*time.Second + 5*time.Second
			testwait.For(t, 60*time.Second, 20*time.Millisecond, func() error {
				now, behind := l.lastConsumed(), []int32{}
				for p := int32(0); p < parts; p++ {
					if now[p] <= before[p] {
						behind = append(behind, p)
					}
				}
				if len(behind) > 0 {
					return fmt.Errorf("partitions %v consumed nothing during coordinator %d's pause", behind, paused)
				}
				return nil
			})
			took := time.Since(pausedAt)
			t.Logf("every partition consumed again %v after the pause", took.Round(time.Millisecond))
			if took > resumeWithin && !inject {
				t.Errorf("consumption resumed on every partition %v after the coordinator's pause, want within %v", took.Round(time.Millisecond), resumeWithin)
			}
			// The fault lasts until the others have seen its lease lapse (their published
			// views leave it out) and have taken its partitions over: its groups move, and
			// so do its partitions, whose locks the new leaders break (a paused process
			// keeps them; the new leader epoch keeps out what it writes once it resumes,
			// docs/architecture.md, fencing). Resumed, it must find itself fenced before it
			// writes: what it had in flight is checked with everything else below.
			other := (paused + 1) % brokers
			testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
				if viewHas(t, c.dir, other, paused) {
					return fmt.Errorf("broker %d still routes to paused broker %d", other, paused)
				}
				return nil
			})
			testwait.For(t, 60*time.Second, 20*time.Millisecond, func() error {
				for p, before := range led {
					if l.maxAcked(p) <= before {
						return fmt.Errorf("partition %d, led by paused broker %d, took no record while it was paused (last acknowledged offset %d)", p, paused, before)
					}
				}
				return nil
			})
			// No rebalance: the members kept their generation through the move.
			if g := generation(); g != gen && !inject {
				t.Errorf("generation %d after the coordinator's pause, want %d (no rebalance)", g, gen)
			}
			c.procs[paused].Resume()
			progress("after the pause", 300)
		}
	}

	stopProd()
	prodWG.Wait()
	// Every acknowledged record is consumed.
	var missing []string
	if err := testwait.Until(90*time.Second, 50*time.Millisecond, func() error {
		l.mu.Lock()
		missing = missing[:0]
		for v := range l.acked {
			if !l.consumed[v] {
				missing = append(missing, v)
			}
		}
		l.mu.Unlock()
		if len(missing) > 0 {
			return fmt.Errorf("%d acknowledged records not consumed", len(missing))
		}
		return nil
	}); err != nil {
		inLog := readAll(t, c.seeds())
		atOffset := map[string]string{}
		for v, ats := range inLog {
			for _, at := range ats {
				atOffset[at] = v
			}
		}
		for p := 0; p < parts; p++ {
			dir := filepath.Join(c.dir, "topics", topic, strconv.Itoa(p))
			ents, _ := os.ReadDir(dir)
			var files []string
			for _, e := range ents {
				info, _ := e.Info()
				files = append(files, fmt.Sprintf("%s:%d", e.Name(), info.Size()))
			}
			t.Logf("partition %d files %v", p, files)
		}
		sort.Slice(missing, func(i, j int) bool {
			a, _ := strconv.Atoi(missing[i])
			b, _ := strconv.Atoi(missing[j])
			return a < b
		})
		l.mu.Lock()
		byOffset := map[string][]string{}
		for v, at := range l.acked {
			byOffset[at] = append(byOffset[at], v)
		}
		l.mu.Unlock()
		for at, vs := range byOffset {
			if len(vs) > 1 {
				t.Logf("offset %s acknowledged to %d records: %v", at, len(vs), vs)
			}
		}
		var where []string
		for i, v := range missing {
			if i == 20 {
				break
			}
			l.mu.Lock()
			at := l.acked[v]
			l.mu.Unlock()
			where = append(where, fmt.Sprintf("%s acked at %s (the log has %q there)", v, at, atOffset[at]))
		}
		if n, err := strconv.Atoi(missing[0]); err == nil {
			for _, k := range []int{n - 12, n - 6, n + 6, n + 54, n + 60} {
				t.Logf("neighbour %d at %v", k, inLog[strconv.Itoa(k)])
			}
		}
		if b, err := os.ReadFile(c.procs[0].LogPath); err == nil {
			n := 0
			for _, line := range strings.Split(string(b), "\n") {
				if (strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) ||
					strings.Contains(line, "partitions_released") || strings.Contains(line, "ownership_view_applied")) && n < 200 {
					t.Log(line)
					n++
				}
			}
		}
		t.Fatalf("%d acknowledged records never consumed (value@partition/offset in the log, if there): %v ...", len(missing), where)
	}
	stopCons()
	wg.Wait()
	a, n := l.counts()
	t.Logf("%d records acknowledged, %d distinct consumed", a, n)
	if inject {
		t.Logf("faults injected inside the brokers: %v", c.injected())
	}
	if len(l.backwards) > 0 {
		t.Errorf("committed offsets went backwards: %v", l.backwards)
	}
	// Every acknowledged commit survived.
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	for p, at := range l.commitAcked {
		if got, ok := offs.Lookup(topic, p); !ok || got.Err != nil || got.At < at {
			t.Errorf("partition %d: commit of %d acknowledged, %+v committed now", p, at, got)
		}
	}
	// Every acknowledged record is in the log once, where it was acknowledged; nothing is
	// in the log twice (the producer is idempotent).
	inLog := readAll(t, c.seeds())
	bad := 0
	for v, ats := range inLog {
		if len(ats) > 1 && bad < 20 {
			t.Errorf("value %s is in the log %d times: %v", v, len(ats), ats)
			bad++
		}
	}
	l.mu.Lock()
	for v, at := range l.acked {
		if ats := inLog[v]; (len(ats) != 1 || ats[0] != at) && bad < 20 {
			t.Errorf("value %s acknowledged at %s, in the log at %v", v, at, ats)
			bad++
		}
	}
	l.mu.Unlock()
}

func d(adm *kadm.Client, ctx context.Context) kadm.DescribedGroup {
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{}
	}
	return gs[group]
}

// settled: the group is Stable with three members and all partitions assigned.
func settled(g kadm.DescribedGroup) bool {
	if g.State != "Stable" || len(g.Members) != 3 {
		return false
	}
	n := 0
	for _, m := range g.Members {
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				n += len(t.Partitions)
			}
		}
	}
	return n == parts
}

// readAll reads every partition from the start to its end offset without a group:
// value -> every "p/offset" it is at.
func readAll(t *testing.T, seeds []string) map[string][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	end, _ := ctx.Deadline()
	testwait.For(t, time.Until(end), 50*time.Millisecond, func() error {
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err != nil || ends.Error() != nil {
			return fmt.Errorf("list end offsets: %v / %v", err, ends.Error())
		}
		return nil
	})
	want := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	out := map[string][]string{}
	if len(want) == 0 {
		return out
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	next := map[int32]int64{}
	errs := map[string]int{}
	for len(want) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("read back: partitions %v not read to their ends (at %v); fetch errors %v", want, next, errs)
		}
		fs := rd.PollFetches(ctx)
		fs.EachError(func(tp string, p int32, err error) { errs[fmt.Sprintf("%s/%d: %v", tp, p, err)]++ })
		fs.EachRecord(func(r *kgo.Record) {
			out[string(r.Value)] = append(out[string(r.Value)], fmt.Sprintf("%d/%d", r.Partition, r.Offset))
			next[r.Partition] = r.Offset + 1
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// viewHas reports whether broker id's published view has broker other alive.
func viewHas(t *testing.T, dir string, id, other int32) bool {
	b, err := os.ReadFile(filepath.Join(dir, "__cluster", "nodes", fmt.Sprintf("broker-%d.view", id)))
	if err != nil {
		return true
	}
	var v struct {
		Alive []int32 `json:"alive"`
	}
	if json.Unmarshal(b, &v) != nil {
		return true
	}
	for _, a := range v.Alive {
		if a == other {
			return true
		}
	}
	return false
}
