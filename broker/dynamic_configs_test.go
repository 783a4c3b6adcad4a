package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// describeOne is one config of a resource as DescribeConfigs v4 shows it, with its
// synonyms; ok false when the resource does not list it.
func describeOne(t *testing.T, addr string, typ kmsg.ConfigResourceType, resource, name string) (kmsg.DescribeConfigsResponseResourceConfig, bool) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeSynonyms = true
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = typ, resource
	req.Resources = append(req.Resources, r)
	resp := request[*kmsg.DescribeConfigsResponse](t, addr, req, 4)
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("describe %v %q: %+v", typ, resource, resp)
	}
	for _, c := range resp.Resources[0].Configs {
		if c.Name == name {
			return c, true
		}
	}
	return kmsg.DescribeConfigsResponseResourceConfig{}, false
}

func strp(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// wantSource checks a config's value, source and synonyms ("name=value/source", most
// precedent first).
func wantSource(t *testing.T, what string, c kmsg.DescribeConfigsResponseResourceConfig, value string, src kmsg.ConfigSource, synonyms ...string) {
	t.Helper()
	var got []string
	for _, s := range c.ConfigSynonyms {
		got = append(got, fmt.Sprintf("%s=%s/%s", s.Name, strp(s.Value), s.Source))
	}
	if strp(c.Value) != value || c.Source != src || strings.Join(got, " ") != strings.Join(synonyms, " ") {
		t.Fatalf("%s: %s=%q source %v synonyms %v, want %q %v %v", what, c.Name, strp(c.Value), c.Source, got, value, src, synonyms)
	}
}

// Dynamic broker configs on one broker: the cluster-wide default and this broker's own
// value change the defaults of running topics at once (max.message.bytes refusing a
// batch, segment.bytes rolling, retention.ms moving the start offset), a topic override
// wins over both, DELETE restores the static setting, DescribeConfigs shows each source
// with its synonyms, and the change is kept across a restart.
func TestDynamicBrokerConfigsApplied(t *testing.T) {
	c := brokertest.Config(t)
	c.NodeID = 2
	c.LogRetentionCheck = time.Hour // no check would run in the test but the one the change makes
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "dyn", 1)
	createTopic(t, addr, "kept", 1)
	set, del := kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete
	brokerRes := kmsg.ConfigResourceTypeBroker
	r := incAlter(t, addr, 1, false, incResource(kmsg.ConfigResourceTypeTopic, "kept", incOp{"max.message.bytes", set, sp("5000")}))
	wantCode(t, "topic override", r[0].ErrorCode, r[0].ErrorMessage, 0, "")

	raw := brokertest.Dial(t, addr)
	big := rawBatch(-1, -1, -1, strings.Repeat("x", 2000))
	produce := func(topic string) int16 { return produceCode(t, raw, produceReq(topic, 0, -1, big)).ErrorCode }
	if code := produce("dyn"); code != 0 {
		t.Fatalf("before: %d", code)
	}

	r = incAlter(t, addr, 1, false, incResource(brokerRes, "", incOp{"message.max.bytes", set, sp("1000")}, incOp{"log.segment.bytes", set, sp("1500")}))
	wantCode(t, "cluster default", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if code := produce("dyn"); code != kerr.MessageTooLarge.Code {
		t.Fatalf("after message.max.bytes=1000: %d, want MESSAGE_TOO_LARGE", code)
	}
	if code := produce("kept"); code != 0 {
		t.Fatalf("the topic override of max.message.bytes lost to the broker default: %d", code)
	}
	small := rawBatch(-1, -1, -1, strings.Repeat("y", 600))
	for i := 0; i < 4; i++ {
		if r := produceCode(t, raw, produceReq("dyn", 0, -1, small)); r.ErrorCode != 0 {
			t.Fatalf("small %d: %+v", i, r)
		}
	}
	if segs := segmentBases(t, c.DataDir, "dyn"); len(segs) < 3 {
		t.Fatalf("log.segment.bytes=1500 not applied: segments %v", segs)
	}
	static := strconv.Itoa(int(c.MessageMaxBytes))
	d, _ := describeOne(t, addr, kmsg.ConfigResourceTypeTopic, "dyn", "max.message.bytes")
	wantSource(t, "topic inherits the cluster default", d, "1000", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
		"message.max.bytes=1000/DYNAMIC_DEFAULT_BROKER_CONFIG", "message.max.bytes="+static+"/DEFAULT_CONFIG")

	// This broker's own value wins over the cluster default.
	r = incAlter(t, addr, 1, false, incResource(brokerRes, "2", incOp{"message.max.bytes", set, sp("3000")}))
	wantCode(t, "per broker", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if code := produce("dyn"); code != 0 {
		t.Fatalf("after this broker's message.max.bytes=3000: %d", code)
	}
	d, _ = describeOne(t, addr, brokerRes, "2", "message.max.bytes")
	wantSource(t, "broker 2", d, "3000", kmsg.ConfigSourceDynamicBrokerConfig,
		"message.max.bytes=3000/DYNAMIC_BROKER_CONFIG", "message.max.bytes=1000/DYNAMIC_DEFAULT_BROKER_CONFIG", "message.max.bytes="+static+"/STATIC_BROKER_CONFIG")
	d, _ = describeOne(t, addr, brokerRes, "", "message.max.bytes")
	wantSource(t, "cluster default", d, "1000", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
		"message.max.bytes=1000/DYNAMIC_DEFAULT_BROKER_CONFIG", "message.max.bytes="+static+"/STATIC_BROKER_CONFIG")
	if _, ok := describeOne(t, addr, brokerRes, "", "num.partitions"); ok {
		t.Fatal("the cluster-wide resource lists a config that has no dynamic default")
	}
	d, _ = describeOne(t, addr, kmsg.ConfigResourceTypeTopic, "dyn", "max.message.bytes")
	wantSource(t, "topic inherits this broker's", d, "3000", kmsg.ConfigSourceDynamicBrokerConfig,
		"message.max.bytes=3000/DYNAMIC_BROKER_CONFIG", "message.max.bytes=1000/DYNAMIC_DEFAULT_BROKER_CONFIG", "message.max.bytes="+static+"/DEFAULT_CONFIG")

	// DELETE of both restores the static setting.
	r = incAlter(t, addr, 1, false, incResource(brokerRes, "2", incOp{"message.max.bytes", del, nil}))
	wantCode(t, "delete per broker", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if code := produce("dyn"); code != kerr.MessageTooLarge.Code {
		t.Fatalf("back to the cluster default: %d, want MESSAGE_TOO_LARGE", code)
	}
	r = incAlter(t, addr, 0, false, incResource(brokerRes, "", incOp{"message.max.bytes", del, nil}))
	wantCode(t, "delete cluster default", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	if code := produce("dyn"); code != 0 {
		t.Fatalf("back to the static setting: %d", code)
	}
	d, _ = describeOne(t, addr, brokerRes, "2", "message.max.bytes")
	wantSource(t, "static again", d, static, kmsg.ConfigSourceStaticBrokerConfig, "message.max.bytes="+static+"/STATIC_BROKER_CONFIG")

	// A short log.retention.ms deletes the closed segments of a topic without an override.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if got := startOffset(t, adm, "dyn"); got != 0 {
		t.Fatalf("start offset %d before retention", got)
	}
	r = incAlter(t, addr, 1, false, incResource(brokerRes, "", incOp{"log.retention.ms", set, sp("1")}))
	wantCode(t, "retention", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	testwait.For(t, 10*time.Second, 10*time.Millisecond, testwait.Cond("log.retention.ms=1 applied: the start offset moved",
		func() bool { return startOffset(t, adm, "dyn") > 0 }))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	d, _ = describeOne(t, b.Addr(), kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms")
	wantSource(t, "after a restart", d, "1", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
		"log.retention.ms=1/DYNAMIC_DEFAULT_BROKER_CONFIG", "log.retention.ms="+strconv.FormatInt(c.LogRetention.Milliseconds(), 10)+"/DEFAULT_CONFIG")
	d, _ = describeOne(t, b.Addr(), brokerRes, "", "log.segment.bytes")
	wantSource(t, "after a restart", d, "1500", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
		"log.segment.bytes=1500/DYNAMIC_DEFAULT_BROKER_CONFIG", "log.segment.bytes="+strconv.FormatInt(c.LogSegmentBytes, 10)+"/STATIC_BROKER_CONFIG")
}

// What a BROKER resource may not change, with Apache's codes: a config Apache never
// changes at runtime (INVALID_REQUEST), one Apache changes but kaas reads at start only
// (INVALID_CONFIG), a bad value (INVALID_REQUEST, as Apache's ConfigAdminManager), an
// APPEND to a config that is no list; validate_only changes nothing, the legacy
// AlterConfigs replaces the resource's whole set.
func TestDynamicBrokerConfigsRefused(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	self := strconv.Itoa(int(c.NodeID))
	set, app := kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpAppend
	brokerRes := kmsg.ConfigResourceTypeBroker
	for v := int16(0); v <= 1; v++ {
		for _, tc := range []struct {
			what string
			res  kmsg.IncrementalAlterConfigsRequestResource
			code int16
			msg  string
		}{
			{"read-only", incResource(brokerRes, "", incOp{"listeners", set, sp("PLAINTEXT://127.0.0.1:1")}, incOp{"log.retention.ms", set, sp("5")}),
				kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(listeners)"},
			{"node id", incResource(brokerRes, self, incOp{"node.id", set, sp("7")}), kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(node.id)"},
			{"start only here", incResource(brokerRes, "", incOp{"log.cleaner.threads", set, sp("2")}), kerr.InvalidConfig.Code, "log.cleaner.threads"},
			{"not a number", incResource(brokerRes, "", incOp{"log.retention.ms", set, sp("soon")}), kerr.InvalidRequest.Code, "Invalid value soon for configuration log.retention.ms"},
			{"out of range", incResource(brokerRes, self, incOp{"log.segment.bytes", set, sp("10")}), kerr.InvalidRequest.Code, "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14"},
			{"bad policy", incResource(brokerRes, "", incOp{"log.cleanup.policy", set, sp("shred")}), kerr.InvalidRequest.Code, "log.cleanup.policy"},
			{"append to a long", incResource(brokerRes, "", incOp{"log.retention.ms", app, sp("5")}), kerr.InvalidConfig.Code, "log.retention.ms"},
			{"other broker", incResource(brokerRes, "9", incOp{"log.retention.ms", set, sp("5")}), kerr.InvalidRequest.Code, "Unexpected broker id"},
		} {
			r := incAlter(t, addr, v, false, tc.res)
			wantCode(t, tc.what, r[0].ErrorCode, r[0].ErrorMessage, tc.code, tc.msg)
		}
		r := incAlter(t, addr, v, true, incResource(brokerRes, "", incOp{"log.retention.ms", set, sp("5")}))
		wantCode(t, "validate only", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	}
	if d, ok := describeOne(t, addr, brokerRes, "", "log.retention.ms"); ok {
		t.Fatalf("a refused or validate-only change was kept: %+v", d)
	}

	// APPEND to the list config adds to its default.
	r := incAlter(t, addr, 1, false, incResource(brokerRes, "", incOp{"log.cleanup.policy", app, sp("compact")}))
	wantCode(t, "append", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	createTopic(t, addr, "pol", 1)
	d, _ := describeOne(t, addr, kmsg.ConfigResourceTypeTopic, "pol", "cleanup.policy")
	wantSource(t, "appended policy", d, "delete,compact", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
		"log.cleanup.policy=delete,compact/DYNAMIC_DEFAULT_BROKER_CONFIG", "log.cleanup.policy=delete/DEFAULT_CONFIG")

	// The legacy request replaces the whole set: log.cleanup.policy goes.
	for v := int16(0); v <= 2; v++ {
		lr := legacyAlter(t, addr, v, false, brokerRes, "", "log.retention.ms", "7200000")
		wantCode(t, "legacy set", lr.ErrorCode, lr.ErrorMessage, 0, "")
		if _, ok := describeOne(t, addr, brokerRes, "", "log.cleanup.policy"); ok {
			t.Fatalf("v%d: the legacy AlterConfigs kept a config it did not name", v)
		}
		d, _ = describeOne(t, addr, brokerRes, "", "log.retention.ms")
		wantSource(t, "legacy", d, "7200000", kmsg.ConfigSourceDynamicDefaultBrokerConfig,
			"log.retention.ms=7200000/DYNAMIC_DEFAULT_BROKER_CONFIG", "log.retention.ms="+strconv.FormatInt(c.LogRetention.Milliseconds(), 10)+"/STATIC_BROKER_CONFIG")
		lr = legacyAlter(t, addr, v, false, brokerRes, "", "log.retention.ms", "soon")
		wantCode(t, "legacy bad value", lr.ErrorCode, lr.ErrorMessage, kerr.InvalidRequest.Code, "Invalid value soon for configuration log.retention.ms")
		lr = legacyAlter(t, addr, v, false, brokerRes, "")
		wantCode(t, "legacy empty set", lr.ErrorCode, lr.ErrorMessage, 0, "")
		if _, ok := describeOne(t, addr, brokerRes, "", "log.retention.ms"); ok {
			t.Fatalf("v%d: the empty set kept log.retention.ms", v)
		}
	}
}

// In a cluster, a cluster-wide default set through a broker that does not write the
// catalogue is forwarded to the one that does, written there before the answer, and
// applied by every broker to the partitions it leads; a per-broker value set through
// that broker names it and is applied there only.
func TestClusterDynamicBrokerConfigs(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	brokers := []*broker.Broker{a, b}
	md := request[*kmsg.MetadataResponse](t, a.Addr(), kmsg.NewPtrMetadataRequest(), 12)
	writer, other := brokers[md.ControllerID], brokers[1-md.ControllerID]
	otherID := strconv.Itoa(int(1 - md.ControllerID))
	createTopic(t, writer.Addr(), "spread", 4)
	set := kmsg.IncrementalAlterConfigOpSet
	brokerRes := kmsg.ConfigResourceTypeBroker

	r := incAlter(t, other.Addr(), 1, false, incResource(brokerRes, "", incOp{"message.max.bytes", set, sp("1000")}))
	wantCode(t, "forwarded cluster default", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	for _, br := range brokers {
		d, _ := describeOne(t, br.Addr(), brokerRes, "", "message.max.bytes")
		if strp(d.Value) != "1000" || d.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
			t.Fatalf("broker %s: %+v", br.Addr(), d)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(a.Addr(), b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(3),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tooLarge := func(p int32) error {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: p, Value: []byte(strings.Repeat("z", 2000))}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			return fmt.Errorf("spread/%d: %v, want MESSAGE_TOO_LARGE", p, err)
		}
		return nil
	}
	for p := int32(0); p < 4; p++ {
		testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error { return tooLarge(p) })
	}

	// The other broker's own value, set through it: the writer keeps it under its id.
	r = incAlter(t, other.Addr(), 1, false, incResource(brokerRes, otherID, incOp{"message.max.bytes", set, sp("4000")}))
	wantCode(t, "forwarded per broker", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	d, _ := describeOne(t, other.Addr(), brokerRes, otherID, "message.max.bytes")
	if strp(d.Value) != "4000" || d.Source != kmsg.ConfigSourceDynamicBrokerConfig {
		t.Fatalf("the other broker: %+v", d)
	}
	d, _ = describeOne(t, writer.Addr(), brokerRes, strconv.Itoa(int(md.ControllerID)), "message.max.bytes")
	if strp(d.Value) != "1000" || d.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Fatalf("the writer took the other broker's value: %+v", d)
	}
}
