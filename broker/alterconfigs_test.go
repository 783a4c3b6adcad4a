package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// incOp is one config of an IncrementalAlterConfigs resource; a nil value is sent null.
type incOp struct {
	name  string
	op    kmsg.IncrementalAlterConfigOp
	value *string
}

func sp(s string) *string { return &s }

func incResource(typ kmsg.ConfigResourceType, name string, ops ...incOp) kmsg.IncrementalAlterConfigsRequestResource {
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = typ, name
	for _, o := range ops {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = o.name, o.op, o.value
		r.Configs = append(r.Configs, c)
	}
	return r
}

func incAlter(t *testing.T, addr string, v int16, validateOnly bool, rs ...kmsg.IncrementalAlterConfigsRequestResource) []kmsg.IncrementalAlterConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.ValidateOnly, req.Resources = validateOnly, rs
	resp := request[*kmsg.IncrementalAlterConfigsResponse](t, addr, req, v)
	if len(resp.Resources) != len(rs) {
		t.Fatalf("v%d: %d answers for %d resources", v, len(resp.Resources), len(rs))
	}
	return resp.Resources
}

func legacyAlter(t *testing.T, addr string, v int16, validateOnly bool, typ kmsg.ConfigResourceType, name string, kv ...string) kmsg.AlterConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrAlterConfigsRequest()
	req.ValidateOnly = validateOnly
	r := kmsg.NewAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = typ, name
	for i := 0; i+1 < len(kv); i += 2 {
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[i], sp(kv[i+1])
		r.Configs = append(r.Configs, c)
	}
	req.Resources = append(req.Resources, r)
	resp := request[*kmsg.AlterConfigsResponse](t, addr, req, v)
	if len(resp.Resources) != 1 {
		t.Fatalf("v%d: %+v", v, resp)
	}
	return resp.Resources[0]
}

// topicConfig is a topic config as DescribeConfigs shows it: its value and whether it
// is the default.
func topicConfig(t *testing.T, addr, topic, name string) (string, bool) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, []string{name}
	req.Resources = append(req.Resources, r)
	resp := request[*kmsg.DescribeConfigsResponse](t, addr, req, 4)
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) != 1 {
		t.Fatalf("describe %s %s: %+v", topic, name, resp)
	}
	c := resp.Resources[0].Configs[0]
	return *c.Value, c.Source == kmsg.ConfigSourceDefaultConfig
}

func wantConfig(t *testing.T, addr, topic, name, value string, isDefault bool) {
	t.Helper()
	if v, d := topicConfig(t, addr, topic, name); v != value || d != isDefault {
		t.Fatalf("%s %s = %q (default %v), want %q (default %v)", topic, name, v, d, value, isDefault)
	}
}

func wantCode(t *testing.T, what string, code int16, msg *string, want int16, wantMsg string) {
	t.Helper()
	if code != want {
		t.Fatalf("%s: code %d (%v), want %d", what, code, msg, want)
	}
	if want == 0 && msg != nil {
		t.Fatalf("%s: message %q on success", what, *msg)
	}
	if wantMsg != "" && (msg == nil || !strings.Contains(*msg, wantMsg)) {
		t.Fatalf("%s: message %v, want %q", what, msg, wantMsg)
	}
}

// IncrementalAlterConfigs at v0 and v1: SET, DELETE back to the default, APPEND and
// SUBTRACT on a list config, validate_only; each resource answered on its own with
// Apache's codes; broker configs kaas never changes at runtime refused as configs that
// cannot be updated dynamically (dynamic ones: dynamic_configs_test.go); the change
// kept across a restart.
func TestIncrementalAlterConfigs(t *testing.T) {
	c := brokertest.Config(t)
	c.NodeID = 2
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "ia", 1)
	createTopic(t, addr, "ib", 1)
	topic := kmsg.ConfigResourceTypeTopic
	set, del := kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete
	app, sub := kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract
	for v := int16(0); v <= 1; v++ {
		r := incAlter(t, addr, v, false, incResource(topic, "ia", incOp{"retention.ms", set, sp("3600000")}, incOp{"max.message.bytes", set, sp("5000")}))
		wantCode(t, "set", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantConfig(t, addr, "ia", "retention.ms", "3600000", false)
		wantConfig(t, addr, "ia", "max.message.bytes", "5000", false)

		r = incAlter(t, addr, v, false, incResource(topic, "ia", incOp{"retention.ms", del, nil}))
		wantCode(t, "delete", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantConfig(t, addr, "ia", "retention.ms", strconv.FormatInt(c.LogRetention.Milliseconds(), 10), true)
		wantConfig(t, addr, "ia", "max.message.bytes", "5000", false)

		r = incAlter(t, addr, v, false, incResource(topic, "ia", incOp{"leader.replication.throttled.replicas", app, sp("0:1,1:1")}))
		wantCode(t, "append", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		r = incAlter(t, addr, v, false, incResource(topic, "ia", incOp{"leader.replication.throttled.replicas", sub, sp("0:1")}))
		wantCode(t, "subtract", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantConfig(t, addr, "ia", "leader.replication.throttled.replicas", "1:1", false)
		incAlter(t, addr, v, false, incResource(topic, "ia", incOp{"leader.replication.throttled.replicas", del, nil}))

		r = incAlter(t, addr, v, true, incResource(topic, "ia", incOp{"segment.bytes", set, sp("100000")}))
		wantCode(t, "validate only", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantConfig(t, addr, "ia", "segment.bytes", strconv.FormatInt(c.LogSegmentBytes, 10), true)

		for _, tc := range []struct {
			what string
			res  kmsg.IncrementalAlterConfigsRequestResource
			code int16
			msg  string
		}{
			{"unknown name", incResource(topic, "ia", incOp{"no.such.config", set, sp("1")}), kerr.InvalidConfig.Code, "Unknown topic config name: no.such.config"},
			{"bad value", incResource(topic, "ia", incOp{"retention.ms", set, sp("soon")}), kerr.InvalidConfig.Code, "retention.ms"},
			{"no cleanup", incResource(topic, "ia", incOp{"cleanup.policy", set, sp("")}), kerr.InvalidConfig.Code, "cleanup.policy"},
			{"lags out of order", incResource(topic, "ia", incOp{"min.compaction.lag.ms", set, sp("60001")}, incOp{"max.compaction.lag.ms", set, sp("60000")}), kerr.InvalidConfig.Code, "conflict topic config setting min.compaction.lag.ms (60001) > max.compaction.lag.ms (60000)"},
			{"append to a long", incResource(topic, "ia", incOp{"retention.ms", app, sp("5")}), kerr.InvalidConfig.Code, "Can't APPEND to key retention.ms because its type is not LIST."},
			{"unknown topic", incResource(topic, "nope", incOp{"retention.ms", set, sp("5")}), kerr.UnknownTopicOrPartition.Code, "The topic 'nope' does not exist."},
			{"default topic", incResource(topic, "", incOp{"retention.ms", set, sp("5")}), kerr.InvalidRequest.Code, "Default topic resources are not allowed."},
			{"invalid topic name", incResource(topic, "a/b", incOp{"retention.ms", set, sp("5")}), kerr.InvalidTopicException.Code, ""},
			{"duplicate config", incResource(topic, "ia", incOp{"retention.ms", set, sp("5")}, incOp{"retention.ms", del, nil}), kerr.InvalidRequest.Code, "Error due to duplicate config keys"},
			{"null value", incResource(topic, "ia", incOp{"retention.ms", set, nil}), kerr.InvalidRequest.Code, "Null value not supported for : retention.ms"},
			{"unknown operation", incResource(topic, "ia", incOp{"retention.ms", 7, sp("5")}), kerr.InvalidRequest.Code, "Unknown operation type 7"},
			{"broker", incResource(kmsg.ConfigResourceTypeBroker, "2", incOp{"log.retention.ms", set, sp("5")}, incOp{"num.partitions", set, sp("3")}),
				kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(num.partitions)"},
			{"cluster default", incResource(kmsg.ConfigResourceTypeBroker, "", incOp{"listeners", set, sp("PLAINTEXT://127.0.0.1:1")}), kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(listeners)"},
			{"logger", incResource(kmsg.ConfigResourceTypeBrokerLogger, "2", incOp{"kafka.server", set, sp("DEBUG")}), kerr.InvalidConfig.Code, "Logger kafka.server does not exist!"},
			{"logger append", incResource(kmsg.ConfigResourceTypeBrokerLogger, "2", incOp{"kafka.server", app, sp("DEBUG")}), kerr.InvalidRequest.Code, "APPEND operation is not allowed for the BROKER_LOGGER resource"},
			{"other broker's logger", incResource(kmsg.ConfigResourceTypeBrokerLogger, "5", incOp{"kafka.server", set, sp("DEBUG")}), kerr.InvalidRequest.Code, "Unexpected node id."},
			{"client metrics", incResource(kmsg.ConfigResourceTypeClientMetrics, "m", incOp{"metrics", set, sp("org.apache")}), kerr.InvalidRequest.Code, "Unknown resource type 16"},
			{"other broker", incResource(kmsg.ConfigResourceTypeBroker, "7", incOp{"log.retention.ms", set, sp("5")}), kerr.InvalidRequest.Code, "Unexpected broker id, expected 2, but received 7"},
		} {
			r := incAlter(t, addr, v, false, tc.res)
			wantCode(t, tc.what, r[0].ErrorCode, r[0].ErrorMessage, tc.code, tc.msg)
		}
		wantConfig(t, addr, "ia", "retention.ms", strconv.FormatInt(c.LogRetention.Milliseconds(), 10), true)
		wantConfig(t, addr, "ia", "cleanup.policy", "delete", true)

		// Each resource on its own: a duplicate fails both its entries, not the others.
		r = incAlter(t, addr, v, false,
			incResource(topic, "ia", incOp{"flush.messages", set, sp("10")}),
			incResource(topic, "ib", incOp{"flush.messages", set, sp("20")}),
			incResource(topic, "ia", incOp{"flush.messages", set, sp("30")}),
			incResource(topic, "nope", incOp{"flush.messages", set, sp("30")}))
		wantCode(t, "duplicate resource 1", r[0].ErrorCode, r[0].ErrorMessage, kerr.InvalidRequest.Code, "Each resource must appear at most once.")
		wantCode(t, "other resource", r[1].ErrorCode, r[1].ErrorMessage, 0, "")
		wantCode(t, "duplicate resource 2", r[2].ErrorCode, r[2].ErrorMessage, kerr.InvalidRequest.Code, "Each resource must appear at most once.")
		wantCode(t, "unknown alongside", r[3].ErrorCode, r[3].ErrorMessage, kerr.UnknownTopicOrPartition.Code, "")
		if r[1].ResourceName != "ib" || r[3].ResourceName != "nope" || r[3].ResourceType != topic {
			t.Fatalf("answers out of order: %+v", r)
		}
		wantConfig(t, addr, "ib", "flush.messages", "20", false)
		wantConfig(t, addr, "ia", "flush.messages", strconv.FormatInt(c.LogFlushIntervalMessages, 10), true)

		// A DELETE on a broker resource with no dynamic value changes nothing and is
		// done, as Apache answers.
		r = incAlter(t, addr, v, false, incResource(kmsg.ConfigResourceTypeBroker, "2", incOp{"log.retention.ms", del, nil}))
		wantCode(t, "broker delete", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	wantConfig(t, b.Addr(), "ia", "max.message.bytes", "5000", false)
	wantConfig(t, b.Addr(), "ib", "flush.messages", "20", false)
}

// AlterConfigs v0–v2 replaces a topic's whole set of overrides: a config not named goes
// back to its default; validate_only changes nothing; a broker config kaas never
// changes at runtime is refused.
func TestAlterConfigsReplacesTheSet(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "la", 1)
	topic := kmsg.ConfigResourceTypeTopic
	for v := int16(0); v <= 2; v++ {
		r := legacyAlter(t, addr, v, false, topic, "la", "retention.ms", "7200000", "segment.bytes", "200000")
		wantCode(t, "set two", r.ErrorCode, r.ErrorMessage, 0, "")
		wantConfig(t, addr, "la", "retention.ms", "7200000", false)
		wantConfig(t, addr, "la", "segment.bytes", "200000", false)

		r = legacyAlter(t, addr, v, true, topic, "la", "max.message.bytes", "3000")
		wantCode(t, "validate only", r.ErrorCode, r.ErrorMessage, 0, "")
		wantConfig(t, addr, "la", "retention.ms", "7200000", false)

		r = legacyAlter(t, addr, v, false, topic, "la", "max.message.bytes", "3000")
		wantCode(t, "replace", r.ErrorCode, r.ErrorMessage, 0, "")
		wantConfig(t, addr, "la", "max.message.bytes", "3000", false)
		wantConfig(t, addr, "la", "retention.ms", strconv.FormatInt(c.LogRetention.Milliseconds(), 10), true)
		wantConfig(t, addr, "la", "segment.bytes", strconv.FormatInt(c.LogSegmentBytes, 10), true)

		r = legacyAlter(t, addr, v, false, topic, "la", "cleanup.policy", "")
		wantCode(t, "no cleanup", r.ErrorCode, r.ErrorMessage, kerr.InvalidConfig.Code, "cleanup.policy")
		wantConfig(t, addr, "la", "max.message.bytes", "3000", false)

		r = legacyAlter(t, addr, v, false, topic, "nope", "retention.ms", "1")
		wantCode(t, "unknown topic", r.ErrorCode, r.ErrorMessage, kerr.UnknownTopicOrPartition.Code, "")

		r = legacyAlter(t, addr, v, false, kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(c.NodeID)), "node.id", "10")
		wantCode(t, "broker", r.ErrorCode, r.ErrorMessage, kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(node.id)")

		r = legacyAlter(t, addr, v, false, topic, "la")
		wantCode(t, "empty set", r.ErrorCode, r.ErrorMessage, 0, "")
		wantConfig(t, addr, "la", "max.message.bytes", strconv.Itoa(int(c.MessageMaxBytes)), true)
	}
	data, err := os.ReadFile(filepath.Join(c.DataDir, "topics", "la", "topic.json"))
	if err != nil || strings.Contains(string(data), "configs") {
		t.Fatalf("catalogue entry after the overrides were removed: %s %v", data, err)
	}
}

// A running partition applies a changed config without a restart: max.message.bytes
// refuses a batch it let through before, segment.bytes rolls smaller segments, and a
// retention.ms made short deletes the old segments at once.
func TestAlterConfigsAppliedToRunningPartitions(t *testing.T) {
	c := brokertest.Config(t)
	c.LogRetentionCheck = time.Hour // no check would run in the test but the one the change makes
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "run", 1)
	raw := brokertest.Dial(t, addr)
	big := rawBatch(-1, -1, -1, strings.Repeat("x", 2000))
	if r := produceCode(t, raw, produceReq("run", 0, -1, big)); r.ErrorCode != 0 {
		t.Fatalf("before: %+v", r)
	}
	topic := kmsg.ConfigResourceTypeTopic
	set := kmsg.IncrementalAlterConfigOpSet
	r := incAlter(t, addr, 1, false, incResource(topic, "run", incOp{"max.message.bytes", set, sp("1000")}, incOp{"segment.bytes", set, sp("1500")}))
	wantCode(t, "alter", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if r := produceCode(t, raw, produceReq("run", 0, -1, big)); r.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("after max.message.bytes=1000: %+v, want MESSAGE_TOO_LARGE", r)
	}
	small := rawBatch(-1, -1, -1, strings.Repeat("y", 600))
	for i := 0; i < 4; i++ {
		if r := produceCode(t, raw, produceReq("run", 0, -1, small)); r.ErrorCode != 0 {
			t.Fatalf("small %d: %+v", i, r)
		}
	}
	// The 2000-byte batch's segment, then one per two 600-byte batches at most.
	if segs := segmentBases(t, c.DataDir, "run"); len(segs) < 3 {
		t.Fatalf("segment.bytes=1500 not applied: segments %v", segs)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if got := startOffset(t, adm, "run"); got != 0 {
		t.Fatalf("start offset %d before retention", got)
	}
	r = incAlter(t, addr, 1, false, incResource(topic, "run", incOp{"retention.ms", set, sp("1")}))
	wantCode(t, "retention", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	// Every closed segment is older than 1 ms by the time the partition applies it.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, testwait.Cond("retention.ms=1 applied: the start offset moved",
		func() bool { return startOffset(t, adm, "run") > 0 }))
}

// kadm's AlterTopicConfigs and ValidateAlterTopicConfigs, as a real client sends them.
func TestAlterTopicConfigsThroughKadm(t *testing.T) {
	b := brokertest.Start(t, nil)
	addr := b.Addr()
	createTopic(t, addr, "kadm", 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	res, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: sp("1048576")}}, "kadm")
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("validate: %+v %v", res, err)
	}
	wantConfig(t, addr, "kadm", "retention.bytes", "-1", true)
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: sp("1048576")}}, "kadm")
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("alter: %+v %v", res, err)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "kadm")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On("kadm", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range c.Configs {
		if e.Key == "retention.bytes" {
			found = e.MaybeValue() == "1048576" && e.Source == kmsg.ConfigSourceDynamicTopicConfig
		}
	}
	if !found {
		t.Fatalf("retention.bytes not changed: %+v", c.Configs)
	}
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: sp("lots")}}, "kadm")
	if err != nil || len(res) != 1 || res[0].Err != kerr.InvalidConfig {
		t.Fatalf("bad value: %+v %v", res, err)
	}
}

// ALTER_CONFIGS on the topic, or on the cluster for a broker resource: denied resources
// are answered 29 / 31 in their place, the others changed.
func TestAuthzAlterConfigs(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(admin)
	for _, name := range []string{"open", "closed"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	setACLs(t, admin, allow(auth.Topic, "open", auth.AlterConfigs))
	set := kmsg.IncrementalAlterConfigOpSet
	for v := int16(0); v <= 1; v++ {
		r := incAlter(t, addr, v, false,
			incResource(kmsg.ConfigResourceTypeTopic, "closed", incOp{"retention.ms", set, sp("1000")}),
			incResource(kmsg.ConfigResourceTypeTopic, "open", incOp{"retention.ms", set, sp("2000")}),
			incResource(kmsg.ConfigResourceTypeBroker, "", incOp{"log.retention.ms", set, sp("5")}))
		wantCode(t, "closed", r[0].ErrorCode, r[0].ErrorMessage, kerr.TopicAuthorizationFailed.Code, "")
		wantCode(t, "open", r[1].ErrorCode, r[1].ErrorMessage, 0, "")
		wantCode(t, "broker", r[2].ErrorCode, r[2].ErrorMessage, kerr.ClusterAuthorizationFailed.Code, "")
		if r[0].ResourceName != "closed" || r[1].ResourceName != "open" {
			t.Fatalf("answers out of order: %+v", r)
		}
	}
	for v := int16(0); v <= 2; v++ {
		if r := legacyAlter(t, addr, v, false, kmsg.ConfigResourceTypeTopic, "closed", "retention.ms", "1000"); r.ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("v%d closed: %+v", v, r)
		}
		if r := legacyAlter(t, addr, v, false, kmsg.ConfigResourceTypeTopic, "open", "retention.ms", "3000"); r.ErrorCode != 0 {
			t.Fatalf("v%d open: %+v", v, r)
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "closed", "open")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"closed", "open"} {
		c, err := rc.On(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Configs {
			if e.Key == "retention.ms" {
				changed := e.Source == kmsg.ConfigSourceDynamicTopicConfig
				if changed != (name == "open") || (changed && e.MaybeValue() != "3000") {
					t.Fatalf("%s retention.ms %+v", name, e)
				}
			}
		}
	}
}

// In a cluster the broker that writes the catalogue changes a topic's configs (another
// forwards the change to it: forward_test.go); DescribeConfigs on the other broker
// shows the change at once, and every partition, whichever broker leads it, applies it.
func TestClusterAlterConfigsShownAndAppliedEverywhere(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	brokers := []*broker.Broker{a, b}
	md := request[*kmsg.MetadataResponse](t, a.Addr(), kmsg.NewPtrMetadataRequest(), 12)
	writer, other := brokers[md.ControllerID], brokers[1-md.ControllerID]
	createTopic(t, writer.Addr(), "shared", 4)
	set := kmsg.IncrementalAlterConfigOpSet
	res := incResource(kmsg.ConfigResourceTypeTopic, "shared", incOp{"max.message.bytes", set, sp("1000")})
	wantConfig(t, other.Addr(), "shared", "max.message.bytes", strconv.Itoa(int(cfgs[0].MessageMaxBytes)), true)

	r := incAlter(t, writer.Addr(), 1, false, res)
	wantCode(t, "the writer", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	wantConfig(t, other.Addr(), "shared", "max.message.bytes", "1000", false)
	wantConfig(t, writer.Addr(), "shared", "max.message.bytes", "1000", false)

	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Addr(), b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(3),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tooLarge := func(topic string, p int32) error {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(strings.Repeat("z", 2000))}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			return fmt.Errorf("%s/%d: %v, want MESSAGE_TOO_LARGE", topic, p, err)
		}
		return nil
	}
	for p := int32(0); p < 4; p++ {
		if err := tooLarge("shared", p); err != nil {
			t.Fatal(err)
		}
	}

	// Without a DescribeConfigs: the other broker applies the change when it reads the
	// catalogue again.
	createTopic(t, writer.Addr(), "ticked", 4)
	r = incAlter(t, writer.Addr(), 1, false, incResource(kmsg.ConfigResourceTypeTopic, "ticked", incOp{"max.message.bytes", set, sp("1000")}))
	wantCode(t, "the writer, again", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	for p := int32(0); p < 4; p++ {
		testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error { return tooLarge("ticked", p) })
	}
}
