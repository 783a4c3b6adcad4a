package partition

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/config"
)

// ConfigEntry is one topic config as DescribeConfigs shows it.
type ConfigEntry struct {
	Name    string
	Value   string
	Default bool // true: the broker default, no topic override
	Type    kmsg.ConfigType
	// Source is where Value comes from, Synonyms every source that sets the config,
	// most precedent first (Value's the first), as Apache lists them.
	Source   kmsg.ConfigSource
	Synonyms []Synonym
}

// topicConfigDef is one of Apache's topic configs (TopicConfig / LogConfig): its type and
// the broker default it falls back to.
type topicConfigDef struct {
	typ kmsg.ConfigType
	def func(c *config.Config) string
}

func constant(v string) func(*config.Config) string { return func(*config.Config) string { return v } }

func msOf(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// topicConfigs are the topic configs Apache accepts. None is accepted and shown without
// being true (topicrules.go holds what each may be, with Apache's ranges):
//   - applied: retention.ms, retention.bytes, segment.bytes, segment.ms and
//     segment.jitter.ms (rolls, timeroll.go), max.message.bytes, flush.messages, flush.ms,
//     cleanup.policy, min.cleanable.dirty.ratio, min.compaction.lag.ms,
//     max.compaction.lag.ms, delete.retention.ms, message.timestamp.type and message.timestamp.before.max.ms,
//     .after.max.ms and .difference.max.ms (timestamps.go), compression.type
//     (recompress.go);
//   - refused past what kaas does (INVALID_CONFIG): min.insync.replicas above 1,
//     remote.storage.enable=true;
//   - accepted with no effect on one copy of the log on one volume, as the README's
//     Limitations list them: the replication throttles, unclean.leader.election.enable,
//     local.retention.ms and .bytes (no remote storage, as in Apache without it),
//     preallocate, segment.index.bytes, index.interval.bytes, file.delete.delay.ms,
//     message.downconversion.enable, message.format.version (Apache 3.0+ ignores it too).
var topicConfigs = map[string]topicConfigDef{
	"cleanup.policy":                          {kmsg.ConfigTypeList, constant("delete")},
	"compression.type":                        {kmsg.ConfigTypeString, constant("producer")},
	"delete.retention.ms":                     {kmsg.ConfigTypeLong, constant("86400000")},
	"file.delete.delay.ms":                    {kmsg.ConfigTypeLong, constant("60000")},
	"flush.messages":                          {kmsg.ConfigTypeLong, func(c *config.Config) string { return strconv.FormatInt(c.LogFlushIntervalMessages, 10) }},
	"flush.ms":                                {kmsg.ConfigTypeLong, constant("9223372036854775807")},
	"follower.replication.throttled.replicas": {kmsg.ConfigTypeList, constant("")},
	"index.interval.bytes":                    {kmsg.ConfigTypeInt, constant(strconv.Itoa(indexInterval))},
	"leader.replication.throttled.replicas":   {kmsg.ConfigTypeList, constant("")},
	"local.retention.bytes":                   {kmsg.ConfigTypeLong, constant("-2")},
	"local.retention.ms":                      {kmsg.ConfigTypeLong, constant("-2")},
	"max.compaction.lag.ms":                   {kmsg.ConfigTypeLong, constant("9223372036854775807")},
	"max.message.bytes":                       {kmsg.ConfigTypeInt, func(c *config.Config) string { return strconv.Itoa(int(c.MessageMaxBytes)) }},
	"message.downconversion.enable":           {kmsg.ConfigTypeBoolean, constant("true")},
	"message.format.version":                  {kmsg.ConfigTypeString, constant("3.0-IV1")},
	"message.timestamp.after.max.ms":          {kmsg.ConfigTypeLong, constant("9223372036854775807")},
	"message.timestamp.before.max.ms":         {kmsg.ConfigTypeLong, constant("9223372036854775807")},
	"message.timestamp.difference.max.ms":     {kmsg.ConfigTypeLong, constant("9223372036854775807")},
	"message.timestamp.type":                  {kmsg.ConfigTypeString, constant("CreateTime")},
	"min.cleanable.dirty.ratio":               {kmsg.ConfigTypeDouble, constant("0.5")},
	"min.compaction.lag.ms":                   {kmsg.ConfigTypeLong, constant("0")},
	"min.insync.replicas":                     {kmsg.ConfigTypeInt, constant("1")},
	"preallocate":                             {kmsg.ConfigTypeBoolean, constant("false")},
	"remote.storage.enable":                   {kmsg.ConfigTypeBoolean, constant("false")},
	"retention.bytes":                         {kmsg.ConfigTypeLong, func(c *config.Config) string { return strconv.FormatInt(c.LogRetentionBytes, 10) }},
	"retention.ms":                            {kmsg.ConfigTypeLong, func(c *config.Config) string { return msOf(c.LogRetention) }},
	"segment.bytes":                           {kmsg.ConfigTypeInt, func(c *config.Config) string { return strconv.FormatInt(c.LogSegmentBytes, 10) }},
	"segment.index.bytes":                     {kmsg.ConfigTypeInt, constant("10485760")},
	"segment.jitter.ms":                       {kmsg.ConfigTypeLong, constant("0")},
	"segment.ms":                              {kmsg.ConfigTypeLong, constant("604800000")},
	"unclean.leader.election.enable":          {kmsg.ConfigTypeBoolean, constant("false")},
}

// validateTopicConfigs checks a topic's configs (CreateTopics, AlterConfigs and
// IncrementalAlterConfigs alike) as Apache's LogConfig.validate does: a known name, a
// value of its type within Apache's range (INVALID_CONFIG otherwise), then what kaas
// refuses because it would not apply it (topicrules.go).
func validateTopicConfigs(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for k := range configs {
		names = append(names, k)
	}
	sort.Strings(names) // the first bad one by name, the same answer every time
	for _, k := range names {
		if _, ok := topicConfigs[k]; !ok {
			return fmt.Errorf("Unknown topic config name: %s", k)
		}
		if err := checkTopicValue(k, k, configs[k]); err != nil {
			return err
		}
	}
	// Apache's LogConfig.validateValues: the compaction lags, each an override or its
	// default (0 and Long.MAX_VALUE), in order.
	minLag, maxLag := int64(0), int64(math.MaxInt64)
	if v, ok := configs["min.compaction.lag.ms"]; ok {
		minLag, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := configs["max.compaction.lag.ms"]; ok {
		maxLag, _ = strconv.ParseInt(v, 10, 64)
	}
	if minLag > maxLag {
		return fmt.Errorf("conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)", minLag, maxLag)
	}
	return nil
}

// checkTopicValue checks v as a value of the topic config topic (a value of its type
// within its range), naming it name in the error: the topic config itself, or the
// broker config it is the default of (brokerconfigs.go).
func checkTopicValue(name, topic, v string) error {
	def := topicConfigs[topic]
	var err error
	switch def.typ {
	case kmsg.ConfigTypeInt:
		_, err = strconv.ParseInt(v, 10, 32)
	case kmsg.ConfigTypeLong:
		_, err = strconv.ParseInt(v, 10, 64)
	case kmsg.ConfigTypeDouble:
		_, err = strconv.ParseFloat(v, 64)
	case kmsg.ConfigTypeBoolean:
		_, err = strconv.ParseBool(v)
	}
	if err != nil {
		return fmt.Errorf("Invalid value %s for configuration %s: not a %s", v, name, def.typ.String())
	}
	if rule := topicRules[topic]; rule != nil {
		return rule(name, v)
	}
	return nil
}

// TopicConfigs lists every topic config of a topic on broker node: its overrides
// (DYNAMIC_TOPIC_CONFIG), the broker defaults for the rest: a dynamic broker config of
// its synonym (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG), else the static
// default (DEFAULT_CONFIG), sorted by name (DescribeConfigs, CreateTopics).
func TopicConfigs(c *config.Config, dyn *BrokerConfigs, node int32, overrides map[string]string) []ConfigEntry {
	out := make([]ConfigEntry, 0, len(topicConfigs))
	for name, def := range topicConfigs {
		e := ConfigEntry{Name: name, Type: def.typ}
		if v, ok := overrides[name]; ok {
			e.Synonyms = append(e.Synonyms, Synonym{name, v, kmsg.ConfigSourceDynamicTopicConfig})
		}
		static := name
		if b, ok := topicToBroker[name]; ok {
			e.Synonyms = append(e.Synonyms, dyn.layers(b, node, true)...)
			static = b
		}
		e.Synonyms = append(e.Synonyms, Synonym{static, def.def(c), kmsg.ConfigSourceDefaultConfig})
		e.Value, e.Source = e.Synonyms[0].Value, e.Synonyms[0].Source
		e.Default = e.Source == kmsg.ConfigSourceDefaultConfig
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// effective is the value of a topic config: the override or the broker default.
func effective(d defaults, overrides map[string]string, name string) int64 {
	n, _ := strconv.ParseInt(d.of(overrides, name), 10, 64)
	return n
}

// checkCleanupPolicy accepts Apache's "delete", "compact" and both (compact.go). An
// empty list (no cleanup at all in Apache) is refused: kaas would delete by retention.
func checkCleanupPolicy(name, v string) error {
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(p) {
		case "delete", "compact":
		default:
			if strings.TrimSpace(v) == "" {
				return fmt.Errorf("Invalid value %q for configuration %s: kaas applies only \"delete\" and \"compact\" (a topic without cleanup is not supported yet)", v, name)
			}
			return fmt.Errorf("Invalid value %s for configuration %s: String must be one of: compact, delete", v, name)
		}
	}
	return nil
}
