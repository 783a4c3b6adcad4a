package conn

import (
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// DescribeConfigs (key 32), v0–v4 (KIP-133, KIP-226).
//
//	v1: include_synonyms, config source. v2: same. v3: include_documentation, config
//	type. v4: flexible.
//
// Topics show every topic config: overrides (DYNAMIC_TOPIC_CONFIG) and the broker
// defaults they fall back to: a dynamic broker config (DYNAMIC_BROKER_CONFIG,
// DYNAMIC_DEFAULT_BROKER_CONFIG) or the static default (DEFAULT_CONFIG). The broker (its
// id) shows the log and topic settings it runs with, each its dynamic value over the one
// it started with (STATIC_BROKER_CONFIG, or DEFAULT_CONFIG for the dynamic ones kaas has
// no flag for), which is what kadm and the usual tools read; the cluster-wide resource
// ("") shows its dynamic defaults only, as Apache. Synonyms list every source, most
// precedent first. Broker loggers have nothing to show. Groups (KIP-848) show the group configs kaas
// applies, as Apache's ConfigHelper: GROUP_CONFIG when the group sets one, else
// DEFAULT_CONFIG with the broker's group.consumer.* setting; read again from the
// catalogue first in a cluster, so a change made through any broker shows at once.
func init() { register(32, 0, 4, handleDescribeConfigs) }

func handleDescribeConfigs(c *Call) {
	req := c.Req.(*kmsg.DescribeConfigsRequest)
	var names, groups []string
	brokers := false
	for _, r := range req.Resources {
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			names = append(names, r.ResourceName)
		case kmsg.ConfigResourceTypeBroker:
			brokers = true
		case kmsg.ConfigResourceTypeGroupConfig:
			if r.ResourceName != "" {
				groups = append(groups, r.ResourceName)
			}
		}
	}
	build := func(res *partition.Described) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		k, kg := 0, 0
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			switch r.ResourceType {
			case kmsg.ConfigResourceTypeTopic:
				ti := partition.TopicInfo{ErrorCode: kerr.UnknownTopicOrPartition.Code}
				if res != nil {
					ti = res.Topics[k]
					k++
				}
				if ti.ErrorCode != 0 {
					rr.ErrorCode = ti.ErrorCode
					break
				}
				for _, e := range partition.TopicConfigs(c.Env.Config, brokerConfigsOf(c), c.Env.NodeID, ti.Configs) {
					addConfig(&rr, req, r.ConfigNames, e)
				}
			case kmsg.ConfigResourceTypeBroker:
				if r.ResourceName != "" && r.ResourceName != strconv.Itoa(int(c.Env.NodeID)) {
					rr.ErrorCode = kerr.InvalidRequest.Code
					msg := "Unexpected broker id, expected " + strconv.Itoa(int(c.Env.NodeID)) + " or empty string, but received " + r.ResourceName
					rr.ErrorMessage = &msg
					break
				}
				for _, e := range brokerConfigs(c, r.ResourceName != "") {
					addConfig(&rr, req, r.ConfigNames, e)
				}
			case kmsg.ConfigResourceTypeBrokerLogger:
			case kmsg.ConfigResourceTypeGroupConfig:
				if r.ResourceName == "" {
					rr.ErrorCode = kerr.InvalidRequest.Code
					rr.ErrorMessage = strPtr("Group name must not be empty")
					break
				}
				var set map[string]string
				if res != nil && kg < len(res.Groups) {
					set = res.Groups[kg]
				}
				kg++
				addGroupConfigs(c, &rr, req, r.ConfigNames, set)
			default:
				rr.ErrorCode = kerr.InvalidRequest.Code
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	}
	if len(names) == 0 && len(groups) == 0 && !brokers || noTopics(c) {
		c.Respond(build(nil))
		return
	}
	reply := c.Await(func(v any) kmsg.Response { return build(v.(*partition.Described)) })
	askTopics(c, &partition.Describe{Names: names, Groups: groups, Fresh: true, Reply: reply})
}

// addGroupConfigs adds a group's configs: those it sets (GROUP_CONFIG), the others at
// the broker's setting (DEFAULT_CONFIG), with their documentation when asked (v3+).
func addGroupConfigs(c *Call, rr *kmsg.DescribeConfigsResponseResource, req *kmsg.DescribeConfigsRequest, only []string, set map[string]string) {
	cfg := c.Env.Config
	for _, e := range []struct {
		name string
		def  int64
	}{
		{partition.GroupHeartbeatIntervalConfig, cfg.GroupConsumerHeartbeatInterval.Milliseconds()},
		{partition.GroupSessionTimeoutConfig, cfg.GroupConsumerSessionTimeout.Milliseconds()},
	} {
		value, src := strconv.FormatInt(e.def, 10), kmsg.ConfigSourceDefaultConfig
		if v, ok := set[e.name]; ok {
			value, src = v, kmsg.ConfigSourceGroupConfig
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32); err == nil {
				value = strconv.FormatInt(n, 10) // as Apache shows the parsed value
			}
		}
		n := len(rr.Configs)
		addConfig(rr, req, only, partition.ConfigEntry{Name: e.name, Value: value, Type: kmsg.ConfigTypeInt,
			Source: src, Synonyms: []partition.Synonym{{Name: e.name, Value: value, Source: src}}})
		if len(rr.Configs) > n && req.IncludeDocumentation {
			rr.Configs[n].Documentation = strPtr(partition.GroupConfigDocs[e.name])
		}
	}
}

// addConfig adds e unless only leaves it out, with its synonyms when asked (v1+).
func addConfig(rr *kmsg.DescribeConfigsResponseResource, req *kmsg.DescribeConfigsRequest, only []string, e partition.ConfigEntry) {
	name := e.Name
	if only != nil {
		found := false
		for _, n := range only {
			found = found || n == name
		}
		if !found {
			return
		}
	}
	rc := kmsg.NewDescribeConfigsResponseResourceConfig()
	rc.Name = name
	v := e.Value
	rc.Value = &v
	rc.Source = e.Source
	rc.IsDefault = e.Source == kmsg.ConfigSourceDefaultConfig
	rc.ConfigType = e.Type
	if req.IncludeSynonyms && req.Version >= 1 {
		for _, s := range e.Synonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			sv := s.Value
			syn.Name, syn.Value, syn.Source = s.Name, &sv, s.Source
			rc.ConfigSynonyms = append(rc.ConfigSynonyms, syn)
		}
	}
	rr.Configs = append(rr.Configs, rc)
}

// brokerConfigsOf are the dynamic broker configs in force, as the topics manager
// published them with the catalogue.
func brokerConfigsOf(c *Call) *partition.BrokerConfigs {
	if c.Env.Catalog == nil {
		return nil
	}
	return c.Env.Catalog.BrokerConfigs()
}

// brokerConfigs are the broker settings a topic falls back to, under Apache's names, as
// broker id describes them (perBroker) or the cluster-wide resource "" does: only its
// dynamic defaults.
func brokerConfigs(c *Call, perBroker bool) []partition.ConfigEntry {
	dyn := brokerConfigsOf(c)
	listed := map[string]bool{}
	var out []partition.ConfigEntry
	for _, e := range staticBrokerConfigs(c) {
		listed[e.Name] = true
		out = append(out, dyn.BrokerEntry(e, kmsg.ConfigSourceStaticBrokerConfig, c.Env.NodeID, perBroker))
	}
	for _, e := range partition.DynamicBrokerStatics(c.Env.Config, listed) {
		out = append(out, dyn.BrokerEntry(e, kmsg.ConfigSourceDefaultConfig, c.Env.NodeID, perBroker))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if perBroker {
		return out
	}
	kept := out[:0]
	for _, e := range out {
		if e.Source == kmsg.ConfigSourceDynamicDefaultBrokerConfig {
			kept = append(kept, e)
		}
	}
	return kept
}

// staticBrokerConfigs are the settings the broker started with.
func staticBrokerConfigs(c *Call) []partition.ConfigEntry {
	cfg := c.Env.Config
	ms := func(d int64) string { return strconv.FormatInt(d, 10) }
	retention := "-1"
	if cfg.LogRetention >= 0 {
		retention = ms(cfg.LogRetention.Milliseconds())
	}
	return []partition.ConfigEntry{
		{Name: "auto.create.topics.enable", Value: strconv.FormatBool(cfg.AutoCreateTopics), Type: kmsg.ConfigTypeBoolean},
		{Name: "broker.id", Value: strconv.Itoa(int(c.Env.NodeID)), Type: kmsg.ConfigTypeInt},
		{Name: "default.replication.factor", Value: strconv.Itoa(int(cfg.DefaultReplicationFactor)), Type: kmsg.ConfigTypeInt},
		{Name: "log.flush.interval.messages", Value: ms(cfg.LogFlushIntervalMessages), Type: kmsg.ConfigTypeLong},
		{Name: "log.retention.bytes", Value: ms(cfg.LogRetentionBytes), Type: kmsg.ConfigTypeLong},
		{Name: "log.retention.check.interval.ms", Value: ms(cfg.LogRetentionCheck.Milliseconds()), Type: kmsg.ConfigTypeLong},
		{Name: "log.retention.ms", Value: retention, Type: kmsg.ConfigTypeLong},
		{Name: "log.segment.bytes", Value: ms(cfg.LogSegmentBytes), Type: kmsg.ConfigTypeInt},
		{Name: "message.max.bytes", Value: strconv.Itoa(int(cfg.MessageMaxBytes)), Type: kmsg.ConfigTypeInt},
		{Name: "node.id", Value: strconv.Itoa(int(c.Env.NodeID)), Type: kmsg.ConfigTypeInt},
		{Name: "num.partitions", Value: strconv.Itoa(int(cfg.NumPartitions)), Type: kmsg.ConfigTypeInt},
		{Name: "offsets.retention.minutes", Value: ms(int64(cfg.OffsetsRetention.Minutes())), Type: kmsg.ConfigTypeInt},
	}
}
