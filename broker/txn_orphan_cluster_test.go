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

	"kaas/actors/journal"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
	"kaas/logs/logtest"
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

// orphanedCluster runs a two-broker cluster with topic (two partitions), leaves a
// transaction open on both partitions, stops the brokers and removes the coordinators'
// state (the id files and every broker's journal): the transaction is an orphan. It
// returns the brokers' configs, to start them again.
func orphanedCluster(ctx context.Context, t *testing.T, topic string) []config.Config {
	t.Helper()
	bs := txnCluster(t, 2, topic, 2)
	id := groupOf(0, 2, "orphan")
	p, err := kgo.NewClient(seedsOf(bs), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic),
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
	return cfgs
}

// TestClusterTxnOrphanAborted: in a two-broker cluster a transaction is left open on a
// partition, then its coordinator's state is lost (the id files and every broker's
// journal removed while the cluster is down). When the partition opens again, no
// coordinator holds the transaction: the check reads that from the shared volume, the
// partition writes the abort marker itself, and its last stable offset moves past it.
func TestClusterTxnOrphanAborted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var bs []*broker.Broker
	for _, c := range orphanedCluster(ctx, t, "orph") {
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

// TestClusterTxnOrphanCheckFailsClosed: the same orphan, with a damaged segment in a
// broker's transactions journal on the volume (a broker beyond the cluster's size, which
// never replays it): the damage could hide the newest record of any id, so the check
// answers nothing and the partitions abort nothing; once the segment is gone the orphan
// is aborted.
func TestClusterTxnOrphanCheckFailsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfgs := orphanedCluster(ctx, t, "closed")
	damaged := filepath.Join(cfgs[0].DataDir, "__cluster", "__transactions_journal", "node-7")
	if err := os.MkdirAll(damaged, 0o755); err != nil {
		t.Fatal(err)
	}
	var seg []byte
	for seq, rec := range []string{`{"id":"x","producer_id":1000,"state":0,"version":1}`, `{"id":"x","producer_id":1000,"state":0,"version":2}`} {
		if seq == 1 {
			seg = append(seg, 0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13) // a damaged range
		}
		f := journal.AppendRecord(journal.StartFrame(nil), []byte(rec))
		journal.FinishFrame(f, uint64(seq+1))
		seg = append(seg, f...)
	}
	if err := os.WriteFile(filepath.Join(damaged, journal.SegmentName(1)), seg, 0o600); err != nil {
		t.Fatal(err)
	}
	var bs []*broker.Broker
	var sinks []*logtest.Sink
	for _, c := range cfgs {
		b, sink, err := brokertest.StartLogged(t, c)
		if err != nil {
			t.Fatal(err)
		}
		bs, sinks = append(bs, b), append(sinks, sink)
	}
	waitReady(t, bs...)
	count := func(event string) int {
		n := 0
		for _, s := range sinks {
			n += s.Count(event)
		}
		return n
	}
	// The partitions ask, and ask again, and every scan is left without an answer.
	testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := count("transaction_orphan_check_unanswered"); n < 4 {
			return fmt.Errorf("%d unanswered checks logged, want 4", n)
		}
		return nil
	})
	if n := count("partition_orphan_transaction_aborted"); n != 0 {
		t.Fatalf("%d orphans aborted on a volume that could not be read whole", n)
	}
	adm := kadm.NewClient(mustClient(t, bs[1].Addr()))
	lso, err := adm.ListCommittedOffsets(ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset != 0 {
			t.Fatalf("partition %d: last stable offset %d (%v), want 0: the transaction open", o.Partition, o.Offset, o.Err)
		}
	})
	if err := os.RemoveAll(damaged); err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		stableEnd(ctx, t, adm, "closed", part, 2)
	}
}
