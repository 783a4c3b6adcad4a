package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// The consumer group protocol's metrics: members by reconciliation state, and fences by
// reason (a member silent past its session is fenced: session_timeout).
func TestConsumerGroupMetrics(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.GroupConsumerMinSessionTimeout = 50 * time.Millisecond
		c.GroupConsumerSessionTimeout = 300 * time.Millisecond
		c.GroupConsumerMinHeartbeatInterval = 10 * time.Millisecond
		c.GroupConsumerHeartbeatInterval = 100 * time.Millisecond
	})
	http := b.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, http)
	if sample(fams, "kaas_consumer_group_members", "state", "stable") != 0 ||
		sample(fams, "kaas_consumer_group_fences_total", "reason", "session_timeout") != 0 {
		t.Fatal("consumer-protocol metrics not at zero before any group")
	}
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.RebalanceTimeoutMillis = "g", uuid.NewString(), 1000
	req.SubscribedTopicNames, req.Topics = []string{"orders"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("join: %v %v", err, resp)
	}
	waitMetric(t, http, "one stable member", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_consumer_group_members", "state", "stable") == 1 &&
			sample(f, "kaas_groups", "state", "Stable") == 1 && sample(f, "kaas_group_members", "group", "g") == 1 &&
			sample(f, "kaas_consumer_group_reconciliation_seconds") == 1
	})
	// It never heartbeats again: fenced at its session timeout.
	waitMetric(t, http, "the silent member fenced", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "kaas_consumer_group_fences_total", "reason", "session_timeout") == 1 &&
			sample(f, "kaas_consumer_group_members", "state", "stable") == 0 &&
			sample(f, "kaas_groups", "state", "Empty") == 1 && sample(f, "kaas_group_session_expiries_total") == 1
	})
}
