package conn

import (
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
// defaults they fall back to (DEFAULT_CONFIG). The broker shows the log and topic
// settings it runs with (STATIC_BROKER_CONFIG), which is what kadm and the usual tools
// read. Broker loggers have nothing to show. Groups (KIP-848) show the group configs kaas
// applies, as Apache's ConfigHelper: GROUP_CONFIG when the group sets one, else
// DEFAULT_CONFIG with the broker's group.consumer.* setting; read again from the
// catalogue first in a cluster, so a change made through any broker shows at once.
func init() { register(32, 0, 4, handleDescribeConfigs) }

func handleDescribeConfigs(c *Call) {
	req := c.Req.(*kmsg.DescribeConfigsRequest)
	var names, groups []string
	for _, r := range req.Resources {
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			names = append(names, r.ResourceName)
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
				for _, e := range partition.TopicConfigs(c.Env.Config, ti.Configs) {
					src := kmsg.ConfigSourceDynamicTopicConfig
					if e.Default {
						src = kmsg.ConfigSourceDefaultConfig
					}
					addConfig(&rr, req, r.ConfigNames, e.Name, e.Value, src, e.Type)
				}
			case kmsg.ConfigResourceTypeBroker:
				if r.ResourceName != "" && r.ResourceName != strconv.Itoa(int(c.Env.NodeID)) {
					rr.ErrorCode = kerr.InvalidRequest.Code
					msg := "Unexpected broker id, expected " + strconv.Itoa(int(c.Env.NodeID)) + " or empty string, but received " + r.ResourceName
					rr.ErrorMessage = &msg
					break
				}
				for _, e := range brokerConfigs(c) {
					addConfig(&rr, req, r.ConfigNames, e.Name, e.Value, kmsg.ConfigSourceStaticBrokerConfig, e.Type)
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
	if len(names) == 0 && len(groups) == 0 || noTopics(c) {
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
		addConfig(rr, req, only, e.name, value, src, kmsg.ConfigTypeInt)
		if len(rr.Configs) > n && req.IncludeDocumentation {
			rr.Configs[n].Documentation = strPtr(partition.GroupConfigDocs[e.name])
		}
	}
}

func addConfig(rr *kmsg.DescribeConfigsResponseResource, req *kmsg.DescribeConfigsRequest, only []string,
	name, value string, src kmsg.ConfigSource, typ kmsg.ConfigType) {
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
	v := value
	rc.Value = &v
	rc.Source = src
	rc.IsDefault = src == kmsg.ConfigSourceDefaultConfig
	rc.ConfigType = typ
	if req.IncludeSynonyms && req.Version >= 1 {
		syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		syn.Name, syn.Value, syn.Source = name, &v, src
		rc.ConfigSynonyms = append(rc.ConfigSynonyms, syn)
	}
	rr.Configs = append(rr.Configs, rc)
}

// brokerConfigs are the broker settings a topic falls back to, under Apache's names.
func brokerConfigs(c *Call) []partition.ConfigEntry {
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
