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

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// TestTxnOrphanAbortedAfterCoordinatorStateLost: a transaction left Ongoing when the
// broker stops, whose coordinator state is then lost (the transactions directory
// removed), hangs its partition at recovery: the partition asks the coordinator, which
// holds nothing for the producer, writes the abort marker itself, and the LSO moves
// past it (issue 27's orphan check).
func TestTxnOrphanAbortedAfterCoordinatorStateLost(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("lost"), kgo.TransactionTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "o"); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "o", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(c.DataDir, "transactions")); err != nil {
		t.Fatal(err)
	}

	b2 := brokertest.StartWith(t, c)
	acl, err := kgo.NewClient(kgo.SeedBrokers(b2.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		l, err := adm.ListCommittedOffsets(ctx, "o")
		if err != nil {
			return err
		}
		o, _ := l.Lookup("o", 0)
		if o.Err != nil || o.Offset != 2 {
			return fmt.Errorf("read_committed end %d (%v), want 2: the record and the orphan's abort marker", o.Offset, o.Err)
		}
		return nil
	})
}
