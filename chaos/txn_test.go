package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/internal/testwait"
)

// The run's transactional clients (invariant 6): transactional producers writing
// transactions over several partitions of their own topic, some committed and some
// aborted on purpose, and a consume-transform-produce pipeline of GroupTransactSession
// members copying a topic that an idempotent producer fills while faults fire. Every
// client does what a real application does on an error it cannot retry or whose outcome
// it does not know: it closes and makes a new client with the same transactional id,
// whose InitProducerId fences (and the coordinator aborts) whatever the old one left.

const (
	txnTopic      = "txn"
	txnPartitions = 4
	eosIn         = "eos-in"
	eosOut        = "eos-out"
	eosGroup      = "eos"
	eosMembers    = 2
	txnProducers  = 2
	// txnTimeout is every transactional client's transaction timeout: a transaction its
	// client left open is aborted by the coordinator this long after it began.
	txnTimeout = 3 * time.Second
	// perPart records per partition of a transaction, over txnSpan partitions.
	perPart = 2
	txnSpan = 3
	// eosInputMax bounds the pipeline's input, so that it catches up within the run.
	eosInputMax = 3000
	// clientOpTimeout bounds a flush or an EndTxn; past it the client is made anew.
	clientOpTimeout = 10 * time.Second
	// metadataMinAge: a produce that failed with KAFKA_STORAGE_ERROR (a disk fault) is
	// retried after a metadata refresh, which franz-go spaces by this (5 s by default,
	// past txnTimeout: every such fault would cost the transaction its timeout, and the
	// pipeline its input).
	metadataMinAge = 250 * time.Millisecond
)

var txnTopics = []string{txnTopic, eosIn, eosOut}

// told is what a transactional producer was told of one of its transactions.
type told int

const (
	abandoned told = iota // never ended: the client was closed before its EndTxn
	committed             // EndTxn(commit) answered without error
	aborted               // EndTxn(abort) answered without error
	unknown               // EndTxn failed or was cut off: the outcome is not known
)

func (t told) String() string {
	return [...]string{"abandoned", "committed", "aborted", "unknown"}[t]
}

// txnRec is one transaction of a transactional producer: its key (every record's), the
// partitions it wrote, whether the producer asked to commit it and what it was told.
type txnRec struct {
	key    string
	parts  []int32
	commit bool
	told   told
	err    string
}

func (r *txnRec) records() int { return len(r.parts) * perPart }

// txnWorkload is the run's transactional clients.
type txnWorkload struct {
	t    *testing.T
	addr []string

	stop    atomic.Bool
	wg      sync.WaitGroup // transactional producers and the input producer
	mwg     sync.WaitGroup // pipeline members
	mstop   atomic.Bool
	resets  atomic.Int64 // clients made anew after an error
	mu      sync.Mutex
	txns    []*txnRec
	inputs  atomic.Int64 // input records produced (acknowledged)
	eosTxns atomic.Int64 // pipeline transactions committed
}

func newTxnWorkload(t *testing.T, addr []string) *txnWorkload {
	return &txnWorkload{t: t, addr: addr}
}

func (tw *txnWorkload) start() {
	for i := range txnProducers {
		tw.wg.Add(1)
		go func() {
			defer tw.wg.Done()
			tw.produceTxns(fmt.Sprintf("chaos-txn-%d", i))
		}()
	}
	tw.wg.Add(1)
	go func() {
		defer tw.wg.Done()
		tw.produceInput()
	}()
	for i := range eosMembers {
		tw.mwg.Add(1)
		go func() {
			defer tw.mwg.Done()
			tw.member(fmt.Sprintf("chaos-eos-%d", i))
		}()
	}
}

// stopProducers ends the transactional producers (each after the transaction it is in)
// and the pipeline's input.
func (tw *txnWorkload) stopProducers() {
	tw.stop.Store(true)
	tw.wg.Wait()
}

// stopPipeline ends the pipeline's members (each after the transaction it is in).
func (tw *txnWorkload) stopPipeline() {
	tw.stop.Store(true)
	tw.mstop.Store(true)
	tw.wg.Wait()
	tw.mwg.Wait()
}

func (tw *txnWorkload) ledger() []*txnRec {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	out := make([]*txnRec, len(tw.txns))
	for i, r := range tw.txns {
		c := *r
		out[i] = &c
	}
	return out
}

// produceTxns runs one transactional producer until the workload stops: transactions
// of perPart records on each of txnSpan partitions, every third aborted on purpose (and
// any whose records failed).
func (tw *txnWorkload) produceTxns(id string) {
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(tw.addr...), kgo.TransactionalID(id), kgo.TransactionTimeout(txnTimeout),
			kgo.DefaultProduceTopic(txnTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryBackoffFn(backoff),
			kgo.MetadataMinAge(metadataMinAge))
		if err != nil {
			tw.t.Errorf("transactional client %s: %v", id, err)
			return nil
		}
		return cl
	}
	cl := newClient()
	if cl == nil {
		return
	}
	reset := func() {
		cl.Close()
		tw.resets.Add(1)
		cl = newClient()
	}
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for seq := 0; !tw.stop.Load() && cl != nil; seq++ {
		r := &txnRec{key: fmt.Sprintf("%s/%d", id, seq)}
		for j := range txnSpan {
			r.parts = append(r.parts, int32((seq+j)%txnPartitions))
		}
		tw.mu.Lock()
		tw.txns = append(tw.txns, r)
		tw.mu.Unlock()
		if err := cl.BeginTransaction(); err != nil {
			tw.set(r, abandoned, false, err)
			reset()
			continue
		}
		var failed atomic.Bool
		for _, p := range r.parts {
			for k := range perPart {
				cl.Produce(context.Background(), &kgo.Record{Partition: p, Key: []byte(r.key), Value: []byte(strconv.Itoa(int(p)*perPart + k))},
					func(_ *kgo.Record, err error) {
						if err != nil {
							failed.Store(true)
						}
					})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), clientOpTimeout)
		err := cl.Flush(ctx)
		cancel()
		if err != nil {
			tw.set(r, abandoned, false, err)
			reset()
			continue
		}
		commit := seq%3 != 2 && !failed.Load()
		ctx, cancel = context.WithTimeout(context.Background(), clientOpTimeout)
		err = cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
		cancel()
		switch {
		case err != nil:
			tw.set(r, unknown, commit, err)
			reset()
		case commit:
			tw.set(r, committed, true, nil)
		default:
			tw.set(r, aborted, false, nil)
		}
	}
}

func (tw *txnWorkload) set(r *txnRec, t told, commit bool, err error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	r.told, r.commit = t, commit
	if err != nil {
		r.err = err.Error()
	}
}

// produceInput fills the pipeline's input with records keyed and valued "in-<n>", an
// idempotent producer's, paced so that the pipeline runs through the fault phase.
func (tw *txnWorkload) produceInput() {
	cl, err := kgo.NewClient(kgo.SeedBrokers(tw.addr...), kgo.DefaultProduceTopic(eosIn), kgo.RetryBackoffFn(backoff),
		kgo.MetadataMinAge(metadataMinAge))
	if err != nil {
		tw.t.Errorf("input producer: %v", err)
		return
	}
	defer cl.Close()
	sem := make(chan struct{}, 8)
	tick := time.NewTicker(2 * time.Millisecond) // load pacing, not a wait for anything
	defer tick.Stop()
	for n := 0; n < eosInputMax && !tw.stop.Load(); n++ {
		<-tick.C
		sem <- struct{}{}
		v := []byte("in-" + strconv.Itoa(n))
		cl.Produce(context.Background(), &kgo.Record{Key: v, Value: v}, func(_ *kgo.Record, err error) {
			<-sem
			if err == nil {
				tw.inputs.Add(1)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		tw.t.Errorf("input producer flush: %v", err)
	}
}

// member runs one consume-transform-produce member until the pipeline stops: each poll's
// records copied to eosOut with the group's offsets in one transaction, every fifth
// transaction aborted on purpose (and redone by whoever owns the records next).
func (tw *txnWorkload) member(id string) {
	newSession := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(tw.addr...), kgo.TransactionalID(id),
			kgo.TransactionTimeout(txnTimeout), kgo.ConsumerGroup(eosGroup), kgo.ConsumeTopics(eosIn),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(sessionTimeout), kgo.RebalanceTimeout(rebalanceTimeout),
			kgo.HeartbeatInterval(300*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond),
			kgo.DefaultProduceTopic(eosOut), kgo.RetryBackoffFn(backoff), kgo.MetadataMinAge(metadataMinAge))
		if err != nil {
			tw.t.Errorf("pipeline member %s: %v", id, err)
			return nil
		}
		return s
	}
	s := newSession()
	if s == nil {
		return
	}
	reset := func() {
		s.Close()
		tw.resets.Add(1)
		s = newSession()
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	for txns := 1; !tw.mstop.Load() && s != nil; {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		fs := s.PollRecords(ctx, 50)
		cancel()
		if fs.NumRecords() == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			reset()
			continue
		}
		var failed atomic.Bool
		fs.EachRecord(func(r *kgo.Record) {
			s.Produce(context.Background(), &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(true)
				}
			})
		})
		ctx, cancel = context.WithTimeout(context.Background(), clientOpTimeout)
		err := s.Client().Flush(ctx)
		cancel()
		if err != nil {
			reset()
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), clientOpTimeout)
		ok, err := s.End(ctx, kgo.TransactionEndTry(txns%5 != 0 && !failed.Load()))
		cancel()
		txns++
		if err != nil {
			reset()
			continue
		}
		if ok {
			tw.eosTxns.Add(1)
		}
	}
}

// waitPipeline waits until the pipeline's group has committed the input's end of every
// partition.
func waitPipeline(ctx context.Context, adm *kadm.Client, within time.Duration) error {
	// Polling committed offsets: no event to wait on.
	return testwait.Until(within, 100*time.Millisecond, func() error {
		ends, err := adm.ListEndOffsets(ctx, eosIn)
		if err != nil {
			return err
		}
		offs, err := adm.FetchOffsets(ctx, eosGroup)
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			if c, ok := offs.Lookup(eosIn, o.Partition); !ok || c.At < o.Offset {
				behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", eosIn, o.Partition, c.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return errors.New(strings.Join(behind, "; "))
		}
		return nil
	})
}

// waitSettled waits until no transaction hangs: every partition's last stable offset
// is its high watermark, and no transactional id is in a running state. Returns the
// high watermarks.
func waitSettled(ctx context.Context, adm *kadm.Client, topics []string, within time.Duration) (kadm.ListedOffsets, error) {
	var ends kadm.ListedOffsets
	// Polling the broker's state (the coordinator may be finishing markers, or aborting
	// a transaction its client left at its timeout): no event to wait on.
	err := testwait.Until(within, 50*time.Millisecond, func() error {
		hw, err := adm.ListEndOffsets(ctx, topics...)
		if err != nil {
			return err
		}
		lso, err := adm.ListCommittedOffsets(ctx, topics...)
		if err != nil {
			return err
		}
		var hanging []string
		hw.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				hanging = append(hanging, fmt.Sprintf("%s/%d: %v", o.Topic, o.Partition, o.Err))
				return
			}
			if l, ok := lso.Lookup(o.Topic, o.Partition); !ok || l.Err != nil || l.Offset != o.Offset {
				hanging = append(hanging, fmt.Sprintf("%s/%d last stable %d, high watermark %d", o.Topic, o.Partition, l.Offset, o.Offset))
			}
		})
		txns, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			return err
		}
		for _, tx := range txns.Sorted() {
			switch tx.State {
			case "Empty", "CompleteCommit", "CompleteAbort", "Dead":
			default:
				hanging = append(hanging, fmt.Sprintf("transactional id %s %s", tx.TxnID, tx.State))
			}
		}
		if len(hanging) > 0 {
			sort.Strings(hanging)
			return errors.New(strings.Join(hanging, "; "))
		}
		ends = hw
		return nil
	})
	return ends, err
}

// readTopic reads topic from its start to ends at the given isolation, returning its
// data records (the markers, kept to see each partition's end, are dropped).
func readTopic(addr []string, topic string, ends kadm.ListedOffsets, readCommitted bool) ([]*kgo.Record, error) {
	want := map[int32]int64{}
	parts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic && o.Offset > 0 {
			want[o.Partition] = o.Offset
			parts[o.Partition] = kgo.NewOffset().At(0)
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.RetryBackoffFn(backoff))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("read %s (read_committed %v): partitions not read to their end: %v", topic, readCommitted, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out, nil
}

// checkTxns is invariant 6 for the transactional producers: read at read_committed,
// every transaction told committed is there exactly once and whole; one told aborted,
// or never ended, or whose EndTxn(abort) failed, is not there at all; one whose
// EndTxn(commit) failed is all or nothing. It returns the violations and the counts by
// what the producers were told.
func checkTxns(ledger []*txnRec, recs []*kgo.Record) ([]string, map[told]int) {
	type at struct {
		part int32
		v    string
	}
	seen := map[string][]at{}
	for _, r := range recs {
		seen[string(r.Key)] = append(seen[string(r.Key)], at{r.Partition, string(r.Value)})
	}
	var out []string
	counts := map[told]int{}
	for _, tx := range ledger {
		counts[tx.told]++
		got := seen[tx.key]
		delete(seen, tx.key)
		whole := len(got) == tx.records()
		if whole {
			want := map[at]bool{}
			for _, p := range tx.parts {
				for k := range perPart {
					want[at{p, strconv.Itoa(int(p)*perPart + k)}] = true
				}
			}
			for _, g := range got {
				if !want[g] {
					whole = false // twice, or on another partition
				}
				delete(want, g)
			}
		}
		desc := fmt.Sprintf("transaction %s (told %s, asked commit %v, error %q over partitions %v)", tx.key, tx.told, tx.commit, tx.err, tx.parts)
		switch {
		case tx.told == committed && !whole:
			out = append(out, fmt.Sprintf("invariant 6: %s: %d records at read_committed, want its %d once each: %v", desc, len(got), tx.records(), got))
		case !tx.commit && len(got) > 0:
			out = append(out, fmt.Sprintf("invariant 6: %s: never asked to commit, %d of its records visible at read_committed: %v", desc, len(got), got))
		case tx.told == unknown && len(got) > 0 && !whole:
			out = append(out, fmt.Sprintf("invariant 6: %s: outcome unknown, %d of its %d records visible at read_committed (not all or nothing): %v", desc, len(got), tx.records(), got))
		}
	}
	for k, got := range seen {
		out = append(out, fmt.Sprintf("invariant 6: %d records of a transaction %s no producer began: %v", len(got), k, got))
	}
	sort.Strings(out)
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... and %d more", len(out)-20))
	}
	return out, counts
}

// checkPipeline is invariant 6 for the pipeline: every input record is in its output
// exactly once at read_committed, nothing else is, and the group's offsets are at the
// input's end.
func checkPipeline(in, outRecs []*kgo.Record, ends kadm.ListedOffsets, offs kadm.OffsetResponses) []string {
	var out []string
	count := map[string]int{}
	for _, r := range outRecs {
		count[string(r.Key)]++
	}
	missing, twice := 0, 0
	var examples []string
	for _, r := range in {
		k := string(r.Key)
		switch c := count[k]; {
		case c == 0:
			missing++
		case c > 1:
			twice++
		default:
			delete(count, k)
			continue
		}
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("%s×%d", k, count[k]))
		}
		delete(count, k)
	}
	if missing > 0 || twice > 0 {
		out = append(out, fmt.Sprintf("invariant 6: pipeline: of %d input records %d missing from %s and %d there more than once at read_committed (e.g. %s)",
			len(in), missing, eosOut, twice, strings.Join(examples, " ")))
	}
	if len(count) > 0 {
		out = append(out, fmt.Sprintf("invariant 6: pipeline: %d records in %s that are in no input record", len(count), eosOut))
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != eosIn || o.Offset == 0 {
			return
		}
		if c, ok := offs.Lookup(eosIn, o.Partition); !ok || c.At != o.Offset {
			out = append(out, fmt.Sprintf("invariant 6: pipeline: group %s's offset of %s/%d is %d, the input's end %d", eosGroup, eosIn, o.Partition, c.At, o.Offset))
		}
	})
	return out
}

// waitGroup waits until group is Stable with members members.
func waitGroup(ctx context.Context, adm *kadm.Client, group string, members int, within time.Duration) error {
	// Polling the broker's state: no event to wait on.
	return testwait.Until(within, 50*time.Millisecond, func() error {
		ds, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		if g := ds[group]; g.Err != nil || g.State != "Stable" || len(g.Members) != members {
			return fmt.Errorf("%s=%s/%d members (err %v)", group, g.State, len(g.Members), g.Err)
		}
		return nil
	})
}

// checkTransactions is invariant 6, once every transactional client has stopped: no
// transaction hangs (within the transaction timeout, by which the coordinator aborts
// what a closed client left open, and the markers' time), then the producers' and the
// pipeline's checks. It returns a summary of what the producers were told.
func checkTransactions(t *testing.T, ctx context.Context, adm *kadm.Client, addr []string, tw *txnWorkload) string {
	all := append(append([]string(nil), topics...), txnTopics...)
	bound := 2*txnTimeout + 10*time.Second
	ends, err := waitSettled(ctx, adm, all, bound)
	if err != nil {
		t.Errorf("invariant 6: transactions hang %v after every client stopped: %v", bound, err)
		return "unchecked"
	}
	ledger := tw.ledger()
	recs, err := readTopic(addr, txnTopic, ends, true)
	if err != nil {
		t.Errorf("invariant 6: %v", err)
	}
	vs, counts := checkTxns(ledger, recs)
	for _, v := range vs {
		t.Error(v)
	}
	if counts[committed] == 0 {
		t.Errorf("invariant 6: no transaction committed: the run checked nothing (%v)", counts)
	}
	in, err := readTopic(addr, eosIn, ends, false)
	if err != nil {
		t.Errorf("invariant 6: %v", err)
	}
	out, err := readTopic(addr, eosOut, ends, true)
	if err != nil {
		t.Errorf("invariant 6: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, eosGroup)
	if err != nil {
		t.Errorf("invariant 6: fetch offsets %s: %v", eosGroup, err)
	}
	for _, v := range checkPipeline(in, out, ends, offs) {
		t.Error(v)
	}
	return fmt.Sprintf("%d committed, %d aborted, %d unknown, %d abandoned; pipeline %d inputs in %d transactions; %d clients made anew",
		counts[committed], counts[aborted], counts[unknown], counts[abandoned], len(in), tw.eosTxns.Load(), tw.resets.Load())
}
