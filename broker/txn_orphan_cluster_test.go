package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// leaderOf is the broker that b says leads partition p of topic.
func leaderOf(ctx context.Context, t *testing.T, b *broker.Broker, topic string, p int32) (int32, error) {
	t.Helper()
	md, err := kadm.NewClient(directClient(t, b.Addr())).Metadata(ctx, topic)
	if err != nil {
		return -1, err
	}
	pd, ok := md.Topics[topic].Partitions[p]
	if !ok {
		return -1, fmt.Errorf("no partition %d of %s", p, topic)
	}
	return pd.Leader, nil
}

// stableEnd waits until partition p of topic has its last stable offset at its end,
// want.
func stableEnd(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, p int32, want int64) {
	t.Helper()
	testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return err
		}
		h, _ := hw.Lookup(topic, p)
		l, _ := lso.Lookup(topic, p)
		if h.Err != nil || l.Err != nil || h.Offset != want || l.Offset != want {
			return fmt.Errorf("partition %d: end %d (%v), last stable %d (%v), want both %d", p, h.Offset, h.Err, l.Offset, l.Err, want)
		}
		return nil
	})
}

// TestClusterTxnOrphanAborted: in a two-broker cluster a transaction is left open on a
// partition, then its coordinator's state is lost (the id files and every broker's
// journal removed while the cluster is down). When the partition opens again, no
// coordinator holds the transaction: the check reads that from the shared volume, the
// partition writes the abort marker itself, and its last stable offset moves past it.
func TestClusterTxnOrphanAborted(t *testing.T) {
	bs := txnCluster(t, 2, "orph", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := groupOf(0, 2, "orphan")
	p, err := kgo.NewClient(seedsOf(bs), kgo.TransactionalID(id), kgo.DefaultProduceTopic("orph"),
		kgo.TransactionTimeout(10*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("lost-%d", part)), Partition: part}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	for _, b := range bs {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.Stop(sctx)
		scancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	cfgs := []config.Config{bs[0].Config(), bs[1].Config()}
	data := cfgs[0].DataDir
	for _, dir := range []string{filepath.Join(data, "transactions"), filepath.Join(data, "__cluster", "__transactions_journal")} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}

	bs = bs[:0]
	for _, c := range cfgs {
		bs = append(bs, brokertest.StartWith(t, c))
	}
	waitReady(t, bs...)
	adm := kadm.NewClient(mustClient(t, bs[1].Addr()))
	for part := range int32(2) {
		stableEnd(ctx, t, adm, "orph", part, 2) // the record and the orphan's abort marker
	}
	if got := readValues(ctx, t, seedsOf(bs), "orph", kgo.ReadUncommitted(), 2); got["lost-0"] != 1 || got["lost-1"] != 1 {
		t.Fatalf("read_uncommitted: %v", got)
	}
}

// TestClusterTxnHeldNotAborted: a transaction open on a partition whose leader stops
// and comes back (the partition moves to the other broker and back, opening twice) is
// held by its coordinator on the other broker: neither opening aborts it, a batch of the
// same transaction written after it is taken once the check has answered, and the
// commit commits both.
func TestClusterTxnHeldNotAborted(t *testing.T) {
	bs := txnCluster(t, 2, "held", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A partition broker 0 leads; the id's coordinator is broker 1.
	part := int32(-1)
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		for q := range int32(2) {
			if l, err := leaderOf(ctx, t, bs[0], "held", q); err == nil && l == 0 {
				part = q
				return nil
			}
		}
		return fmt.Errorf("broker 0 leads no partition of held yet")
	})
	id := groupOf(1, 2, "held")
	p, err := kgo.NewClient(seedsOf(bs), kgo.TransactionalID(id), kgo.DefaultProduceTopic("held"),
		kgo.TransactionTimeout(10*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("first"), Partition: part}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := bs[0].Stop(sctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if l, err := leaderOf(ctx, t, bs[1], "held", part); err != nil || l != 1 {
			return fmt.Errorf("broker 1 says partition %d is led by %d (%v), want 1", part, l, err)
		}
		return nil
	})
	bs[0] = brokertest.StartWith(t, bs[0].Config())
	waitReady(t, bs...)
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, b := range bs {
			if l, err := leaderOf(ctx, t, b, "held", part); err != nil || l != 0 {
				return fmt.Errorf("partition %d led by %d (%v), want 0 again", part, l, err)
			}
		}
		return nil
	})
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("second"), Partition: part}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := readValues(ctx, t, seedsOf(bs), "held", kgo.ReadCommitted(), 2)
	if got["first"] != 1 || got["second"] != 1 {
		t.Fatalf("read_committed %v: want first and second once each", got)
	}
	stableEnd(ctx, t, kadm.NewClient(mustClient(t, bs[1].Addr())), "held", part, 3) // two records, the commit marker
}
