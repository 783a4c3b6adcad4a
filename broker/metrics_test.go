package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// scrape reads a broker's /metrics over HTTP and parses it.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample is the value of the series of name whose labels include want (-1: no such
// series). A histogram's value is its sample count.
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// waitMetric scrapes until cond holds, failing at the deadline with the last scrape.
func waitMetric(t *testing.T, addr, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if fams = scrape(t, addr); cond(fams) {
			return nil
		}
		var names []string
		for n := range fams {
			if strings.HasPrefix(n, "kaas_group") || strings.HasPrefix(n, "kaas_log_end") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		return fmt.Errorf("metrics never showed %s; kaas families: %v", what, names)
	})
	return fams
}

// TestGroupAndLagMetrics drives a real consumer group and a committed-only group over the
// wire and reads the operator's metrics from /metrics: group states and members,
// rebalances with their reason and duration, session expiries, each partition's log end
// and each group's committed offset and lag.
func TestGroupAndLagMetrics(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.GroupMinSessionTimeout = 10 * time.Millisecond
	})
	http := b.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("orders"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		rec := &kgo.Record{Value: []byte("x"), Partition: int32(i % 2)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// 4 records on partition 0, 3 on partition 1.
	fams := scrape(t, http)
	end0, end1 := sample(fams, "kaas_log_end_offset", "topic", "orders", "partition", "0"),
		sample(fams, "kaas_log_end_offset", "topic", "orders", "partition", "1")
	if end0 != 4 || end1 != 3 {
		t.Fatalf("kaas_log_end_offset %v and %v, want 4 and 3", end0, end1)
	}
	if sample(fams, "kaas_groups", "state", "Empty") != 0 || sample(fams, "kaas_group_lag") != -1 {
		t.Fatalf("a group counted before any exists")
	}

	// A group with commits and no members: Empty, its committed offsets and lag.
	offs := kadm.Offsets{}
	offs.AddOffset("orders", 0, 1, -1)
	offs.AddOffset("orders", 1, 3, -1)
	if err := adm.CommitAllOffsets(ctx, "idle", offs); err != nil {
		t.Fatal(err)
	}
	fams = waitMetric(t, http, "group idle's lag", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_group_lag", "group", "idle", "topic", "orders", "partition", "1") >= 0
	})
	if got := sample(fams, "kaas_group_committed_offset", "group", "idle", "topic", "orders", "partition", "0"); got != 1 {
		t.Errorf("committed offset of idle/orders/0: %v, want 1", got)
	}
	if got := sample(fams, "kaas_group_lag", "group", "idle", "topic", "orders", "partition", "0"); got != end0-1 {
		t.Errorf("lag of idle/orders/0: %v, want %v", got, end0-1)
	}
	if got := sample(fams, "kaas_group_lag", "group", "idle", "topic", "orders", "partition", "1"); got != end1-3 {
		t.Errorf("lag of idle/orders/1: %v, want %v", got, end1-3)
	}
	if got := sample(fams, "kaas_groups", "state", "Empty"); got != 1 {
		t.Errorf("kaas_groups{Empty} %v, want 1", got)
	}
	// Producing more moves the lag with the log end.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("y"), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, http, "lag following the log end", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_group_lag", "group", "idle", "topic", "orders", "partition", "0") == end0
	})

	// A real consumer group: Stable with one member after a rebalance.
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("live"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for seen < 8 {
		f := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 8: %v", seen, ctx.Err())
		}
		seen += f.NumRecords()
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	fams = waitMetric(t, http, "group live Stable, lag 0", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_groups", "state", "Stable") == 1 &&
			sample(f, "kaas_group_lag", "group", "live", "topic", "orders", "partition", "0") == 0 &&
			sample(f, "kaas_group_lag", "group", "live", "topic", "orders", "partition", "1") == 0
	})
	if got := sample(fams, "kaas_group_members", "group", "live"); got != 1 {
		t.Errorf("kaas_group_members{live} %v, want 1", got)
	}
	if got := sample(fams, "kaas_group_members", "group", "idle"); got != 0 {
		t.Errorf("kaas_group_members{idle} %v, want 0", got)
	}
	if got := sample(fams, "kaas_group_rebalances_total", "reason", "member_joined"); got < 1 {
		t.Errorf("kaas_group_rebalances_total{member_joined} %v, want at least 1", got)
	}
	if got := sample(fams, "kaas_group_rebalance_duration_seconds", "reason", "member_joined"); got < 1 {
		t.Errorf("kaas_group_rebalance_duration_seconds{member_joined} count %v, want at least 1", got)
	}
	// Leaving: Empty again, the rebalance timed by its reason. A scrape gathers the
	// collectors concurrently, so one scrape may show the group Empty and not yet the
	// duration observed before it: wait for both.
	cons.Close()
	fams = waitMetric(t, http, "group live Empty after its member left, the rebalance timed", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_groups", "state", "Stable") == 0 && sample(f, "kaas_groups", "state", "Empty") == 2 &&
			sample(f, "kaas_group_rebalance_duration_seconds", "reason", "member_left") >= 1
	})
	if got := sample(fams, "kaas_group_rebalances_total", "reason", "member_left"); got != 1 {
		t.Errorf("kaas_group_rebalances_total{member_left} %v, want 1", got)
	}
	if got := sample(fams, "kaas_group_rebalance_duration_seconds", "reason", "member_left"); got != 1 {
		t.Errorf("kaas_group_rebalance_duration_seconds{member_left} count %v, want 1", got)
	}
	if got := sample(fams, "kaas_group_session_expiries_total"); got != 0 {
		t.Fatalf("session expiries %v before any", got)
	}

	// A member that joins and then never heartbeats: its session expires.
	raw, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	join := func(member string) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = "silent", member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 50, 5000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{"orders"}}).AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := join("")
	if got := join(first.MemberID); got.ErrorCode != 0 {
		t.Fatalf("join: error %d", got.ErrorCode)
	}
	fams = waitMetric(t, http, "the silent member's session expiry", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_group_session_expiries_total") == 1 && sample(f, "kaas_group_members", "group", "silent") == 0 &&
			sample(f, "kaas_groups", "state", "Empty") == 3 // idle, live and silent
	})

	// A deleted group leaves every gauge: no state counted, no members, no offsets, no lag.
	if _, err := adm.DeleteGroup(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, http, "group idle gone from the metrics", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_groups", "state", "Empty") == 2 &&
			sample(f, "kaas_group_members", "group", "idle") == -1 &&
			sample(f, "kaas_group_committed_offset", "group", "idle") == -1 &&
			sample(f, "kaas_group_lag", "group", "idle") == -1
	})
}
