package partition

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/internal/testwait"
)

// solo is one partition actor over dir, for the producer-state and orphan tests.
type solo struct {
	t   *testing.T
	sys *actor.System
	pid *actor.PID
}

func startSolo(t *testing.T, cfg PartitionConfig) *solo {
	t.Helper()
	if cfg.Topic == "" {
		cfg.Topic = "t"
	}
	cfg.SegmentBytes, cfg.FlushMessages, cfg.Log = 1<<20, 1, zerolog.Nop()
	s := &solo{t: t, sys: actor.NewSystem(zerolog.Nop())}
	s.pid = s.sys.Spawn(PartitionProps(cfg))
	return s
}

func (s *solo) stop() {
	s.t.Helper()
	if err := s.sys.Poison(s.pid, 5*time.Second); err != nil {
		s.t.Fatal(err)
	}
	s.sys.Shutdown()
}

func (s *solo) ask(msg func(actor.Promise) any) any {
	s.t.Helper()
	w := s.sys.NewWaiter()
	s.sys.Send(s.pid, msg(w.Promise))
	v, ok := w.Wait(10 * time.Second)
	if !ok {
		s.t.Fatal("not answered")
	}
	return v
}

// append writes raw; verified stands for the coordinator's verification of a
// transactional batch.
func (s *solo) append(raw []byte, verified bool) *Produced {
	s.t.Helper()
	b, perr := validateBatch(raw, 1<<20)
	if perr != nil {
		s.t.Fatal(perr.msg)
	}
	return s.ask(func(p actor.Promise) any {
		if verified {
			return VerifiedAppendMessage(b, 0, false, p)
		}
		return AppendMessage(b, p)
	}).(*Produced)
}

func (s *solo) producers() map[int64]ProducerState {
	s.t.Helper()
	out := map[int64]ProducerState{}
	for _, p := range s.ask(ProducersMessage).(*ProducerStates).Producers {
		out[p.ProducerID] = p
	}
	return out
}

// committed is a read_committed read from 0: the LSO and the aborted transactions.
func (s *solo) committed() (int64, []AbortedTxn) {
	s.t.Helper()
	switch v := s.ask(func(p actor.Promise) any {
		return &readLog{committed: true, offset: 0, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: p}
	}).(type) {
	case *Fetched:
		return v.LastStableOffset, v.Aborted
	case *readPlan:
		defer dropRead(v)
		return v.out.LastStableOffset, v.out.Aborted
	default:
		s.t.Fatalf("read answered %T", v)
		return 0, nil
	}
}

// clock is a settable Now.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *clock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// TestProducerExpiry: a producer idle past producer.id.expiration.ms with no open
// transaction is forgotten, one with an open transaction is kept however idle; the
// entries and the LSO lag are published, and withdrawn when the actor stops.
func TestProducerExpiry(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(time.Now().UnixMilli())
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	s := startSolo(t, PartitionConfig{Dir: t.TempDir(), Now: clk.now, ProducerExpiration: time.Hour,
		ProducerExpiryCheck: 5 * time.Millisecond, Metrics: met})
	if r := s.append(testBatch(7, 0, 0, 1, 0, []byte("i")), false); r.ErrorCode != 0 {
		t.Fatalf("idempotent append: %+v", r)
	}
	if r := s.append(transactional(testBatch(8, 0, 0, 2, 0, []byte("t"))), true); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	lag := `
# HELP kaas_partition_lso_lag High watermark minus last stable offset of a partition this broker leads that has an open or undecided transaction (no series otherwise).
# TYPE kaas_partition_lso_lag gauge
kaas_partition_lso_lag{partition="0",topic="t"} 2
# HELP kaas_producer_state_entries Producer-state entries (idempotent and transactional producers) kept by the partitions this broker leads.
# TYPE kaas_producer_state_entries gauge
kaas_producer_state_entries 2
`
	// Published after the acknowledgement, when the high watermark moves: waited for.
	testwait.For(t, 5*time.Second, 5*time.Millisecond, func() error {
		return testutil.CollectAndCompare(met.producers, strings.NewReader(lag), "kaas_partition_lso_lag", "kaas_producer_state_entries")
	})
	clk.add(30 * time.Minute)
	if r := s.append(testBatch(9, 0, 0, 1, 0, []byte("j")), false); r.ErrorCode != 0 {
		t.Fatalf("idempotent append: %+v", r)
	}
	clk.add(31 * time.Minute) // 7 and 8 idle 61 min, 9 idle 31 min
	testwait.For(t, 5*time.Second, 5*time.Millisecond, func() error {
		ps := s.producers()
		if _, ok := ps[7]; ok || len(ps) != 2 {
			return fmt.Errorf("producers %v: want 8 (open transaction) and 9 (not idle long enough)", ps)
		}
		return nil
	})
	if ps := s.producers(); ps[8].TxnStartOffset != 1 {
		t.Fatalf("the open transaction's producer: %+v", ps[8])
	}
	if got := testutil.ToFloat64(met.producers.ExpiredEntries); got != 1 {
		t.Fatalf("expired counted %v", got)
	}
	s.stop()
	if err := testutil.CollectAndCompare(met.producers, strings.NewReader(`
# HELP kaas_producer_state_entries Producer-state entries (idempotent and transactional producers) kept by the partitions this broker leads.
# TYPE kaas_producer_state_entries gauge
kaas_producer_state_entries 0
`), "kaas_partition_lso_lag", "kaas_producer_state_entries"); err != nil {
		t.Fatalf("after the actor stopped: %v", err)
	}
}

// TestProducerStateBound: a new producer on a partition at producer.state.max.entries
// evicts the longest idle producer without an open transaction.
func TestProducerStateBound(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(time.Now().UnixMilli())
	met := NewMetrics(nil)
	s := startSolo(t, PartitionConfig{Dir: t.TempDir(), Now: clk.now, MaxProducers: 2, Metrics: met})
	defer s.stop()
	if r := s.append(transactional(testBatch(1, 0, 0, 1, 0, []byte("t"))), true); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	for _, pid := range []int64{2, 3, 4} {
		clk.add(time.Second)
		if r := s.append(testBatch(pid, 0, 0, 1, 0, []byte("i")), false); r.ErrorCode != 0 {
			t.Fatalf("producer %d: %+v", pid, r)
		}
	}
	ps := s.producers()
	if _, ok := ps[1]; !ok || len(ps) != 2 || ps[4].ProducerID != 4 {
		t.Fatalf("producers %v: want 1 (open transaction, never evicted) and 4 (the newest)", ps)
	}
	if got := testutil.ToFloat64(met.producers.EvictedEntries); got != 2 {
		t.Fatalf("evicted counted %v", got)
	}
}

// fakeCoordinator answers the orphan check: held says what it holds; until release is
// closed it answers nothing.
type fakeCoordinator struct {
	held    bool
	release chan struct{}
	mu      sync.Mutex
	asked   []OpenTxn
}

func (f *fakeCoordinator) checker() *TxnChecker {
	return &TxnChecker{
		Ask: func(_ actor.Context, q OpenTxn, reply actor.Promise) bool {
			f.mu.Lock()
			f.asked = append(f.asked, q)
			f.mu.Unlock()
			go func() {
				<-f.release
				reply.Resolve(f.held)
			}()
			return true
		},
		Held: func(v any) (bool, bool) { b, ok := v.(bool); return b, ok },
	}
}

// TestOrphanTransactionAborted builds a hanging transaction (a transactional batch
// written through the partition with no coordinator record) and restarts the
// partition: the coordinator, asked, holds no such transaction, so the partition writes
// the abort marker itself and the LSO moves past it. Until the answer, a batch that
// would join the suspect transaction is refused (CONCURRENT_TRANSACTIONS).
func TestOrphanTransactionAborted(t *testing.T) {
	dir := t.TempDir()
	s := startSolo(t, PartitionConfig{Dir: dir})
	if r := s.append(transactional(testBatch(5, 3, 0, 2, 0, []byte("t"))), true); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	if lso, _ := s.committed(); lso != 0 {
		t.Fatalf("open transaction: lso %d, want 0", lso)
	}
	s.stop()

	f := &fakeCoordinator{release: make(chan struct{})}
	met := NewMetrics(nil)
	s = startSolo(t, PartitionConfig{Dir: dir, Txns: f.checker(), Metrics: met})
	defer s.stop()
	if r := s.append(transactional(testBatch(5, 3, 2, 1, 0, []byte("u"))), true); r.ErrorCode != kerr.ConcurrentTransactions.Code {
		t.Fatalf("a batch joining the suspect transaction: %+v, want CONCURRENT_TRANSACTIONS", r)
	}
	if lso, _ := s.committed(); lso != 0 {
		t.Fatalf("before the answer: lso %d, want 0", lso)
	}
	f.mu.Lock()
	asked := append([]OpenTxn(nil), f.asked...)
	f.mu.Unlock()
	if len(asked) != 1 || asked[0] != (OpenTxn{Topic: "t", Partition: 0, ProducerID: 5, ProducerEpoch: 3}) {
		t.Fatalf("asked %+v", asked)
	}
	close(f.release)
	testwait.For(t, 5*time.Second, 5*time.Millisecond, func() error {
		if lso, _ := s.committed(); lso != 3 {
			return fmt.Errorf("lso %d, want 3 (the batch and its abort marker)", lso)
		}
		return nil
	})
	if _, aborted := s.committed(); len(aborted) != 1 || aborted[0] != (AbortedTxn{ProducerID: 5, FirstOffset: 0}) {
		t.Fatalf("aborted transactions %+v", aborted)
	}
	if ps := s.producers(); ps[5].TxnStartOffset != -1 {
		t.Fatalf("producer 5 after the orphan's abort: %+v", ps[5])
	}
	// No transaction open: no LSO lag series.
	if err := testutil.CollectAndCompare(met.producers, strings.NewReader(`
# HELP kaas_producer_state_entries Producer-state entries (idempotent and transactional producers) kept by the partitions this broker leads.
# TYPE kaas_producer_state_entries gauge
kaas_producer_state_entries 1
`), "kaas_partition_lso_lag", "kaas_producer_state_entries"); err != nil {
		t.Fatal(err)
	}
}

// TestOrphanCheckHeldKeepsTheTransaction: a transaction its coordinator holds is left
// to it, and the producer's batches join it again once the answer came.
func TestOrphanCheckHeldKeepsTheTransaction(t *testing.T) {
	dir := t.TempDir()
	s := startSolo(t, PartitionConfig{Dir: dir})
	if r := s.append(transactional(testBatch(5, 3, 0, 2, 0, []byte("t"))), true); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	s.stop()
	f := &fakeCoordinator{held: true, release: make(chan struct{})}
	close(f.release)
	s = startSolo(t, PartitionConfig{Dir: dir, Txns: f.checker()})
	defer s.stop()
	testwait.For(t, 5*time.Second, 5*time.Millisecond, func() error {
		if r := s.append(transactional(testBatch(5, 3, 2, 1, 0, []byte("u"))), false); r.ErrorCode != 0 {
			return fmt.Errorf("the producer's next batch: %+v", r)
		}
		return nil
	})
	if lso, _ := s.committed(); lso != 0 {
		t.Fatalf("lso %d, want 0: the transaction is still open", lso)
	}
}
