package conn

import (
	"strconv"

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
// read. Broker loggers have nothing to show.
func init() { register(32, 0, 4, handleDescribeConfigs) }

func handleDescribeConfigs(c *Call) {
	req := c.Req.(*kmsg.DescribeConfigsRequest)
	var names []string
	for _, r := range req.Resources {
		if r.ResourceType == kmsg.ConfigResourceTypeTopic {
			names = append(names, r.ResourceName)
		}
	}
	build := func(res *partition.Described) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		k := 0
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
			default:
				rr.ErrorCode = kerr.InvalidRequest.Code
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	}
	if len(names) == 0 || noTopics(c) {
		c.Respond(build(nil))
		return
	}
	reply := c.Await(func(v any) kmsg.Response { return build(v.(*partition.Described)) })
	askTopics(c, &partition.Describe{Names: names, Fresh: true, Reply: reply})
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
