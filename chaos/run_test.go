package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"kaas/actors/actor/actortest"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

var (
	long      = flag.Bool("chaos.long", false, "run the long seed set (make chaos)")
	seedFlag  = flag.Uint64("chaos.seed", 0, "run this one seed (replay)")
	faultsFor = flag.Duration("chaos.faults", 0, "how long faults are injected per run (default: 3s short, 20s long)")
	kindsFlag = flag.String("chaos.kinds", "", "comma-separated fault kinds to inject (default: all)")
)

// shortSeeds run in `go test` (make test); longSeeds in `make chaos`. A seed that found
// a bug stays here as a regression seed (1: connection restart, journal Append, partition
// read, a transaction actor's dropped answer; 3: journal flush, group request, a failed
// Complete* write retried late; 11: group request; 23: offsets commit), and each bug has
// a test of its own in regress_test.go (the late retry's in actors/txn).
var (
	shortSeeds = []uint64{1, 7}
	longSeeds  = []uint64{1, 2, 3, 5, 7, 11, 13, 17, 23}
)

// Client timeouts of the run: invariant 4's bound is rebalance + session.
const (
	sessionTimeout    = 3 * time.Second
	rebalanceTimeout  = 5 * time.Second
	heartbeatInterval = 300 * time.Millisecond
)

func TestChaos(t *testing.T) {
	seeds, d := shortSeeds, 3*time.Second
	if *long {
		seeds, d = longSeeds, 20*time.Second
	}
	if *seedFlag != 0 {
		seeds = []uint64{*seedFlag}
	}
	if *faultsFor > 0 {
		d = *faultsFor
	}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { run(t, seed, d, startSingle) })
	}
}

// groupSpec is one consumer group of the run.
type groupSpec struct {
	name    string
	members int
	static  bool
	eager   bool
	// consumer: the consumer group protocol (KIP-848, kgo.ServerSideBalancer): the broker
	// assigns, and the group is read with ConsumerGroupDescribe (invariant 7).
	consumer bool
}

var groups = []groupSpec{
	{name: "dynamic", members: 2},
	{name: "static", members: 2, static: true},
	{name: "eager", members: 3, eager: true},
	{name: "consumer", members: 3, consumer: true},
}

var topics = []string{"plain", "idem"}

const partitions = 3

// target is the system a run is against: what its clients dial, where its metrics are
// read, how it stops. singleBroker is one in-process broker, which the injector reaches
// through the hooks. A cluster target (three e2e/proc brokers sharing a data dir, with
// process faults, kill -9 and SIGSTOP/SIGCONT, scheduled from the same seed beside the
// injector's) plugs in here once the cluster work routes groups and partitions.
type target interface {
	Seeds() []string
	Metrics() prometheus.Gatherer
	Stop() error
}

type singleBroker struct{ b *broker.Broker }

func startSingle(t *testing.T) (target, error) {
	cfg := brokertest.Config(t)
	// The consumer protocol's timers are the broker's: the same session timeout as the
	// classic members', heartbeats as often.
	cfg.GroupConsumerMinSessionTimeout, cfg.GroupConsumerSessionTimeout = time.Second, sessionTimeout
	cfg.GroupConsumerMinHeartbeatInterval, cfg.GroupConsumerHeartbeatInterval = 100*time.Millisecond, heartbeatInterval
	b, err := broker.Start(cfg, brokertest.Logger(t))
	if err != nil {
		return nil, err
	}
	return singleBroker{b}, nil
}

func (s singleBroker) Seeds() []string              { return []string{s.b.Addr()} }
func (s singleBroker) Metrics() prometheus.Gatherer { return s.b.Env().Metrics.Registry }
func (s singleBroker) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.b.Stop(ctx)
}

// run is one chaos run: producers, consumer groups and transactional clients run against
// the target while the injector fires for d, then faults stop and the six invariants are
// checked. A failing run logs its seed and schedule.
func run(t *testing.T, seed uint64, d time.Duration, start func(*testing.T) (target, error)) {
	leakOpts := actortest.LeakOptions(goleak.IgnoreCurrent())
	var kinds []Kind
	if *kindsFlag != "" {
		for _, k := range strings.Split(*kindsFlag, ",") {
			kinds = append(kinds, Kind(k))
		}
	}
	in := New(seed, nil, kinds...)
	in.MaxPanics = 3 + int(d/(2*time.Second))
	rec := NewRecorder()
	uninstall := in.Install(rec)
	defer uninstall()
	defer func() {
		if t.Failed() {
			t.Log("\n" + in.Report())
		}
	}()

	tg, err := start(t)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := tg.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	defer stop()
	addr := tg.Seeds()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(addr...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	if _, err := adm.CreateTopics(ctx, txnPartitions, 1, nil, txnTopics...); err != nil {
		t.Fatalf("create topics: %v", err)
	}

	w := newWorkload(t, addr)
	w.start()
	defer w.close()
	tw := newTxnWorkload(t, addr)
	tw.start()
	defer tw.stopPipeline()
	// Faults start once every group has been Stable once: a run measures recovery, not
	// a first join under fire.
	if err := waitStable(ctx, adm, 30*time.Second); err != nil {
		t.Fatalf("groups before faults: %v", err)
	}
	if err := waitGroup(ctx, adm, eosGroup, eosMembers, 30*time.Second); err != nil {
		t.Fatalf("pipeline group before faults: %v", err)
	}
	in.On()
	time.Sleep(d) // the fault phase: load runs while the injector fires
	in.Off()
	healStart := time.Now()

	// Invariant 4: every group Stable within rebalance + session timeout.
	bound := rebalanceTimeout + sessionTimeout
	if err := waitStable(ctx, adm, bound); err != nil {
		t.Errorf("invariant 4: groups not Stable %v after faults stopped: %v", bound, err)
	}
	t.Logf("stable %v after faults stopped", time.Since(healStart).Round(time.Millisecond))
	acked := w.stopProducers()
	tw.stopProducers()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	// Invariant 4: consumers resume from their commits and catch up with the log.
	if err := waitCaughtUp(ctx, adm, ends, 60*time.Second); err != nil {
		t.Errorf("invariant 4: consumers did not catch up: %v", err)
	}
	// Invariant 6 (the pipeline): it copies the whole input; then its members stop.
	if err := waitPipeline(ctx, adm, 60*time.Second); err != nil {
		t.Errorf("invariant 6: pipeline did not reach the input's end: %v", err)
	}
	for _, v := range rec.CheckRequests(false) {
		t.Error(v)
	}
	w.closeConsumers()
	tw.stopPipeline()

	// Invariant 1: acknowledged commits are what the broker holds, never backwards.
	committed := map[Partition]int64{}
	for _, g := range groups {
		offs, err := adm.FetchOffsets(ctx, g.name)
		if err != nil {
			t.Fatalf("fetch offsets %s: %v", g.name, err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil {
				committed[Partition{g.name, o.Topic, o.Partition}] = o.At
			}
		})
	}
	vs, nCommits := rec.CheckCommits(committed)
	for _, v := range vs {
		t.Error(v)
	}
	// Invariant 2.
	vs, nGens := rec.CheckAssignments()
	for _, v := range vs {
		t.Error(v)
	}
	// Invariant 7: no partition held by two consumer-protocol members at one epoch, and
	// no fencing storm.
	vs, nHolds := w.owners.check()
	for _, v := range vs {
		t.Error(v)
	}
	nFences := 0
	for g, fs := range rec.Fences() {
		nFences += len(fs)
		if len(fs) > 0 {
			t.Logf("group %s: fences answered: %v", g, fs)
		}
	}
	if nFences > maxFences() {
		t.Errorf("invariant 7: %d consumer-protocol heartbeats answered FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID, more than %d", nFences, maxFences())
	}
	// Invariant 4: the log holds every acknowledged record, the idempotent producer's
	// once, and every group consumed every offset below its commit.
	logged := readLog(t, addr, ends)
	for _, v := range checkLog(acked, logged) {
		t.Error(v)
	}
	for _, v := range w.checkConsumed(ends) {
		t.Error(v)
	}
	txnCounts := checkTransactions(t, ctx, adm, addr, tw)
	// Invariant 5: what was injected and surfaced is counted.
	for _, v := range checkMetrics(tg.Metrics(), rec.Injected(), in.Panics()) {
		t.Error(v)
	}
	admCl.Close()
	w.close()
	stop()
	for _, v := range rec.CheckRequests(true) {
		t.Error(v)
	}
	for _, v := range rec.Violations() {
		t.Error(v)
	}
	if err := goleak.Find(leakOpts...); err != nil {
		t.Errorf("invariant 5: goroutines outlive the run: %v", err)
	}
	t.Logf("seed %d: faults %v; %d requests, %d acknowledged commits, %d generations, %d consumer-protocol holds (%d fences), %d acknowledged records checked; transactions %s",
		seed, in.Counts(), rec.Requests(), nCommits, nGens, nHolds, nFences, len(acked), txnCounts)
}

// workload is the run's clients: two producers and the consumer groups.
type workload struct {
	t    *testing.T
	addr []string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // producer loops
	cwg    sync.WaitGroup // consumer loops

	producers map[string]*kgo.Client // topic -> producer
	consumers []*consumer

	mu    sync.Mutex
	acked []ackedRecord

	// consumed is every offset each group consumed: group -> topic -> partition.
	consumedMu sync.Mutex
	consumed   map[string]map[string]map[int32]map[int64]bool

	// owners is what the consumer-protocol members were assigned, and at which epochs.
	owners *owners
}

type ackedRecord struct {
	topic     string
	partition int32
	offset    int64
	value     string
}

type consumer struct {
	w     *workload
	group string
	name  string
	cl    *kgo.Client
	ctx   context.Context
	stop  context.CancelFunc
}

func newWorkload(t *testing.T, addr []string) *workload {
	w := &workload{t: t, addr: addr, producers: map[string]*kgo.Client{},
		consumed: map[string]map[string]map[int32]map[int64]bool{}, owners: newOwners()}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	plain, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic("plain"), kgo.ProducerLinger(5*time.Millisecond), kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	idem, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("idem"), kgo.ProducerLinger(5*time.Millisecond), kgo.RetryBackoffFn(backoff))
	if err != nil {
		t.Fatal(err)
	}
	w.producers["plain"], w.producers["idem"] = plain, idem
	for _, g := range groups {
		for i := range g.members {
			opts := []kgo.Opt{
				kgo.SeedBrokers(addr...), kgo.ConsumerGroup(g.name), kgo.ConsumeTopics(topics...),
				kgo.SessionTimeout(sessionTimeout), kgo.RebalanceTimeout(rebalanceTimeout),
				kgo.HeartbeatInterval(heartbeatInterval), kgo.AutoCommitInterval(200 * time.Millisecond),
				kgo.FetchMaxWait(200 * time.Millisecond), kgo.RetryBackoffFn(backoff),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			}
			if g.static {
				opts = append(opts, kgo.InstanceID(fmt.Sprintf("%s-%d", g.name, i)))
			}
			if g.eager {
				opts = append(opts, kgo.Balancers(kgo.RangeBalancer()))
			}
			name := fmt.Sprintf("%s-%d", g.name, i)
			if g.consumer {
				opts = append(opts, kgo.ServerSideBalancer(), kgo.ClientID(name))
				opts = append(opts, w.owners.hooks(name)...)
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := &consumer{w: w, group: g.name, name: name, cl: cl}
			c.ctx, c.stop = context.WithCancel(context.Background())
			w.consumers = append(w.consumers, c)
		}
	}
	return w
}

func backoff(int) time.Duration { return 50 * time.Millisecond }

func (w *workload) start() {
	for topic, p := range w.producers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.produce(topic, p)
		}()
	}
	for _, c := range w.consumers {
		w.cwg.Add(1)
		go func() {
			defer w.cwg.Done()
			c.loop()
		}()
	}
}

// produce keeps a few records in flight until the workload stops.
func (w *workload) produce(topic string, p *kgo.Client) {
	sem := make(chan struct{}, 16)
	for i := 0; ; i++ {
		select {
		case sem <- struct{}{}:
		case <-w.ctx.Done():
			return
		}
		value := fmt.Sprintf("%s-%d", topic, i)
		p.Produce(context.Background(), &kgo.Record{Value: []byte(value)}, func(r *kgo.Record, err error) {
			<-sem
			if err == nil {
				w.mu.Lock()
				w.acked = append(w.acked, ackedRecord{r.Topic, r.Partition, r.Offset, value})
				w.mu.Unlock()
			}
		})
	}
}

func (c *consumer) loop() {
	for {
		fs := c.cl.PollFetches(c.ctx)
		if c.ctx.Err() != nil {
			return
		}
		c.w.consumedMu.Lock()
		g := c.w.consumed[c.group]
		if g == nil {
			g = map[string]map[int32]map[int64]bool{}
			c.w.consumed[c.group] = g
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := g[r.Topic]
			if tp == nil {
				tp = map[int32]map[int64]bool{}
				g[r.Topic] = tp
			}
			if tp[r.Partition] == nil {
				tp[r.Partition] = map[int64]bool{}
			}
			tp[r.Partition][r.Offset] = true
		})
		c.w.consumedMu.Unlock()
	}
}

// stopProducers ends the producing loops and waits for every record in flight; it
// returns the acknowledged records.
func (w *workload) stopProducers() []ackedRecord {
	w.cancel()
	w.wg.Wait()
	for _, p := range w.producers {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := p.Flush(ctx); err != nil {
			w.t.Errorf("producer flush: %v", err)
		}
		cancel()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ackedRecord(nil), w.acked...)
}

// closeConsumers stops the consumer loops and closes the clients (which commit what
// they consumed and leave).
func (w *workload) closeConsumers() {
	for _, c := range w.consumers {
		c.stop()
	}
	w.cwg.Wait()
	for _, c := range w.consumers {
		if _, epoch := c.cl.GroupMetadata(); c.name != "" {
			w.owners.closing(c.name, epoch)
		}
		c.cl.Close()
	}
	w.consumers = nil
}

func (w *workload) close() {
	w.cancel()
	w.wg.Wait()
	w.closeConsumers()
	for _, p := range w.producers {
		p.Close()
	}
}

// checkConsumed: every group consumed every offset of the log (at least once).
func (w *workload) checkConsumed(ends kadm.ListedOffsets) []string {
	w.consumedMu.Lock()
	defer w.consumedMu.Unlock()
	var out []string
	for _, g := range groups {
		ends.Each(func(o kadm.ListedOffset) {
			seen := w.consumed[g.name][o.Topic][o.Partition]
			missing := 0
			first := int64(-1)
			for off := int64(0); off < o.Offset; off++ {
				if !seen[off] {
					missing++
					if first < 0 {
						first = off
					}
				}
			}
			if missing > 0 {
				out = append(out, fmt.Sprintf("invariant 4: group %s skipped %d offsets of %s/%d (first %d, end %d)", g.name, missing, o.Topic, o.Partition, first, o.Offset))
			}
		})
	}
	return out
}

// waitStable waits until every group is Stable with all its members.
func waitStable(ctx context.Context, adm *kadm.Client, within time.Duration) error {
	var names []string
	for _, g := range groups {
		if !g.consumer {
			names = append(names, g.name)
		}
	}
	// Polling the broker's state: no event to wait on.
	return testwait.Until(within, 50*time.Millisecond, func() error {
		ds, err := adm.DescribeGroups(ctx, names...)
		if err != nil {
			return err
		}
		var last string
		for _, g := range groups {
			if g.consumer {
				if err := converged(ctx, adm, g); err != nil {
					last += fmt.Sprintf(" %s: %v", g.name, err)
				}
				continue
			}
			dg := ds[g.name]
			if dg.Err != nil || dg.State != "Stable" || len(dg.Members) != g.members {
				last += fmt.Sprintf(" %s=%s/%d members (err %v)", g.name, dg.State, len(dg.Members), dg.Err)
			}
		}
		if last != "" {
			return errors.New(strings.TrimSpace(last))
		}
		return nil
	})
}

// waitCaughtUp waits until every group has committed the log's end of every partition.
func waitCaughtUp(ctx context.Context, adm *kadm.Client, ends kadm.ListedOffsets, within time.Duration) error {
	// Polling committed offsets: no event to wait on.
	return testwait.Until(within, 100*time.Millisecond, func() error {
		var behind []string
		for _, g := range groups {
			offs, err := adm.FetchOffsets(ctx, g.name)
			if err != nil {
				behind = append(behind, fmt.Sprintf("%s: %v", g.name, err))
				continue
			}
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset == 0 {
					return // an empty partition: nothing to commit
				}
				c, ok := offs.Lookup(o.Topic, o.Partition)
				if !ok || c.At < o.Offset {
					behind = append(behind, fmt.Sprintf("%s %s/%d at %d of %d", g.name, o.Topic, o.Partition, c.At, o.Offset))
				}
			})
		}
		if len(behind) > 0 {
			return errors.New(strings.Join(behind, "; "))
		}
		return nil
	})
}

// loggedRecord is one record read back from the log.
type loggedRecord struct {
	topic     string
	partition int32
	offset    int64
}

// readLog reads every partition from its start to ends, outside any group.
func readLog(t *testing.T, addr []string, ends kadm.ListedOffsets) map[string][]loggedRecord {
	parts := map[string]map[int32]kgo.Offset{}
	want := 0
	ends.Each(func(o kadm.ListedOffset) {
		if parts[o.Topic] == nil {
			parts[o.Topic] = map[int32]kgo.Offset{}
		}
		parts[o.Topic][o.Partition] = kgo.NewOffset().At(0)
		want += int(o.Offset)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.ConsumePartitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string][]loggedRecord{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for got < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Errorf("read log: %d of %d records", got, want)
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, _ := ends.Lookup(r.Topic, r.Partition)
			if r.Offset >= end.Offset {
				return
			}
			got++
			out[string(r.Value)] = append(out[string(r.Value)], loggedRecord{r.Topic, r.Partition, r.Offset})
		})
	}
	return out
}

// checkLog: every acknowledged record is in the log where it was acknowledged; the
// idempotent producer's records are there once. (The other producer retries what it was
// not told was written, so its records may be there twice: Kafka's at-least-once.)
func checkLog(acked []ackedRecord, logged map[string][]loggedRecord) []string {
	var out []string
	for _, a := range acked {
		ls := logged[a.value]
		found := false
		for _, l := range ls {
			if l.topic == a.topic && l.partition == a.partition && l.offset == a.offset {
				found = true
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("invariant 4: acknowledged record %s at %s/%d@%d not in the log (found at %v)", a.value, a.topic, a.partition, a.offset, ls))
		}
		if a.topic == "idem" && len(ls) > 1 {
			out = append(out, fmt.Sprintf("invariant 4: idempotent record %s in the log %d times: %v", a.value, len(ls), ls))
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... and %d more", len(out)-20))
	}
	return out
}

// checkMetrics: every retriable error the injector answered is counted in
// kaas_requests_total under its API and code (the APIs whose code is top-level); every
// panic of a group, offsets, partition or transaction actor in kaas_actor_restarts_total
// (a transaction actor's resume); of the offsets journal among its failed writes. (The
// transaction coordinator's journal has no metrics of its own: its panics, kind
// txn_journal, are not checked here.)
func checkMetrics(reg prometheus.Gatherer, injected map[[2]int16]int, panics map[string]int) []string {
	mfs, err := reg.Gather()
	if err != nil {
		return []string{fmt.Sprintf("invariant 5: gather metrics: %v", err)}
	}
	counted := map[[2]string]float64{}
	restarts := map[string]float64{}
	journalErrors := 0.0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "kaas_actor_restarts_total":
			for _, m := range mf.GetMetric() {
				restarts[m.GetLabel()[0].GetValue()] += m.GetCounter().GetValue()
			}
			continue
		case "kaas_offsets_journal_writes_total":
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "error" {
					journalErrors += m.GetCounter().GetValue()
				}
			}
			continue
		case "kaas_requests_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var api, code string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "api":
					api = l.GetValue()
				case "error":
					code = l.GetValue()
				}
			}
			counted[[2]string{api, code}] += m.GetCounter().GetValue()
		}
	}
	var out []string
	for _, kind := range []string{"group", "offsets", "partition", "transaction"} {
		if restarts[kind] != float64(panics[kind]) {
			out = append(out, fmt.Sprintf("invariant 5: %d %s actor panics injected, kaas_actor_restarts_total{actor=%q} counts %v", panics[kind], kind, kind, restarts[kind]))
		}
	}
	if journalErrors < float64(panics["journal"]) {
		out = append(out, fmt.Sprintf("invariant 5: %d journal panics injected, kaas_offsets_journal_writes_total{result=\"error\"} counts %v", panics["journal"], journalErrors))
	}
	for k, n := range injected {
		switch k[0] {
		case 11, 12, 14: // JoinGroup, Heartbeat, SyncGroup: a top-level error code
		default:
			continue
		}
		api := kmsg.NameForKey(k[0])
		if c := counted[[2]string{api, strconv.Itoa(int(k[1]))}]; c < float64(n) {
			out = append(out, fmt.Sprintf("invariant 5: %s answered %d with code %d by the injector, kaas_requests_total counts %v", api, n, k[1], c))
		}
	}
	return out
}
