package txn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// TestCoordinatorJournalMetrics: the coordinator journal's writes are counted, with
// their time and the transitions each made durable, so an operator sees its fdatasync
// rate and how well transactions running together share it. One committed transaction
// makes at least three transitions durable (the producer id, the implicit add, the
// PrepareCommit).
func TestCoordinatorJournalMetrics(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "metered"); err != nil {
		t.Fatal(err)
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("metered"), kgo.TransactionalID("metered-0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := oneTxn(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The transaction's Complete* is written after EndTxn is answered: the figures are
	// read until no write is half counted.
	var got map[string]float64
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		got = scrapeJournal(t, "http://"+b.HTTPAddr()+"/metrics")
		writes := got[`kaas_transactions_journal_writes_total{result="ok"}`]
		if writes < 1 || got["kaas_transactions_journal_write_duration_seconds_count"] != writes ||
			got["kaas_transactions_journal_batch_records_count"] != writes {
			return fmt.Errorf("journal writes %v, duration count %v, batch count %v: want them equal and at least 1", writes,
				got["kaas_transactions_journal_write_duration_seconds_count"], got["kaas_transactions_journal_batch_records_count"])
		}
		return nil
	})
	if records := got["kaas_transactions_journal_batch_records_sum"]; records < 3 {
		t.Fatalf("%v transitions made durable, want at least 3", records)
	}
	if _, ok := got[`kaas_transactions_journal_writes_total{result="error"}`]; !ok {
		t.Fatal("no error series")
	}
}

// scrapeJournal reads the coordinator journal's series from a metrics endpoint.
func scrapeJournal(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "kaas_transactions_journal_") {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				got[name] = v
			}
		}
	}
	return got
}
