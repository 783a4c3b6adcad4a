package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// TestTxnClientCommitAndAbort: franz-go's transactional producer end to end on a broker
// alone (the coordinator, markers on the partitions, read_committed): a committed
// transaction is read, an aborted one is not, and a read_uncommitted reader sees both.
func TestTxnClientCommitAndAbort(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "eos", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("eos-producer"),
		kgo.DefaultProduceTopic("eos"), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round, commit := range []bool{true, false, true} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			r := &kgo.Record{Value: []byte(fmt.Sprintf("r%d-%d", round, i)), Partition: int32(i % 2)}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("round %d produce: %v", round, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("round %d end (commit %v): %v", round, commit, err)
		}
	}
	read := func(level kgo.IsolationLevel, want int) map[string]bool {
		c, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("eos"), kgo.FetchIsolationLevel(level),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := map[string]bool{}
		for len(got) < want {
			fs := c.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("read %d of %d records: %v", len(got), want, err)
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		}
		return got
	}
	committed := read(kgo.ReadCommitted(), 8)
	for v := range committed {
		if v[:2] == "r1" {
			t.Fatalf("read_committed saw the aborted record %s", v)
		}
	}
	if all := read(kgo.ReadUncommitted(), 12); len(all) != 12 {
		t.Fatalf("read_uncommitted: %d records", len(all))
	}
}

// TestTxnGroupTransactSession: consume-transform-produce with franz-go's
// GroupTransactSession (KIP-447): each input record is copied to the output in the same
// transaction as its group offset; the output read_committed holds every input record
// once, and the group's committed offsets end at the input's end.
func TestTxnGroupTransactSession(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "in", 2)
	createTopic(t, b.Addr(), "out", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 40
	src, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range n {
		if err := src.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i)), Partition: int32(i % 2)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("etl"),
		kgo.ConsumerGroup("etl-group"), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("out"),
		kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	copied := 0
	for copied < n {
		fs := sess.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("copied %d of %d: %v", copied, n, err)
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, &kgo.Record{Value: r.Value, Partition: r.Partition})
		})
		for _, r := range recs {
			sess.Produce(ctx, r, nil)
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Fatalf("end: %v", err)
		}
		if committed {
			copied += len(recs)
		}
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]int{}
	total := 0
	for total < n {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d: %v", total, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; total++ })
	}
	for v, k := range seen {
		if k != 1 {
			t.Fatalf("%s read %d times", v, k)
		}
	}
	// The offsets are applied by the commit marker, which follows EndTxn's answer.
	adm := kadm.NewClient(src)
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		offs, err := adm.FetchOffsets(ctx, "etl-group")
		if err != nil {
			return err
		}
		sum := int64(0)
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		if sum != n {
			return fmt.Errorf("group offsets sum to %d, want %d", sum, n)
		}
		return nil
	})
}

// concurrentLog counts franz-go's CONCURRENT_TRANSACTIONS retries (each one a backoff of
// 20 ms or more) in its debug log.
type concurrentLog struct {
	mu sync.Mutex
	n  int
}

func (l *concurrentLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *concurrentLog) Log(_ kgo.LogLevel, msg string, kv ...any) {
	if strings.Contains(fmt.Sprint(msg, kv), "CONCURRENT_TRANSACTIONS") {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
}

// TestTxnClientBackToBackNoBackoff: a franz-go producer committing transactions back to
// back is never answered CONCURRENT_TRANSACTIONS (and never backs off): its reload of the
// producer id after its first EndTxn v5 (KIP-890 part 2) and each next transaction's
// implicit add come while the last transaction's markers are written, and wait for its
// Complete* at the coordinator instead.
func TestTxnClientBackToBackNoBackoff(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "b2b", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logged := &concurrentLog{}
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("b2b-producer"),
		kgo.DefaultProduceTopic("b2b"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.WithLogger(logged))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round := range 20 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		rs := []*kgo.Record{{Value: []byte("a")}, {Value: []byte("b")}}
		if err := p.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("round %d produce: %v", round, err)
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("round %d commit: %v", round, err)
		}
	}
	logged.mu.Lock()
	defer logged.mu.Unlock()
	if logged.n > 0 {
		t.Fatalf("the producer was answered CONCURRENT_TRANSACTIONS %d times", logged.n)
	}
}
