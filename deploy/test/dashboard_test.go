package deploytest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

const dashboardFile = "../grafana/kaas.json"

// panel is the part of a Grafana panel the check reads; rows nest panels.
type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// queries are the dashboard's PromQL expressions, by panel title.
func queries(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return out
}

// metricNames parses expr and returns every metric name it selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names, nil
}

// exported says whether a scrape has the series name: a family of that name, or a
// histogram's _bucket, _sum or _count.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if f, ok := fams[name]; ok && len(f.Metric) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM && len(f.Metric) > 0 {
				return true
			}
		}
	}
	return false
}

// missing is every metric the dashboard's queries name that the scrape lacks, with the
// panels naming it.
func missing(t *testing.T, fams map[string]*dto.MetricFamily, qs map[string][]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for title, exprs := range qs {
		for _, e := range exprs {
			names, err := metricNames(e)
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", title, e, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", title, e)
			}
			for _, n := range names {
				if !exported(fams, n) {
					out[n] = append(out[n], title)
				}
			}
		}
	}
	return out
}

// TestDashboardNamesExportedMetrics runs a broker with a consumer group at work, scrapes
// its /metrics, and checks that every query of the Grafana dashboard selects only series
// the broker exports, and that the dashboard shows what an operator of groups needs.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	qs := queries(t)
	b := brokertest.Start(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.LogRetentionCheck = 50 * time.Millisecond // the compacted topic's cleaner runs soon
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}, &kgo.Record{Value: []byte("y")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("dash"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var last *kgo.Record
	for last == nil || last.Offset < 1 {
		f := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume: %v", ctx.Err())
		}
		f.EachRecord(func(r *kgo.Record) { last = r })
	}
	if err := cons.CommitRecords(ctx, last); err != nil {
		t.Fatal(err)
	}
	// A compacted topic whose cleaner runs: its per-partition series exist once a pass has.
	compact := "changelog"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("1024"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
	}, compact); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		r := &kgo.Record{Topic: compact, Key: []byte{byte('a' + i%4)}, Value: []byte(strings.Repeat("v", 100))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A transaction left open: its partition's LSO lag is exported while it is.
	txc, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("dash"), kgo.TransactionTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	if err := txc.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txc.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("t")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := http.Get("http://" + b.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	if err := testwait.Until(20*time.Second, 20*time.Millisecond, func() error {
		if !exported(scrape(), "kaas_log_cleaner_last_clean_timestamp_seconds") {
			return errors.New("no compaction pass yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	fams := scrape()

	// The check can fail: a name the broker does not export is reported.
	if m := missing(t, fams, map[string][]string{"probe": {`sum(rate(kaas_no_such_metric_total[5m])) + kaas_groups_bucket`}}); len(m) != 2 {
		t.Fatalf("an unknown metric and a _bucket of a gauge were not reported: %v", m)
	}

	if m := missing(t, fams, qs); len(m) > 0 {
		var lines []string
		for n, panels := range m {
			lines = append(lines, n+" (panels "+strings.Join(panels, ", ")+")")
		}
		sort.Strings(lines)
		t.Fatalf("the dashboard queries metrics the broker does not export:\n  %s", strings.Join(lines, "\n  "))
	}

	// And it shows what issues 13 and 28 ask an operator to see.
	used := map[string]bool{}
	for _, exprs := range qs {
		for _, e := range exprs {
			names, _ := metricNames(e)
			for _, n := range names {
				used[n] = true
			}
		}
	}
	for _, want := range []string{"kaas_groups", "kaas_group_members", "kaas_group_rebalances_total",
		"kaas_group_rebalance_duration_seconds_bucket", "kaas_request_duration_seconds_bucket",
		"kaas_group_session_expiries_total", "kaas_group_committed_offset", "kaas_log_end_offset", "kaas_group_lag",
		"kaas_log_fsync_duration_seconds_bucket", "kaas_log_write_errors_total", "kaas_offsets_journal_segments_quarantined_total",
		"kaas_registry_brokers_alive", "kaas_lease_held", "kaas_ownership_moves_total", "kaas_connections_open",
		"kaas_log_cleaner_cleaned_bytes_total", "kaas_log_cleaner_dirty_ratio", "kaas_log_cleaner_last_clean_timestamp_seconds",
		"kaas_log_cleaner_errors_total", "kaas_transactions_open", "kaas_transactions_oldest_open_seconds",
		"kaas_transaction_aborts_total", "kaas_transaction_markers_total", "kaas_partition_lso_lag",
		"kaas_producer_state_entries", "kaas_producer_state_expired_total", "kaas_producer_state_evicted_total",
		"kaas_consumer_group_members", "kaas_consumer_group_fences_total", "kaas_consumer_group_reconciliation_seconds_bucket"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}
