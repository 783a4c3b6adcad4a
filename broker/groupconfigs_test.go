package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// Per-group configs (GROUP config resources, KIP-848): consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms, as Apache's GroupConfig.

const (
	gSession   = "consumer.session.timeout.ms"
	gHeartbeat = "consumer.heartbeat.interval.ms"
)

// groupConfigsConfig is a broker whose bounds let a group set a short session.
func groupConfigsConfig(t *testing.T) config.Config {
	c := brokertest.Config(t)
	c.GroupConsumerMinSessionTimeout = time.Second
	c.GroupConsumerMinHeartbeatInterval = 100 * time.Millisecond
	return c
}

// describeGroup is a group's configs as DescribeConfigs shows them at version v.
func describeGroup(t *testing.T, addr string, v int16, group string, synonyms, docs bool) kmsg.DescribeConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeSynonyms, req.IncludeDocumentation = synonyms, docs
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	req.Resources = append(req.Resources, r)
	resp := request[*kmsg.DescribeConfigsResponse](t, addr, req, v)
	if len(resp.Resources) != 1 {
		t.Fatalf("describe group %q: %+v", group, resp)
	}
	return resp.Resources[0]
}

// wantGroupConfigs checks a group shows exactly session and heartbeat, each set by the
// group (GROUP_CONFIG) or not (DEFAULT_CONFIG).
func wantGroupConfigs(t *testing.T, addr, group, session string, sessionSet bool, heartbeat string, heartbeatSet bool) {
	t.Helper()
	rr := describeGroup(t, addr, 4, group, false, false)
	if rr.ErrorCode != 0 || len(rr.Configs) != 2 {
		t.Fatalf("describe group %s: %+v", group, rr)
	}
	want := map[string]struct {
		v   string
		set bool
	}{gSession: {session, sessionSet}, gHeartbeat: {heartbeat, heartbeatSet}}
	for _, c := range rr.Configs {
		w, ok := want[c.Name]
		if !ok {
			t.Fatalf("group %s shows %s", group, c.Name)
		}
		src := kmsg.ConfigSourceDefaultConfig
		if w.set {
			src = kmsg.ConfigSourceGroupConfig
		}
		if c.Value == nil || *c.Value != w.v || c.Source != src || c.ReadOnly || c.ConfigType != kmsg.ConfigTypeInt {
			t.Fatalf("group %s %s = %v source %v, want %q source %v", group, c.Name, str(c.Value), c.Source, w.v, src)
		}
	}
}

// IncrementalAlterConfigs and AlterConfigs of GROUP resources: SET, DELETE, the legacy
// replace, validate_only, Apache's validation and codes, a config kaas does not apply
// refused; DescribeConfigs shows the group's values and sources, synonyms and
// documentation when asked; the configs survive a restart.
func TestGroupConfigs(t *testing.T) {
	c := groupConfigsConfig(t)
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	grp := kmsg.ConfigResourceTypeGroupConfig
	set, del := kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete
	app, sub := kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract

	// Never set: the broker's settings, as defaults.
	wantGroupConfigs(t, addr, "g1", "45000", false, "5000", false)

	for v := int16(0); v <= 1; v++ {
		r := incAlter(t, addr, v, false, incResource(grp, "g1", incOp{gSession, set, sp("50000")}, incOp{gHeartbeat, set, sp("6000")}))
		wantCode(t, "set", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g1", "50000", true, "6000", true)
		wantGroupConfigs(t, addr, "g2", "45000", false, "5000", false)

		r = incAlter(t, addr, v, true, incResource(grp, "g1", incOp{gSession, set, sp("55000")}))
		wantCode(t, "validate only", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g1", "50000", true, "6000", true)

		r = incAlter(t, addr, v, false, incResource(grp, "g1", incOp{gHeartbeat, del, nil}))
		wantCode(t, "delete", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g1", "50000", true, "5000", false)

		for _, tc := range []struct {
			what string
			res  kmsg.IncrementalAlterConfigsRequestResource
			code int16
			msg  string
		}{
			{"unknown name", incResource(grp, "g1", incOp{"no.such.config", set, sp("1")}), kerr.InvalidConfig.Code, "Unknown group config name: no.such.config"},
			{"topic config", incResource(grp, "g1", incOp{"retention.ms", set, sp("1")}), kerr.InvalidConfig.Code, "Unknown group config name: retention.ms"},
			{"share config", incResource(grp, "g1", incOp{"share.session.timeout.ms", set, sp("45000")}), kerr.InvalidConfig.Code, "share.session.timeout.ms"},
			{"streams config", incResource(grp, "g1", incOp{"streams.session.timeout.ms", set, sp("45000")}), kerr.InvalidConfig.Code, "Unknown group config name: streams.session.timeout.ms"},
			{"not a number", incResource(grp, "g1", incOp{gSession, set, sp("soon")}), kerr.InvalidConfig.Code, "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT"},
			{"zero", incResource(grp, "g1", incOp{gHeartbeat, set, sp("0")}), kerr.InvalidConfig.Code, "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least 1"},
			{"heartbeat below min", incResource(grp, "g1", incOp{gHeartbeat, set, sp("99")}), kerr.InvalidConfig.Code, "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"},
			{"heartbeat above max", incResource(grp, "g1", incOp{gHeartbeat, set, sp("15001")}), kerr.InvalidConfig.Code, "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"},
			{"session below min", incResource(grp, "g1", incOp{gSession, set, sp("999")}), kerr.InvalidConfig.Code, "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"},
			{"session above max", incResource(grp, "g1", incOp{gSession, set, sp("60001")}), kerr.InvalidConfig.Code, "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"},
			{"session not above heartbeat", incResource(grp, "g1", incOp{gSession, set, sp("6000")}, incOp{gHeartbeat, set, sp("6000")}), kerr.InvalidConfig.Code, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"},
			{"session below the broker's heartbeat", incResource(grp, "g1", incOp{gSession, set, sp("5000")}), kerr.InvalidConfig.Code, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"},
			{"append", incResource(grp, "g1", incOp{gSession, app, sp("1")}), kerr.InvalidConfig.Code, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."},
			{"subtract", incResource(grp, "g1", incOp{gSession, sub, sp("1")}), kerr.InvalidConfig.Code, "Can't SUBTRACT to key consumer.session.timeout.ms because its type is not LIST."},
			{"unknown operation", incResource(grp, "g1", incOp{gSession, 7, sp("50000")}), kerr.InvalidRequest.Code, "Unknown operation type 7"},
			{"default group", incResource(grp, "", incOp{gSession, set, sp("50000")}), kerr.InvalidRequest.Code, "Default group resources are not allowed."},
			{"null value", incResource(grp, "g1", incOp{gSession, set, nil}), kerr.InvalidRequest.Code, "Null value not supported for : consumer.session.timeout.ms"},
			{"duplicate config", incResource(grp, "g1", incOp{gSession, set, sp("50000")}, incOp{gSession, del, nil}), kerr.InvalidRequest.Code, "Error due to duplicate config keys"},
		} {
			r := incAlter(t, addr, v, false, tc.res)
			wantCode(t, tc.what, r[0].ErrorCode, r[0].ErrorMessage, tc.code, tc.msg)
		}
		wantGroupConfigs(t, addr, "g1", "50000", true, "5000", false)

		// Each resource on its own, beside a topic's.
		createTopic(t, addr, fmt.Sprintf("gt%d", v), 1)
		r = incAlter(t, addr, v, false,
			incResource(grp, "g2", incOp{gHeartbeat, set, sp("7000")}),
			incResource(kmsg.ConfigResourceTypeTopic, fmt.Sprintf("gt%d", v), incOp{"retention.ms", set, sp("3600000")}),
			incResource(grp, "g3", incOp{gHeartbeat, set, sp("70000")}))
		wantCode(t, "g2", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
		wantCode(t, "topic", r[1].ErrorCode, r[1].ErrorMessage, 0, "")
		wantCode(t, "g3", r[2].ErrorCode, r[2].ErrorMessage, kerr.InvalidConfig.Code, "must be less than or equal")
		if r[0].ResourceName != "g2" || r[2].ResourceName != "g3" || r[2].ResourceType != grp {
			t.Fatalf("answers out of order: %+v", r)
		}
		wantGroupConfigs(t, addr, "g2", "45000", false, "7000", true)
		wantConfig(t, addr, fmt.Sprintf("gt%d", v), "retention.ms", "3600000", false)
		incAlter(t, addr, v, false, incResource(grp, "g2", incOp{gHeartbeat, del, nil}))
		wantGroupConfigs(t, addr, "g2", "45000", false, "5000", false)
	}

	// The legacy AlterConfigs replaces the group's whole set.
	for v := int16(0); v <= 2; v++ {
		r := legacyAlter(t, addr, v, false, grp, "g4", gSession, "48000", gHeartbeat, "4000")
		wantCode(t, "legacy set", r.ErrorCode, r.ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g4", "48000", true, "4000", true)
		r = legacyAlter(t, addr, v, false, grp, "g4", gHeartbeat, "3000")
		wantCode(t, "legacy replace", r.ErrorCode, r.ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g4", "45000", false, "3000", true)
		r = legacyAlter(t, addr, v, true, grp, "g4", gSession, "52000")
		wantCode(t, "legacy validate only", r.ErrorCode, r.ErrorMessage, 0, "")
		wantGroupConfigs(t, addr, "g4", "45000", false, "3000", true)
		r = legacyAlter(t, addr, v, false, grp, "g4", "share.auto.offset.reset", "earliest")
		wantCode(t, "legacy share", r.ErrorCode, r.ErrorMessage, kerr.InvalidConfig.Code, "share.auto.offset.reset")
		r = legacyAlter(t, addr, v, false, grp, "", gSession, "50000")
		wantCode(t, "legacy default group", r.ErrorCode, r.ErrorMessage, kerr.InvalidRequest.Code, "Default group resources are not allowed.")
		wantGroupConfigs(t, addr, "g4", "45000", false, "3000", true)
	}

	// DescribeConfigs: synonyms (v1+) and documentation (v3+) when asked; one name; the
	// empty group refused.
	rr := describeGroup(t, addr, 4, "g1", true, true)
	for _, c := range rr.Configs {
		if c.Documentation == nil || *c.Documentation == "" {
			t.Fatalf("%s: no documentation", c.Name)
		}
		src := kmsg.ConfigSourceDefaultConfig
		if c.Name == gSession {
			src = kmsg.ConfigSourceGroupConfig
		}
		if len(c.ConfigSynonyms) != 1 || c.ConfigSynonyms[0].Name != c.Name || c.ConfigSynonyms[0].Source != src ||
			*c.ConfigSynonyms[0].Value != *c.Value {
			t.Fatalf("%s synonyms: %+v", c.Name, c.ConfigSynonyms)
		}
	}
	for v := int16(0); v <= 4; v++ {
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = grp, "g1", []string{gSession}
		req.Resources = append(req.Resources, r)
		resp := request[*kmsg.DescribeConfigsResponse](t, addr, req, v)
		if len(resp.Resources) != 1 || len(resp.Resources[0].Configs) != 1 || *resp.Resources[0].Configs[0].Value != "50000" {
			t.Fatalf("v%d one name: %+v", v, resp)
		}
		if v == 0 && resp.Resources[0].Configs[0].IsDefault {
			t.Fatalf("v0: a group's own config shown as the default: %+v", resp.Resources[0].Configs[0])
		}
		if v >= 1 && resp.Resources[0].Configs[0].Source != kmsg.ConfigSourceGroupConfig {
			t.Fatalf("v%d source: %+v", v, resp.Resources[0].Configs[0])
		}
	}
	if rr := describeGroup(t, addr, 4, "", false, false); rr.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("empty group: %+v", rr)
	}

	// Durable: kept across a restart.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "topics", "~group-configs.json")); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	wantGroupConfigs(t, b.Addr(), "g1", "50000", true, "5000", false)
	wantGroupConfigs(t, b.Addr(), "g4", "45000", false, "3000", true)
	wantGroupConfigs(t, b.Addr(), "g2", "45000", false, "5000", false)
}

// ALTER_CONFIGS and DESCRIBE_CONFIGS on the GROUP resource, as Apache checks them:
// GROUP_AUTHORIZATION_FAILED for a group the principal may not configure.
func TestAuthzGroupConfigs(t *testing.T) {
	b, admin := authzBroker(t)
	addr := b.ListenerAddr("PLAINTEXT")
	setACLs(t, admin, allow(auth.Group, "open", auth.AlterConfigs), allow(auth.Group, "open", auth.DescribeConfigs),
		allow(auth.Group, "seen", auth.DescribeConfigs))
	grp, set := kmsg.ConfigResourceTypeGroupConfig, kmsg.IncrementalAlterConfigOpSet
	for v := int16(0); v <= 1; v++ {
		r := incAlter(t, addr, v, false,
			incResource(grp, "closed", incOp{gSession, set, sp("50000")}),
			incResource(grp, "open", incOp{gSession, set, sp("50000")}),
			incResource(grp, "seen", incOp{gSession, set, sp("50000")}))
		wantCode(t, "closed", r[0].ErrorCode, r[0].ErrorMessage, kerr.GroupAuthorizationFailed.Code, "")
		wantCode(t, "open", r[1].ErrorCode, r[1].ErrorMessage, 0, "")
		wantCode(t, "describe only", r[2].ErrorCode, r[2].ErrorMessage, kerr.GroupAuthorizationFailed.Code, "")
		if r[0].ResourceName != "closed" || r[1].ResourceName != "open" || r[2].ResourceName != "seen" {
			t.Fatalf("answers out of order: %+v", r)
		}
	}
	for v := int16(0); v <= 2; v++ {
		if r := legacyAlter(t, addr, v, false, grp, "closed", gSession, "50000"); r.ErrorCode != kerr.GroupAuthorizationFailed.Code {
			t.Fatalf("v%d closed: %+v", v, r)
		}
		if r := legacyAlter(t, addr, v, false, grp, "open", gSession, "51000"); r.ErrorCode != 0 {
			t.Fatalf("v%d open: %+v", v, r)
		}
	}
	if rr := describeGroup(t, addr, 4, "closed", false, false); rr.ErrorCode != kerr.GroupAuthorizationFailed.Code || len(rr.Configs) != 0 {
		t.Fatalf("describe closed: %+v", rr)
	}
	wantGroupConfigs(t, addr, "open", "51000", true, "5000", false)
	wantGroupConfigs(t, addr, "seen", "45000", false, "5000", false)
}

// In a cluster a group's configs, changed through either broker (the other forwards to
// the broker that writes the catalogue), are shown by both at once.
func TestClusterGroupConfigsSeenByEveryBroker(t *testing.T) {
	cfgs := clusterConfigs(t, 2)
	a := brokertest.StartWith(t, cfgs[0])
	b := brokertest.StartWith(t, cfgs[1])
	waitReady(t, a, b)
	brokers := []*broker.Broker{a, b}
	md := request[*kmsg.MetadataResponse](t, a.Addr(), kmsg.NewPtrMetadataRequest(), 12)
	writer, other := brokers[md.ControllerID], brokers[1-md.ControllerID]
	grp, set := kmsg.ConfigResourceTypeGroupConfig, kmsg.IncrementalAlterConfigOpSet

	r := incAlter(t, other.Addr(), 1, false, incResource(grp, "shared", incOp{gSession, set, sp("50000")}))
	wantCode(t, "through the other broker", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	wantGroupConfigs(t, writer.Addr(), "shared", "50000", true, "5000", false)
	wantGroupConfigs(t, other.Addr(), "shared", "50000", true, "5000", false)

	r = incAlter(t, writer.Addr(), 1, false, incResource(grp, "shared", incOp{gHeartbeat, set, sp("6000")}))
	wantCode(t, "through the writer", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	wantGroupConfigs(t, other.Addr(), "shared", "50000", true, "6000", true)
	wantGroupConfigs(t, writer.Addr(), "shared", "50000", true, "6000", true)

	r = incAlter(t, other.Addr(), 1, false, incResource(grp, "shared", incOp{gHeartbeat, set, sp("60000")}))
	wantCode(t, "refused by the writer", r[0].ErrorCode, r[0].ErrorMessage, kerr.InvalidConfig.Code, "must be less than or equal")

	// A group the other broker coordinates applies a change made through the writer
	// once that broker reads the catalogue again, with no DescribeConfigs asked.
	createTopic(t, writer.Addr(), "gcfg", 2)
	g := groupOf(int32(1-md.ControllerID), 2, "applied")
	member := uuid.NewString()
	var resp *kmsg.ConsumerGroupHeartbeatResponse
	testwait.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		var err error
		resp, err = tryHeartbeat(t, other.Addr(), g, member, 0, true) // once the coordinator has loaded
		return err
	})
	if resp.HeartbeatIntervalMillis != 5000 {
		t.Fatalf("heartbeat interval %d, want the broker's 5000", resp.HeartbeatIntervalMillis)
	}
	epoch := resp.MemberEpoch
	r = incAlter(t, writer.Addr(), 1, false, incResource(grp, g, incOp{gHeartbeat, set, sp("7000")}))
	wantCode(t, "a coordinated group", r[0].ErrorCode, r[0].ErrorMessage, 0, "")
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp := heartbeat(t, other.Addr(), g, member, epoch, false)
		epoch = resp.MemberEpoch
		if resp.HeartbeatIntervalMillis != 7000 {
			return fmt.Errorf("heartbeat interval %d, want the group's 7000", resp.HeartbeatIntervalMillis)
		}
		return nil
	})
}

// tryHeartbeat sends one ConsumerGroupHeartbeat v0 of member to addr; join subscribes
// it to gcfg.
func tryHeartbeat(t *testing.T, addr, group, member string, epoch int32, join bool) (*kmsg.ConsumerGroupHeartbeatResponse, error) {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch = group, member, epoch
	if join {
		req.RebalanceTimeoutMillis = 30000
		req.SubscribedTopicNames, req.Topics = []string{"gcfg"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	resp := request[*kmsg.ConsumerGroupHeartbeatResponse](t, addr, req, 0)
	if resp.ErrorCode != 0 {
		return nil, fmt.Errorf("heartbeat of %s (epoch %d): %w %v", member, epoch, kerr.ErrorForCode(resp.ErrorCode), str(resp.ErrorMessage))
	}
	return resp, nil
}

// heartbeat is tryHeartbeat that must succeed.
func heartbeat(t *testing.T, addr, group, member string, epoch int32, join bool) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	resp, err := tryHeartbeat(t, addr, group, member, epoch, join)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// membersOf is how many members ConsumerGroupDescribe shows in group (none when the
// group is gone).
func membersOf(t *testing.T, addr, group string) int {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp := request[*kmsg.ConsumerGroupDescribeResponse](t, addr, req, 0)
	if len(resp.Groups) != 1 {
		t.Fatalf("describe %s: %+v", group, resp)
	}
	switch g := resp.Groups[0]; g.ErrorCode {
	case 0:
		return len(g.Members)
	case kerr.GroupIDNotFound.Code:
		return 0
	default:
		t.Fatalf("describe %s: %v", group, kerr.ErrorForCode(g.ErrorCode))
		return 0
	}
}

// A running consumer-protocol group applies its configs from its members' next
// heartbeat: the answer carries the group's heartbeat interval, and a member that falls
// silent is fenced at the group's session timeout, far below the broker's.
func TestConsumerGroupAppliesItsConfigs(t *testing.T) {
	c := groupConfigsConfig(t)
	c.GroupConsumerSessionTimeout = 60 * time.Second // a silent member outlives the test
	b := brokertest.StartWith(t, c)
	addr := b.Addr()
	createTopic(t, addr, "gcfg", 2)
	member := uuid.NewString()

	// Joined under the broker's settings.
	resp := heartbeat(t, addr, "running", member, 0, true)
	if resp.HeartbeatIntervalMillis != 5000 {
		t.Fatalf("heartbeat interval %d before the group's configs, want the broker's 5000", resp.HeartbeatIntervalMillis)
	}
	epoch := resp.MemberEpoch

	grp, set := kmsg.ConfigResourceTypeGroupConfig, kmsg.IncrementalAlterConfigOpSet
	r := incAlter(t, addr, 1, false, incResource(grp, "running", incOp{gSession, set, sp("1000")}, incOp{gHeartbeat, set, sp("250")}))
	wantCode(t, "set", r[0].ErrorCode, r[0].ErrorMessage, 0, "")

	// The next heartbeat of the running group gets the group's interval ...
	resp = heartbeat(t, addr, "running", member, epoch, false)
	if resp.HeartbeatIntervalMillis != 250 {
		t.Fatalf("heartbeat interval %d, want the group's 250", resp.HeartbeatIntervalMillis)
	}
	if n := membersOf(t, addr, "running"); n != 1 {
		t.Fatalf("%d members after the heartbeat", n)
	}
	// ... and, silent from now on, the member is fenced at the group's session timeout
	// (the broker's is 60 s).
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := membersOf(t, addr, "running"); n != 0 {
			return fmt.Errorf("%d members", n)
		}
		return nil
	})
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}
