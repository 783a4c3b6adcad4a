package txn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"kaas/broker"
	"kaas/broker/brokertest"
)

// benchKaas starts kaas in process: every transaction's decision and every acknowledged
// record is fsynced before its answer. It returns the broker's address and its metrics
// endpoint.
func benchKaas(b *testing.B) (addr, metrics string) {
	c := brokertest.Config(b)
	c.HTTPListen = "127.0.0.1:0"
	br, err := broker.Start(c, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		br.Stop(ctx)
	})
	return br.Addr(), "http://" + br.HTTPAddr() + "/metrics"
}

// syncCounts are kaas's durable writes so far, from its metrics: the coordinator
// journal's writes (one fdatasync each) and the partitions' fsyncs, with their time.
type syncCounts struct {
	journal, journalSecs, log, logSecs float64
}

// scrapeSyncs reads syncCounts from a broker's metrics endpoint.
func scrapeSyncs(b *testing.B, url string) syncCounts {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var c syncCounts
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "kaas_transactions_journal_write_duration_seconds_count":
			c.journal = v
		case "kaas_transactions_journal_write_duration_seconds_sum":
			c.journalSecs = v
		case "kaas_log_fsync_duration_seconds_count":
			c.log = v
		case "kaas_log_fsync_duration_seconds_sum":
			c.logSecs = v
		}
	}
	return c
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
// transactions per second. mark, when set, is called as the timed part starts and as
// it ends.
func txnsPerSecond(b *testing.B, addr string, producers, txns int, tv1 bool, mark func()) float64 {
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
		opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(fmt.Sprintf("bench-%d", i)), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
		if tv1 {
			// Apache 3.9's versions: explicit AddPartitionsToTxn, no epoch bump at EndTxn,
			// as the clients that do not speak KIP-890 part 2 run.
			opts = append(opts, kgo.MaxVersions(kversion.V3_9_0()))
		}
		c, err := kgo.NewClient(opts...)
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
	if mark != nil {
		mark()
	}
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
	if mark != nil {
		mark()
	}
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
// producers, with franz-go's transactions of KIP-890 part 2 (TV2) and, in the tv=1 runs,
// those of the clients without it (explicit AddPartitionsToTxn), against kaas (durable)
// and kfake (in memory) in the same run, and reports
// transactions per second and their ratio, and kaas's durable writes per transaction
// with their mean time (journal: the coordinator journal's writes, one fdatasync each;
// log: the partitions' fsyncs): a transaction waits for four rounds of them one after
// the other (its implicit add with the last one's Complete*, its appends, its
// PrepareCommit, its markers), which producers running together share.
//
// The process runs with one P more than cores, as cmd/kaas runs the broker
// (broker.SpareProc), for kaas and kfake alike: a transaction's three partitions fsync at
// once (its appends, then its markers), each fdatasync holding its P until it returns,
// and with only as many Ps as the 2 cores of a small machine a run was seen to start the
// third fsync only once one of the first two had returned.
func BenchmarkTransactions(b *testing.B) {
	spareProc.Do(func() { broker.SpareProc() }) // once: -count runs this again
	for _, tv1 := range []bool{false, true} {
		for _, producers := range []int{1, 16} {
			name := fmt.Sprintf("producers=%d", producers)
			if tv1 {
				name += ",tv=1"
			}
			b.Run(name, func(b *testing.B) {
				txns := 200
				if producers > 1 {
					txns = 50
				}
				for i := 0; i < b.N; i++ {
					benchOnce(b, producers, txns, tv1)
				}
			})
		}
	}
}

// benchOnce runs kaas, then kfake, and reports.
func benchOnce(b *testing.B, producers, txns int, tv1 bool) {
	addr, metrics := benchKaas(b)
	var at []syncCounts
	kaas := txnsPerSecond(b, addr, producers, txns, tv1, func() { at = append(at, scrapeSyncs(b, metrics)) })
	fake := txnsPerSecond(b, benchKfake(b), producers, txns, tv1, nil)
	b.ReportMetric(kaas, "kaas_txn/s")
	b.ReportMetric(fake, "kfake_txn/s")
	b.ReportMetric(kaas/fake, "ratio")
	n := float64(producers * txns)
	journal, log := at[1].journal-at[0].journal, at[1].log-at[0].log
	b.ReportMetric(journal/n, "journal_syncs/txn")
	b.ReportMetric(log/n, "log_syncs/txn")
	if journal > 0 {
		b.ReportMetric((at[1].journalSecs-at[0].journalSecs)/journal*1000, "journal_sync_ms")
	}
	if log > 0 {
		b.ReportMetric((at[1].logSecs-at[0].logSecs)/log*1000, "log_sync_ms")
	}
}
