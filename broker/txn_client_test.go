package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
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
