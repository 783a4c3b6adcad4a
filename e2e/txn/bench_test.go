package txn

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker"
	"kaas/broker/brokertest"
)

// benchKaas starts kaas in process: every transaction's decision and every acknowledged
// record is fsynced before its answer.
func benchKaas(b *testing.B) string {
	br, err := broker.Start(brokertest.Config(b), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		br.Stop(ctx)
	})
	return br.Addr()
}

// benchKfake starts kfake in memory, the peer the figures are compared with.
func benchKfake(b *testing.B) string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// txnsPerSecond runs producers transactional producers, each committing txns
// transactions of 10 records spread over 3 partitions, and returns committed
// transactions per second.
func txnsPerSecond(b *testing.B, addr string, producers, txns int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := "txnbench"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	clients := make([]*kgo.Client, producers)
	for i := range clients {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(fmt.Sprintf("bench-%d", i)), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		// The first transaction (InitProducerId, the coordinator's first touch) is not
		// timed.
		if err := oneTxn(ctx, c); err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func(c *kgo.Client) {
			defer wg.Done()
			for j := 0; j < txns; j++ {
				if err := oneTxn(ctx, c); err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(producers*txns) / elapsed.Seconds()
}

var spareProc sync.Once

func oneTxn(ctx context.Context, c *kgo.Client) error {
	if err := c.BeginTransaction(); err != nil {
		return err
	}
	rs := make([]*kgo.Record, 10)
	for i := range rs {
		rs[i] = &kgo.Record{Value: []byte(strconv.Itoa(i))}
	}
	if err := c.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return err
	}
	return c.EndTransaction(ctx, kgo.TryCommit)
}

// BenchmarkTransactions commits transactions of 10 records each from 1 and 16
// producers, against kaas (durable) and kfake (in memory) in the same run, and reports
// transactions per second and their ratio.
//
// The process runs with one P more than cores, as cmd/kaas runs the broker
// (broker.SpareProc), for kaas and kfake alike: a transaction's three partitions fsync at
// once (its appends, then its markers), each fdatasync holding its P until it returns,
// and with only as many Ps as the 2 cores of a small machine a run was seen to start the
// third fsync only once one of the first two had returned.
func BenchmarkTransactions(b *testing.B) {
	spareProc.Do(func() { broker.SpareProc() }) // once: -count runs this again
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			txns := 200
			if producers > 1 {
				txns = 50
			}
			for i := 0; i < b.N; i++ {
				kaas := txnsPerSecond(b, benchKaas(b), producers, txns)
				fake := txnsPerSecond(b, benchKfake(b), producers, txns)
				b.ReportMetric(kaas, "kaas_txn/s")
				b.ReportMetric(fake, "kfake_txn/s")
				b.ReportMetric(kaas/fake, "ratio")
			}
		})
	}
}
