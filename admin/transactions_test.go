package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/internal/testwait"
	"kaas/registry"
)

// hangTxn leaves transactional id id Ongoing with one record on each of topic's
// partitions 0 and 1 (the producer never ends it) and returns its client.
func hangTxn(t *testing.T, addr, topic, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := testCtx(t)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce in the transaction: %v", err)
		}
	}
	return cl
}

type txnDescribed struct {
	Transactions []struct {
		State      string
		Partitions []struct{ Topic string }
		ProducerID int64 `json:"producer_id"`
	}
}

func describeTxn(t *testing.T, a, id string) txnDescribed {
	t.Helper()
	r := on(a, "transactions", "describe", "--transactional-id", id, "--json").must(t, 0)
	var d txnDescribed
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Transactions) != 1 {
		t.Fatalf("describe --json: %v\n%s", err, r.stdout)
	}
	return d
}

// openTxnStart is the start offset of partition p's open transaction (-1: none).
func openTxnStart(t *testing.T, a, topic, p string) int64 {
	t.Helper()
	r := on(a, "transactions", "describe-producers", "--topic", topic, "--partition", p, "--json").must(t, 0)
	var d struct {
		Producers []struct {
			TxnStartOffset int64 `json:"txn_start_offset"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("describe-producers --json: %v\n%s", err, r.stdout)
	}
	for _, pr := range d.Producers {
		if pr.TxnStartOffset >= 0 {
			return pr.TxnStartOffset
		}
	}
	return -1
}

// TestTransactions: list, describe and describe-producers show a hanging transaction;
// abort --start-offset ends it on its partition. On kaas the abort goes through the
// coordinator, which aborts the whole transaction (every partition, CompleteAbort) and
// fences its producer; kfake, as Apache, writes the marker on the partition alone.
func TestTransactions(t *testing.T) {
	for _, c := range clusters {
		if c.name == "kaas-cluster" {
			continue // no transaction coordinator in a cluster yet (docs/transactions.md)
		}
		t.Run(c.name, func(t *testing.T) {
			a := c.start(t)
			cl := hangTxn(t, a, "tx", "t1")

			r := on(a, "transactions", "list").must(t, 0)
			if find(rows(t, r.stdout), "TRANSACTIONAL-ID", "t1", "STATE", "Ongoing") == nil {
				t.Fatalf("list:\n%s", r.stdout)
			}
			r = on(a, "transactions", "list", "--state", "CompleteCommit").must(t, 0)
			if strings.Contains(r.stdout, "t1") {
				t.Fatalf("list --state CompleteCommit shows t1:\n%s", r.stdout)
			}
			r = on(a, "transactions", "describe", "--transactional-id", "t1").must(t, 0)
			if row := find(rows(t, r.stdout), "TRANSACTIONAL-ID", "t1", "STATE", "Ongoing"); row == nil ||
				!strings.Contains(row["PARTITIONS"], "tx-0") || !strings.Contains(row["PARTITIONS"], "tx-1") {
				t.Fatalf("describe:\n%s", r.stdout)
			}
			on(a, "transactions", "describe", "--transactional-id", "nope").must(t, 1)
			if s := openTxnStart(t, a, "tx", "0"); s != 0 {
				t.Fatalf("partition 0's open transaction starts at %d, want 0", s)
			}

			on(a, "transactions", "abort", "--topic", "tx", "--partition", "0", "--start-offset", "7").must(t, 1)
			r = on(a, "transactions", "abort", "--topic", "tx", "--partition", "0", "--start-offset", "0").must(t, 0)
			if find(rows(t, r.stdout), "TOPIC", "tx", "PARTITION", "0", "STATUS", "aborted") == nil {
				t.Fatalf("abort:\n%s", r.stdout)
			}
			if c.name != "kaas" {
				// kfake answers DescribeProducers from its coordinator's state, which an
				// operator's marker does not change (as Apache's does not).
				return
			}
			if s := openTxnStart(t, a, "tx", "0"); s != -1 {
				t.Fatalf("partition 0 still has an open transaction at %d after the abort", s)
			}
			// The coordinator aborted the whole transaction: partition 1 too, and the
			// producer is fenced.
			if d := describeTxn(t, a, "t1"); d.Transactions[0].State != "CompleteAbort" {
				t.Fatalf("t1 after the abort: %+v", d)
			}
			if s := openTxnStart(t, a, "tx", "1"); s != -1 {
				t.Fatalf("partition 1 still has an open transaction at %d", s)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err == nil {
				t.Fatal("the aborted producer's commit succeeded")
			}
			adm := kadm.NewClient(cl)
			testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
				l, err := adm.ListCommittedOffsets(ctx, "tx")
				if err != nil {
					return err
				}
				var bad error
				l.Each(func(o kadm.ListedOffset) {
					if o.Offset != 2 { // the record and the abort marker: the LSO is past both
						bad = context.DeadlineExceeded
					}
				})
				return bad
			})
		})
	}
}

// TestTransactionsAbortByID: abort --transactional-id aborts the id's running
// transaction on every partition through kaas's coordinator.
func TestTransactionsAbortByID(t *testing.T) {
	a := clusters[0].start(t)
	hangTxn(t, a, "tx", "t2")
	r := on(a, "transactions", "abort", "--transactional-id", "t2").must(t, 0)
	for _, p := range []string{"0", "1"} {
		if find(rows(t, r.stdout), "TOPIC", "tx", "PARTITION", p, "STATUS", "aborted") == nil {
			t.Fatalf("abort --transactional-id:\n%s", r.stdout)
		}
	}
	if d := describeTxn(t, a, "t2"); d.Transactions[0].State != "CompleteAbort" {
		t.Fatalf("t2 after the abort: %+v", d)
	}
	on(a, "transactions", "abort", "--transactional-id", "t2").must(t, 1) // nothing running
}

// TestTransactionsAbortTellsTheCoordinatorInACluster: in a cluster the abort reaches the
// broker that coordinates the transactional id, although that broker leads none of the
// transaction's partitions and the tool is pointed at another broker: the coordinator
// aborts the transaction (CompleteAbort, the producer fenced), by --transactional-id
// and by --producer-id alike. Sent to the partitions' leaders only, as Apache's tool
// does, the id would stay Ongoing until its timeout.
func TestTransactionsAbortTellsTheCoordinatorInACluster(t *testing.T) {
	a := startCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(a))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "ctx"); err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]bool{}
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		md, err := adm.Metadata(ctx, "ctx")
		if err != nil {
			return err
		}
		clear(leaders)
		for _, p := range md.Topics["ctx"].Partitions {
			if p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader yet", p.Partition)
			}
			leaders[p.Leader] = true
		}
		if len(md.Topics["ctx"].Partitions) != 2 {
			return fmt.Errorf("%d partitions", len(md.Topics["ctx"].Partitions))
		}
		return nil
	})
	all := registry.View{Size: 3, Alive: []int32{0, 1, 2}}
	idFor := func(prefix string) string {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if o, _ := all.TxnOwner(id); !leaders[o] {
				return id
			}
		}
	}
	for _, by := range []string{"transactional-id", "producer-id"} {
		t.Run(by, func(t *testing.T) {
			id := idFor("abort-" + by)
			p, err := kgo.NewClient(kgo.SeedBrokers(a), kgo.TransactionalID(id), kgo.TransactionTimeout(60*time.Second),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for part := int32(0); part < 2; part++ {
				if err := p.ProduceSync(ctx, &kgo.Record{Topic: "ctx", Partition: part, Value: []byte("x")}).FirstErr(); err != nil {
					t.Fatalf("produce in the transaction: %v", err)
				}
			}
			d := describeTxn(t, a, id)
			args := []string{"transactions", "abort", "--transactional-id", id}
			if by == "producer-id" {
				pid, epoch, err := p.ProducerID(ctx)
				if err != nil {
					t.Fatal(err)
				}
				args = []string{"transactions", "abort", "--topic", "ctx", "--partition", "0",
					"--producer-id", fmt.Sprint(pid), "--producer-epoch", fmt.Sprint(epoch)}
				if pid != d.Transactions[0].ProducerID {
					t.Fatalf("producer id %d, described %d", pid, d.Transactions[0].ProducerID)
				}
			}
			on(a, args...).must(t, 0)
			if d := describeTxn(t, a, id); d.Transactions[0].State != "CompleteAbort" {
				t.Fatalf("%s after the abort: %+v, want CompleteAbort (the coordinator told)", id, d)
			}
			// Both partitions end aborted: nothing open is left on them.
			for _, part := range []string{"0", "1"} {
				if s := openTxnStart(t, a, "ctx", part); s >= 0 {
					t.Fatalf("partition %s still has a transaction open at %d", part, s)
				}
			}
		})
	}
}
