package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
	"kaas/registry"
)

// txnCluster starts a static cluster of n brokers with topic (parts partitions, one
// replica) and waits until every broker answers the same leaders, every broker leading
// some.
func txnCluster(t *testing.T, n int, topic string, parts int32) []*broker.Broker {
	t.Helper()
	cfgs := clusterConfigs(t, n)
	var bs []*broker.Broker
	for _, c := range cfgs {
		bs = append(bs, brokertest.StartWith(t, c))
	}
	waitReady(t, bs...)
	adm := kadm.NewClient(mustClient(t, bs[0].Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end, _ := ctx.Deadline()
	testwait.For(t, time.Until(end), 50*time.Millisecond, func() error {
		resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
		if err != nil || (resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS")) {
			return fmt.Errorf("create topic: %v %v", err, resp.Err)
		}
		return nil
	})
	testwait.For(t, time.Until(end), 20*time.Millisecond, func() error {
		var first map[int32]int32
		for _, b := range bs {
			md, err := kadm.NewClient(directClient(t, b.Addr())).Metadata(ctx, topic)
			if err != nil {
				return err
			}
			got := map[int32]int32{}
			for _, p := range md.Topics[topic].Partitions {
				got[p.Partition] = p.Leader
			}
			if first == nil {
				first = got
			} else if fmt.Sprint(first) != fmt.Sprint(got) {
				return fmt.Errorf("brokers answer leaders %v and %v", first, got)
			}
		}
		leaders := map[int32]bool{}
		for _, l := range first {
			leaders[l] = true
		}
		if len(first) != int(parts) || len(leaders) != n {
			return fmt.Errorf("leaders %v: want every one of %d brokers leading some of %d partitions", first, n, parts)
		}
		return nil
	})
	return bs
}

// seedsOf is every broker's address.
func seedsOf(bs []*broker.Broker) kgo.Opt {
	var addrs []string
	for _, b := range bs {
		addrs = append(addrs, b.Addr())
	}
	return kgo.SeedBrokers(addrs...)
}

// txnCoordinatorOf asks broker b which broker coordinates transactional id id.
func txnCoordinatorOf(t *testing.T, b *broker.Broker, id string) (int32, int16) {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1
	req.CoordinatorKey = id
	req.CoordinatorKeys = []string{id}
	r, err := directClient(t, b.Addr()).SeedBrokers()[0].Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.FindCoordinatorResponse)
	if len(resp.Coordinators) == 1 {
		return resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
	}
	return resp.NodeID, resp.ErrorCode
}

// readValues reads topic from the start at level until want distinct values have come.
func readValues(ctx context.Context, t *testing.T, seeds kgo.Opt, topic string, level kgo.IsolationLevel, want int) map[string]int {
	t.Helper()
	c, err := kgo.NewClient(seeds, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]int{}
	for len(got) < want {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d values of %s: %v", len(got), want, topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
	}
	return got
}

// TestClusterTxnAcrossBrokers: in a two-broker cluster a transactional producer whose
// coordinator is one broker writes to partitions both brokers lead; the coordinator's
// markers reach the other broker's partitions over the inter-broker listener. A
// committed transaction is read at read_committed, an aborted one is not, and the last
// stable offset of every partition reaches its end.
func TestClusterTxnAcrossBrokers(t *testing.T) {
	bs := txnCluster(t, 2, "eos", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for coord := int32(0); coord < 2; coord++ {
		id := groupOf(coord, 2, "txn")
		testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
			for _, b := range bs {
				if node, code := txnCoordinatorOf(t, b, id); code != 0 || node != coord {
					return fmt.Errorf("FindCoordinator(%s, transaction) = node %d code %d, want %d", id, node, code, coord)
				}
			}
			return nil
		})
		p, err := kgo.NewClient(seedsOf(bs), kgo.TransactionalID(id), kgo.DefaultProduceTopic("eos"),
			kgo.TransactionTimeout(20*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		for round, commit := range []bool{true, false, true} {
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				r := &kgo.Record{Value: []byte(fmt.Sprintf("c%d-r%d-%d", coord, round, i)), Partition: int32(i % 4)}
				if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("coordinator %d round %d produce: %v", coord, round, err)
				}
			}
			if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("coordinator %d round %d end (commit %v): %v", coord, round, commit, err)
			}
		}
		p.Close()
	}
	committed := readValues(ctx, t, seedsOf(bs), "eos", kgo.ReadCommitted(), 32)
	for v, n := range committed {
		if strings.Contains(v, "-r1-") || n != 1 {
			t.Fatalf("read_committed saw %s %d times (round 1 was aborted)", v, n)
		}
	}
	if all := readValues(ctx, t, seedsOf(bs), "eos", kgo.ReadUncommitted(), 48); len(all) != 48 {
		t.Fatalf("read_uncommitted: %d values, want 48", len(all))
	}
	// Every partition's last stable offset is its high watermark: no transaction hangs.
	adm := kadm.NewClient(mustClient(t, bs[1].Addr()))
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		hw, err := adm.ListEndOffsets(ctx, "eos")
		if err != nil {
			return err
		}
		lso, err := adm.ListCommittedOffsets(ctx, "eos")
		if err != nil {
			return err
		}
		var bad []string
		hw.Each(func(o kadm.ListedOffset) {
			if l, ok := lso.Lookup(o.Topic, o.Partition); !ok || l.Offset != o.Offset {
				bad = append(bad, fmt.Sprintf("p%d: lso %d hw %d", o.Partition, l.Offset, o.Offset))
			}
		})
		if len(bad) > 0 {
			return fmt.Errorf("open transactions left: %v", bad)
		}
		return nil
	})
}

// TestClusterTxnGroupOffsetsOnAnotherBroker: consume-transform-produce (KIP-447) where
// the transactional id's coordinator and the group's coordinator are different brokers:
// the group's pending offsets are verified with and ended by a coordinator on another
// broker. Every input record is in the output once, and the group's offsets end at the
// input's end.
func TestClusterTxnGroupOffsetsOnAnotherBroker(t *testing.T) {
	bs := txnCluster(t, 2, "in", 2)
	createOn := kadm.NewClient(mustClient(t, bs[0].Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	end, _ := ctx.Deadline()
	testwait.For(t, time.Until(end), 50*time.Millisecond, func() error {
		resp, err := createOn.CreateTopic(ctx, 2, 1, nil, "out")
		if err != nil || (resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS")) {
			return fmt.Errorf("create topic: %v %v", err, resp.Err)
		}
		return nil
	})
	const n = 40
	src, err := kgo.NewClient(seedsOf(bs), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range n {
		if err := src.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i)), Partition: int32(i % 2)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	id, group := groupOf(0, 2, "etl"), groupOf(1, 2, "etl-group")
	sess, err := kgo.NewGroupTransactSession(seedsOf(bs), kgo.TransactionalID(id),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic("out"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
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
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, &kgo.Record{Value: r.Value, Partition: r.Partition}) })
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
	out := readValues(ctx, t, seedsOf(bs), "out", kgo.ReadCommitted(), n)
	for v, k := range out {
		if k != 1 {
			t.Fatalf("%s copied %d times", v, k)
		}
	}
	adm := kadm.NewClient(src)
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		offs, err := adm.FetchOffsets(ctx, group)
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

// TestClusterTxnCoordinatorMoves: the broker coordinating a transactional id stops
// while a transaction of it is open; the other broker adopts the id from the stopped
// broker's journal (its file was never written: checkpoints wait 2 s) with its producer
// and open transaction, and the producer commits it there: everything committed before
// and after the move is read once at read_committed, and the transaction's data on the
// partitions that moved with the stop is committed too.
func TestClusterTxnCoordinatorMoves(t *testing.T) {
	bs := txnCluster(t, 2, "moves", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := groupOf(0, 2, "mover")
	p, err := kgo.NewClient(seedsOf(bs), kgo.TransactionalID(id), kgo.DefaultProduceTopic("moves"),
		kgo.TransactionTimeout(60*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(tag string) {
		for i := range 4 {
			r := &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", tag, i)), Partition: int32(i)}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", tag, err)
			}
		}
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("before")
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("open")
	// Broker 0 coordinates id; it stops with the transaction open.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := bs[0].Stop(sctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if node, code := txnCoordinatorOf(t, bs[1], id); code != 0 || node != 1 {
			return fmt.Errorf("FindCoordinator(%s) on broker 1 = node %d code %d, want 1", id, node, code)
		}
		d, err := kadm.NewClient(directClient(t, bs[1].Addr())).DescribeTransactions(ctx, id)
		if err != nil {
			return err
		}
		if s, ok := d[id]; !ok || s.Err != nil || s.State != "Ongoing" {
			return fmt.Errorf("broker 1 describes %s as %+v, want its open transaction", id, d[id])
		}
		return nil
	})
	produce("after")
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit on the adopting broker: %v", err)
	}
	got := readValues(ctx, t, kgo.SeedBrokers(bs[1].Addr()), "moves", kgo.ReadCommitted(), 12)
	for v, k := range got {
		if k != 1 {
			t.Fatalf("%s read %d times", v, k)
		}
	}
}

// TestClusterTxnShrinkKeepsOpenTransaction: the cluster shrinks from four brokers to
// three while a transaction of an id coordinated by broker 3 is open; broker 3 stops
// right after the transaction took its second partition (gracefully: the id's file,
// written 2 s after a transition, does not hold that partition yet, broker 3's journal
// does) and broker 2, started with the smaller size, which gives it the id, takes it
// from broker 3's journal although broker 3 is beyond the cluster's size now; the
// producer commits it there.
func TestClusterTxnShrinkKeepsOpenTransaction(t *testing.T) {
	cfgs := clusterConfigs(t, 4)
	alone := registry.View{Size: 4, Alive: []int32{3}}
	three := registry.View{Size: 3, Alive: []int32{2}}
	id := ""
	for i := 0; id == ""; i++ {
		c := fmt.Sprintf("shrink-%d", i)
		if o4, _ := alone.TxnOwner(c); o4 == 3 {
			if o3, _ := three.TxnOwner(c); o3 == 2 {
				id = c
			}
		}
	}
	b3 := brokertest.StartWith(t, cfgs[3])
	waitReady(t, b3)
	createTopic(t, b3.Addr(), "shrink", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := kgo.NewClient(kgo.SeedBrokers(b3.Addr(), cfgs[2].Listeners[0].Addr()), kgo.TransactionalID(id),
		kgo.DefaultProduceTopic("shrink"), kgo.TransactionTimeout(60*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("first"), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("second"), Partition: 1}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := b3.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	small := cfgs[2]
	small.ClusterSize, small.RegistryPeers = 3, cfgs[2].RegistryPeers[:3]
	if err := os.WriteFile(filepath.Join(small.DataDir, "__cluster", "cluster.size"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b2 := brokertest.StartWith(t, small)
	waitReady(t, b2)
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		d, err := kadm.NewClient(directClient(t, b2.Addr())).DescribeTransactions(ctx, id)
		if err != nil {
			return err
		}
		if s, ok := d[id]; !ok || s.Err != nil || s.State != "Ongoing" || len(s.Topics["shrink"]) != 2 {
			return fmt.Errorf("broker 2 describes %s as %+v, want the open transaction broker 3 held, on both partitions", id, d[id])
		}
		return nil
	})
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit on broker 2: %v", err)
	}
	if got := readValues(ctx, t, kgo.SeedBrokers(b2.Addr()), "shrink", kgo.ReadCommitted(), 2); got["first"] != 1 || got["second"] != 1 {
		t.Fatalf("read_committed: %v", got)
	}
}
