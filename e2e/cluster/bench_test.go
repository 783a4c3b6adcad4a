package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"kaas/e2e/proc"
	"kaas/internal/testwait"
)

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// createStream creates the 6-partition topic, retrying until the brokers take it.
func createStream(tb testing.TB, ctx context.Context, adm *kadm.Client) {
	tb.Helper()
	for {
		resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
		if err == nil && resp.Err == nil || errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("create topic: %v / %v", err, resp.Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// percentile is the nearest-rank p-th percentile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// recovery tracks, since a mark, when each member first consumed a record produced after
// it, when each member's first commit covering such a record was acknowledged, and when
// each partition first delivered one. Records carry their produce time (UnixNano) as
// their value, so "produced after the mark" needs no broker timestamp.
type recovery struct {
	mu        sync.Mutex
	since     time.Time
	consumed  [3]time.Time
	committed [3]time.Time
	parts     map[int32]time.Time
}

func (r *recovery) mark(at time.Time) {
	r.mu.Lock()
	r.since, r.consumed, r.committed, r.parts = at, [3]time.Time{}, [3]time.Time{}, map[int32]time.Time{}
	r.mu.Unlock()
}

// polled notes member m's poll; it reports whether the poll held a record produced after
// the mark (its commit then counts for committed).
func (r *recovery) polled(m int, fs kgo.Fetches) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh := false
	fs.EachRecord(func(rec *kgo.Record) {
		ns, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil || !time.Unix(0, ns).After(r.since) {
			return
		}
		fresh = true
		if _, ok := r.parts[rec.Partition]; !ok {
			r.parts[rec.Partition] = now
		}
	})
	if fresh && r.consumed[m].IsZero() {
		r.consumed[m] = now
	}
	return fresh
}

func (r *recovery) commitAcked(m int, since time.Time) {
	now := time.Now()
	r.mu.Lock()
	if r.since.Equal(since) && r.committed[m].IsZero() {
		r.committed[m] = now
	}
	r.mu.Unlock()
}

// done reports, once every member has consumed and committed a record produced after the
// mark and every partition has delivered one, how long after the mark each of the three
// came last.
func (r *recovery) done() (consumed, committed, partitions time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.parts) < parts {
		return 0, 0, 0, false
	}
	for m := range 3 {
		if r.consumed[m].IsZero() || r.committed[m].IsZero() {
			return 0, 0, 0, false
		}
		consumed = max(consumed, r.consumed[m].Sub(r.since))
		committed = max(committed, r.committed[m].Sub(r.since))
	}
	for _, at := range r.parts {
		partitions = max(partitions, at.Sub(r.since))
	}
	return consumed, committed, partitions, true
}

// BenchmarkFailover kills the group's coordinator with kill -9, KAAS_BENCH_KILLS times
// (default 10), under a producer (acks=all, ~500 small records/s over 6 partitions) and
// a franz-go consumer group of 3 members (client defaults, cooperative-sticky; each
// member commits what it polled, synchronously, after every poll), on three kaas
// processes sharing one data directory with the default lease timings (3 s lease,
// renewed every 500 ms). A kill's failover time is from the kill until every member has
// consumed a record produced after the kill and had its commit of it acknowledged (a
// member can consume from partitions on live brokers before its next commit reaches the
// dead coordinator, so the commit is what shows it past the failover); it also reports
// when every member had first consumed such a record, and when all 6 partitions had
// delivered one (the killed broker's partitions moved too). Between kills the broker is
// restarted and the bench waits until every broker names it the group's coordinator again
// (30 s at most) and every member and partition is flowing. The members' generation
// before and after each kill is logged; a changed one, or changed member ids, is a
// rebalance. With 10 kills the p99 is the largest sample.
// KAAS_BENCH_METADATA_MIN_AGE_MS sets the clients' kgo.MetadataMinAge (default 5 s: a
// client that refreshed its metadata while the dead broker still led a partition asks
// again only that long after). Before each fault the bench waits KAAS_BENCH_QUIET_MS
// (default 6 s) so no client refreshed its metadata within its MetadataMinAge of the
// fault. KAAS_BENCH_FAULT=pause stops the coordinator with SIGSTOP instead, for 150 s at
// most, and resumes it once the group is flowing again; KAAS_BENCH_COMMIT=auto gives the
// members franz-go's default autocommit instead of a synchronous commit per poll;
// KAAS_BENCH_KGO_LOG=dir writes each client's debug log there.
//
//	go test -run NONE -bench Failover -benchtime 1x ./e2e/cluster/
func BenchmarkFailover(b *testing.B) {
	kills := envInt("KAAS_BENCH_KILLS", 10)
	var opts []kgo.Opt
	minAge := "5s, the client default"
	if ms := envInt("KAAS_BENCH_METADATA_MIN_AGE_MS", 0); ms > 0 {
		opts = append(opts, kgo.MetadataMinAge(time.Duration(ms)*time.Millisecond))
		minAge = fmt.Sprintf("%dms", ms)
	}
	pause := os.Getenv("KAAS_BENCH_FAULT") == "pause"
	if dir := os.Getenv("KAAS_BENCH_KGO_LOG"); dir != "" {
		f, err := os.Create(filepath.Join(dir, "kgo.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		kgoLog, kgoLogDir = f, dir
	}
	for range b.N {
		failover(b, kills, opts, minAge, pause, os.Getenv("KAAS_BENCH_COMMIT") == "auto")
	}
}

// kgoLog, when set, is where every client of the failover bench writes its debug log;
// the brokers' log is copied to kgoLogDir at the end.
var (
	kgoLog    io.Writer
	kgoLogDir string
)

// logged is opts with, when kgoLog is set, a debug logger whose lines name the client.
func logged(name string, opts []kgo.Opt) []kgo.Opt {
	if kgoLog == nil {
		return opts
	}
	return append(slices.Clone(opts), kgo.WithLogger(kgo.BasicLogger(kgoLog, kgo.LogLevelDebug,
		func() string { return time.Now().Format("15:04:05.000 ") + name + " " })))
}

// failover runs the kills; opts are added to the producer's and the members' options.
func failover(b *testing.B, kills int, opts []kgo.Opt, minAge string, pause, autoCommit bool) {
	c := newCluster(b, false)
	if kgoLogDir != "" {
		defer func() {
			if raw, err := os.ReadFile(filepath.Join(filepath.Dir(c.dir), "broker.log")); err == nil {
				_ = os.WriteFile(filepath.Join(kgoLogDir, "broker.log"), raw, 0o644)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*4*time.Minute+2*time.Minute)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		b.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	createStream(b, ctx, adm)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var produced, produceErrs atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.MaxBufferedRecords(1 << 20)}, logged("producer", opts)...)...)
		if err != nil {
			b.Error(err)
			return
		}
		defer prod.Close()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			v := strconv.FormatInt(time.Now().UnixNano(), 10)
			prod.Produce(runCtx, kgo.StringRecord(v), func(_ *kgo.Record, err error) {
				if err != nil {
					if runCtx.Err() == nil {
						produceErrs.Add(1)
					}
					return
				}
				produced.Add(1)
			})
		}
	}()

	rec := &recovery{}
	rec.mark(time.Now())
	var members struct {
		sync.Mutex
		cls []*kgo.Client
	}
	var commitErrs atomic.Int64
	for m := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// freshFor is the mark this member has polled a record produced after (its
			// next acknowledged autocommit covers it).
			var freshFor atomic.Pointer[time.Time]
			memberOpts := []kgo.Opt{kgo.SeedBrokers(c.seeds()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
			if autoCommit {
				memberOpts = append(memberOpts, kgo.AutoCommitCallback(func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					if err == nil {
						for _, t := range resp.Topics {
							for _, p := range t.Partitions {
								if p.ErrorCode != 0 {
									err = kerr.ErrorForCode(p.ErrorCode)
								}
							}
						}
					}
					if err != nil {
						if runCtx.Err() == nil {
							commitErrs.Add(1)
						}
						return
					}
					if at := freshFor.Load(); at != nil {
						rec.commitAcked(m, *at)
					}
				}))
			} else {
				memberOpts = append(memberOpts, kgo.DisableAutoCommit())
			}
			cl, err := kgo.NewClient(append(memberOpts, logged(fmt.Sprintf("member%d", m), opts)...)...)
			if err != nil {
				b.Error(err)
				return
			}
			defer cl.Close()
			members.Lock()
			members.cls = append(members.cls, cl)
			members.Unlock()
			for runCtx.Err() == nil {
				fs := cl.PollFetches(runCtx)
				rec.mu.Lock()
				since := rec.since
				rec.mu.Unlock()
				fresh := rec.polled(m, fs)
				if autoCommit {
					if fresh {
						freshFor.Store(&since)
					}
					continue
				}
				cl.CommitOffsetsSync(runCtx, cl.UncommittedOffsets(), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					if err == nil {
						for _, t := range resp.Topics {
							for _, p := range t.Partitions {
								if p.ErrorCode != 0 {
									err = fmt.Errorf("partition %d: error code %d", p.Partition, p.ErrorCode)
								}
							}
						}
					}
					if err != nil {
						if runCtx.Err() == nil {
							commitErrs.Add(1)
						}
						return
					}
					if fresh {
						rec.commitAcked(m, since)
					}
				})
			}
		}()
	}
	// The generation the members are in, as they see it (-1 until all three agree).
	generation := func() int32 {
		members.Lock()
		defer members.Unlock()
		if len(members.cls) < 3 {
			return -1
		}
		gen := int32(-1)
		for i, cl := range members.cls {
			_, g := cl.GroupMetadata()
			if i > 0 && g != gen {
				return -1
			}
			gen = g
		}
		return gen
	}
	// flowing waits, from a mark, until every member consumes and commits and every
	// partition delivers records produced after it, and returns when each came last.
	flowing := func(what string, from time.Time, within time.Duration) (time.Duration, time.Duration, time.Duration) {
		b.Helper()
		deadline := from.Add(within)
		for {
			if cons, comm, ps, ok := rec.done(); ok {
				return cons, comm, ps
			}
			if time.Now().After(deadline) {
				rec.mu.Lock()
				state := fmt.Sprintf("consumed %v, committed %v, partitions %v", rec.consumed, rec.committed, rec.parts)
				rec.mu.Unlock()
				b.Fatalf("%s: not flowing %v after it (%s; %d produced, %d produce errors, %d commit errors)",
					what, within, state, produced.Load(), produceErrs.Load(), commitErrs.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// describe describes the group through a client of its own, made again after an
	// error: a kgo client keeps a dead coordinator cached for DescribeGroups, retrying
	// the dial, well after the group moved.
	var descCl *kgo.Client
	defer func() {
		if descCl != nil {
			descCl.Close()
		}
	}()
	describe := func() (kadm.DescribedGroup, error) {
		if descCl == nil {
			if descCl, err = kgo.NewClient(kgo.SeedBrokers(c.seeds()...)); err != nil {
				b.Fatal(err)
			}
		}
		gs, err := kadm.NewClient(descCl).DescribeGroups(ctx, group)
		if err == nil {
			err = gs[group].Err
		}
		if err != nil {
			descCl.Close()
			descCl = nil
		}
		return gs[group], err
	}
	// stable waits for all three members in one Stable generation assigning every
	// partition and returns it.
	stable := func(what string) int32 {
		b.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			g := generation()
			dg, err := describe()
			if g >= 0 && err == nil && settled(dg) && g == generation() {
				return g
			}
			if time.Now().After(deadline) {
				members.Lock()
				var gens []int32
				for _, cl := range members.cls {
					_, g := cl.GroupMetadata()
					gens = append(gens, g)
				}
				members.Unlock()
				b.Fatalf("%s: the group never settled (members' generations %v; described: state %q, %d members, err %v)", what, gens, dg.State, len(dg.Members), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	members3 := func() []string {
		dg, err := describe()
		if err != nil {
			return []string{err.Error()}
		}
		return memberIDs(dg)
	}
	steady := func(what string) int32 {
		b.Helper()
		for {
			gen := stable(what)
			at := time.Now()
			rec.mark(at)
			flowing(what, at, 60*time.Second)
			if dg, err := describe(); err == nil && generation() == gen && settled(dg) {
				return gen
			}
		}
	}
	// agreed waits until every broker names the same coordinator for the group, want if
	// want >= 0 (for 30s; then any), and returns it.
	agreed := func(what string, want int32) int32 {
		b.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var named []int32
			for i := range brokers {
				req := kmsg.NewPtrFindCoordinatorRequest()
				req.CoordinatorKey = group
				req.CoordinatorKeys = []string{group}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := req.RequestWith(rctx, admCl.Broker(i))
				cancel()
				if err == nil && len(resp.Coordinators) == 1 && resp.Coordinators[0].ErrorCode == 0 {
					named = append(named, resp.Coordinators[0].NodeID)
				}
			}
			if len(named) == brokers && named[0] == named[1] && named[1] == named[2] && (want < 0 || named[0] == want || time.Now().After(deadline)) {
				return named[0]
			}
			if time.Now().After(deadline.Add(30 * time.Second)) {
				b.Fatalf("%s: the brokers name coordinators %v", what, named)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	steady("start")

	var consumedS, committedS, partsS []time.Duration
	var lines []string
	rebalances, moves := 0, 0
	prevAfter := int32(-1)
	for k := range kills {
		gen := steady(fmt.Sprintf("before kill %d", k))
		if prevAfter >= 0 && gen != prevAfter {
			moves++ // the group rebalanced while its coordinator came back
		}
		coord := agreed(fmt.Sprintf("before kill %d", k), -1)
		// The clients asked for metadata while the group and partitions came back to the
		// restarted broker; a client asks again at most once a MetadataMinAge (5 s by
		// default). A fault in a steady cluster finds them past it: so does this one.
		time.Sleep(time.Duration(envInt("KAAS_BENCH_QUIET_MS", 6000)) * time.Millisecond)
		before := members3()
		at := time.Now()
		rec.mark(at)
		if pause {
			b.Logf("pausing coordinator %d at %s", coord, at.Format("15:04:05.000"))
			c.procs[coord].Pause()
		} else {
			c.procs[coord].Kill()
		}
		cons, comm, ps := flowing(fmt.Sprintf("kill %d of coordinator %d", k, coord), at, 150*time.Second)
		b.Logf("fault %d: consuming+committed again %v, consumed %v, all partitions %v", k, comm.Round(time.Millisecond), cons.Round(time.Millisecond), ps.Round(time.Millisecond))
		if pause {
			// A client asking the paused broker waits out its request timeout: resume it
			// before describing the group.
			c.procs[coord].Resume()
		}
		after := stable(fmt.Sprintf("after kill %d", k))
		same := slices.Equal(before, members3())
		if after != gen || !same {
			rebalances++
		}
		prevAfter = after
		consumedS, committedS, partsS = append(consumedS, cons), append(committedS, comm), append(partsS, ps)
		lines = append(lines, fmt.Sprintf("kill %d broker %d, generation %d→%d (members kept: %v), consuming+committed again %v, consumed %v, all partitions %v",
			k, coord, gen, after, same, comm.Round(time.Millisecond), cons.Round(time.Millisecond), ps.Round(time.Millisecond)))

		if !pause {
			c.start(int(coord))
		}
		if now := agreed(fmt.Sprintf("after restart %d", k), coord); now != coord {
			b.Logf("restarted broker %d did not get its group back in 30s: broker %d coordinates it", coord, now)
		}
	}
	gen := steady("after the last restart")
	if gen != prevAfter {
		moves++
	}
	stop()

	for _, s := range [][]time.Duration{consumedS, committedS, partsS} {
		slices.Sort(s)
	}
	b.ReportMetric(ms(percentile(committedS, 0.5)), "failover_p50_ms")
	b.ReportMetric(ms(percentile(committedS, 0.99)), "failover_p99_ms")
	b.ReportMetric(ms(committedS[len(committedS)-1]), "failover_max_ms")
	b.ReportMetric(ms(percentile(consumedS, 0.99)), "consumed_p99_ms")
	b.ReportMetric(ms(percentile(partsS, 0.99)), "partitions_p99_ms")
	b.ReportMetric(float64(rebalances), "rebalances")
	b.Logf("%d kills of the coordinator (default lease timings, client metadata min age %s): every member consuming and committed again p50 %v, p99 %v, max %v (goal p99 < 5s); every member consumed p50 %v, p99 %v; every partition delivering p50 %v, p99 %v; samples (sorted, ms) committed %v consumed %v partitions %v; rebalances at a kill %d, while the broker came back %d; %d records produced, %d produce errors, %d failed commits (retried)",
		kills, minAge, percentile(committedS, 0.5).Round(time.Millisecond), percentile(committedS, 0.99).Round(time.Millisecond), committedS[len(committedS)-1].Round(time.Millisecond),
		percentile(consumedS, 0.5).Round(time.Millisecond), percentile(consumedS, 0.99).Round(time.Millisecond),
		percentile(partsS, 0.5).Round(time.Millisecond), percentile(partsS, 0.99).Round(time.Millisecond),
		msList(committedS), msList(consumedS), msList(partsS), rebalances, moves, produced.Load(), produceErrs.Load(), commitErrs.Load())
	// One line for all the kills: a benchmark's log is cut after 10 lines.
	b.Logf("%s", strings.Join(lines, "; "))
}

func memberIDs(g kadm.DescribedGroup) []string {
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.MemberID)
	}
	slices.Sort(ids)
	return ids
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msList(ds []time.Duration) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.Milliseconds())
	}
	return out
}

// BenchmarkClusterThroughput measures, in one run, the three kaas processes on one data
// directory (static registry), one kaas process alone (the same flags, its own data
// directory) and franz-go's kfake with 3 brokers in memory, one after the other (each
// kaas is stopped before the next starts), and reports the ratios cluster/single and
// cluster/kfake3:
//
//   - durable commits/s: 64 committers over 16 groups (4 a group, each on its own
//     partition), each sending OffsetCommit v9 (generation -1) and waiting for the answer,
//     for KAAS_BENCH_SECONDS (default 5), through 16 franz-go clients (one a group) that
//     route each request to its group's coordinator; kaas acknowledges a commit once it
//     is fsynced, kfake in memory does not write;
//   - produce MB/s: one franz-go producer (acks=all, idempotent, no compression) sending
//     KAAS_BENCH_MB (default 64) of 1 KB records to a 6-partition topic, until all are
//     acknowledged.
//
// The clients share the machine (and this process) with the brokers.
//
//	go test -run NONE -bench ClusterThroughput -benchtime 1x ./e2e/cluster/
func BenchmarkClusterThroughput(b *testing.B) {
	d := time.Duration(envInt("KAAS_BENCH_SECONDS", 5)) * time.Second
	mb := envInt("KAAS_BENCH_MB", 64)
	for range b.N {
		type figures struct{ commits, mbps float64 }
		measure := func(name string, seeds []string) figures {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			createStream(b, ctx, kadm.NewClient(cl))
			f := figures{commits: commitRate(b, seeds, 64, 16, d), mbps: produceRate(b, ctx, seeds, mb)}
			b.Logf("%s: %.0f commits/s, %.1f MB/s produced", name, f.commits, f.mbps)
			return f
		}
		syscall.Sync()
		c := newCluster(b, false)
		cluster := measure("3 kaas brokers", c.seeds())
		for _, p := range c.procs {
			if _, err := p.Term(30 * time.Second); err != nil {
				b.Logf("stopping a cluster broker: %v", err)
			}
		}

		syscall.Sync()
		port := proc.FreePort(b)
		one := proc.Start(b, c.bin, filepath.Join(b.TempDir(), "data"), port,
			"--group.initial.rebalance.delay.ms=0", "--offsets.checkpoint.interval.ms=500")
		single := measure("1 kaas broker", []string{one.Addr})
		if _, err := one.Term(30 * time.Second); err != nil {
			b.Logf("stopping the single broker: %v", err)
		}

		fake, err := kfake.NewCluster(kfake.NumBrokers(3))
		if err != nil {
			b.Fatal(err)
		}
		kf := measure("kfake, 3 brokers in memory", fake.ListenAddrs())
		fake.Close()

		b.ReportMetric(cluster.commits, "cluster_commits/s")
		b.ReportMetric(single.commits, "single_commits/s")
		b.ReportMetric(kf.commits, "kfake3_commits/s")
		b.ReportMetric(cluster.mbps, "cluster_MB/s")
		b.ReportMetric(single.mbps, "single_MB/s")
		b.ReportMetric(kf.mbps, "kfake3_MB/s")
		b.ReportMetric(cluster.commits/single.commits, "commits_cluster/single")
		b.ReportMetric(cluster.commits/kf.commits, "commits_cluster/kfake3")
		b.ReportMetric(cluster.mbps/single.mbps, "MB/s_cluster/single")
		b.ReportMetric(cluster.mbps/kf.mbps, "MB/s_cluster/kfake3")
		b.Logf("commits/s (64 committers, 16 groups, %v): cluster %.0f, single %.0f, kfake3 %.0f: cluster/single %.2fx, cluster/kfake3 %.2fx; produce MB/s (%d MB of 1 KB, acks=all): cluster %.1f, single %.1f, kfake3 %.1f: cluster/single %.2fx, cluster/kfake3 %.2fx",
			d, cluster.commits, single.commits, kf.commits, cluster.commits/single.commits, cluster.commits/kf.commits,
			mb, cluster.mbps, single.mbps, kf.mbps, cluster.mbps/single.mbps, cluster.mbps/kf.mbps)
	}
}

// commitRate runs committers goroutines over groups groups for d, each committing the
// next offset of its own partition and waiting for the answer, and returns commits/s.
func commitRate(b *testing.B, seeds []string, committers, groups int, d time.Duration) float64 {
	clients := make([]*kgo.Client, groups)
	for i := range clients {
		// OffsetCommit v9 for both: kfake speaks v10 (topics by id), kaas v9 like Apache 4.0.
		versions := kversion.Stable()
		versions.SetMaxKeyVersion(8, 9)
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.MaxVersions(versions))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	commit := func(c int, off int64) error {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 9
		req.Group = "bench-" + strconv.Itoa(c%groups)
		req.Generation = -1
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = topic
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition = int32(c / groups % parts)
		p.Offset = off
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, clients[c%groups])
		if err != nil {
			return err
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			return fmt.Errorf("group %s: error code %d", req.Group, code)
		}
		return nil
	}
	// Each group's first commit, before the clock starts: the clients find the
	// coordinators, and every coordinator knows the topic (a broker of the cluster learns
	// a created topic a moment after the one that created it).
	for g := range groups {
		testwait.For(b, 30*time.Second, 50*time.Millisecond, func() error {
			if err := commit(g, 0); err != nil {
				return fmt.Errorf("first commit: %w", err)
			}
			return nil
		})
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(1); time.Now().Before(stop); off++ {
				if err := commit(c, off); err != nil {
					b.Errorf("commit: %v", err)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// produceRate sends mb MB of 1 KB records with acks=all and returns MB/s, from the first
// record to the last acknowledgement.
func produceRate(b *testing.B, ctx context.Context, seeds []string, mb int) float64 {
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	value := make([]byte, 1024)
	_, _ = rand.Read(value)
	var failed atomic.Int64
	var firstErr atomic.Value
	send := func(n int) time.Duration {
		start := time.Now()
		for range n {
			prod.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil && failed.Add(1) == 1 {
					firstErr.Store(err)
				}
			})
		}
		if err := prod.Flush(ctx); err != nil {
			b.Fatalf("flush: %v", err)
		}
		if f := failed.Load(); f > 0 {
			b.Fatalf("%d of %d records failed: %v", f, n, firstErr.Load())
		}
		return time.Since(start)
	}
	// 1 MB first, not timed: the producer has its metadata and producer id, and the
	// partitions it writes are open, before the clock starts.
	send(1024)
	return float64(mb) / send(mb*1024).Seconds()
}
