package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/config"
	"kaas/storage"
)

// Dynamic broker configs, as Apache's DynamicBrokerConfig and DynamicLogConfig: the
// broker defaults of the topic configs kaas applies may be changed at runtime, for the
// whole cluster (a BROKER resource named "") or for one broker (named by its id), with
// AlterConfigs and IncrementalAlterConfigs. They are kept with the topic catalogue, in
// <data>/topics/~broker-configs.json ('~' is not a topic name character), written by the
// broker that writes the catalogue through its queue before the answer, and read again
// by the others at each catalogue tick. A topic config falls back, where the topic does
// not override it, to this broker's dynamic value, then the cluster-wide one, then the
// setting the broker started with, then Apache's default; a change is given at once to
// the running partitions (retention, rolling, flushing, cleaning) and published to the
// connections (max.message.bytes, timestamps, compression, compaction's key check).

// brokerConfigFile holds the dynamic broker configs, beside the topics.
const brokerConfigFile = "~broker-configs.json"

// brokerSynonyms are the broker configs kaas changes at runtime, each the default of a
// topic config it applies (Apache's ServerTopicConfigSynonyms), sorted by broker name.
var brokerSynonyms = []struct{ broker, topic string }{
	{"compression.type", "compression.type"},
	{"log.cleaner.delete.retention.ms", "delete.retention.ms"},
	{"log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"},
	{"log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio"},
	{"log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"},
	{"log.cleanup.policy", "cleanup.policy"},
	{"log.flush.interval.messages", "flush.messages"},
	{"log.flush.interval.ms", "flush.ms"},
	{"log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms"},
	{"log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms"},
	{"log.message.timestamp.difference.max.ms", "message.timestamp.difference.max.ms"},
	{"log.message.timestamp.type", "message.timestamp.type"},
	{"log.retention.bytes", "retention.bytes"},
	{"log.retention.ms", "retention.ms"},
	{"log.roll.jitter.ms", "segment.jitter.ms"},
	{"log.roll.ms", "segment.ms"},
	{"log.segment.bytes", "segment.bytes"},
	{"message.max.bytes", "max.message.bytes"},
}

// brokerToTopic and topicToBroker index brokerSynonyms.
var brokerToTopic, topicToBroker = func() (map[string]string, map[string]string) {
	b, t := map[string]string{}, map[string]string{}
	for _, s := range brokerSynonyms {
		b[s.broker], t[s.topic] = s.topic, s.broker
	}
	return b, t
}()

// staticHere are broker configs Apache changes at runtime that kaas reads at start only
// or has no use for (the other log synonyms, the cleaner's, the connection quotas,
// producer-state expiry, the thread pools):
// a change is refused with INVALID_CONFIG, since it would not be applied.
var staticHere = map[string]bool{
	"log.retention.minutes": true, "log.retention.hours": true, "log.roll.hours": true,
	"log.roll.jitter.hours": true, "log.index.size.max.bytes": true, "log.index.interval.bytes": true,
	"log.segment.delete.delay.ms": true, "log.preallocate": true, "log.message.downconversion.enable": true,
	"unclean.leader.election.enable": true, "min.insync.replicas": true, "log.local.retention.ms": true,
	"log.local.retention.bytes": true, "log.cleaner.threads": true, "log.cleaner.dedupe.buffer.size": true,
	"log.cleaner.io.buffer.load.factor": true, "log.cleaner.io.buffer.size": true,
	"log.cleaner.io.max.bytes.per.second": true, "log.cleaner.backoff.ms": true,
	"max.connections": true, "max.connections.per.ip": true, "max.connections.per.ip.overrides": true,
	"producer.id.expiration.ms": true, "num.io.threads": true, "num.network.threads": true,
	"num.replica.fetchers": true, "num.recovery.threads.per.data.dir": true, "background.threads": true,
}

// IsDynamicBrokerConfig reports whether kaas changes the broker config name at runtime.
func IsDynamicBrokerConfig(name string) bool { _, ok := brokerToTopic[name]; return ok }

// IsStaticHere reports whether name is a broker config Apache changes at runtime and
// kaas reads at start only.
func IsStaticHere(name string) bool { return staticHere[name] }

// CheckBrokerConfig checks a value of a dynamic broker config as the topic config it is
// the default of is checked (its type, Apache's range), the error naming the broker
// config as Apache's ConfigException does.
func CheckBrokerConfig(name, v string) error {
	topic, ok := brokerToTopic[name]
	if !ok {
		return fmt.Errorf("Cannot update these configs dynamically: Set(%s)", name)
	}
	return checkTopicValue(name, topic, v)
}

// BrokerConfigs are the dynamic broker configs (broker config name to value): the
// cluster-wide defaults and each broker's own, by id. A value once published is never
// changed (copy on write).
type BrokerConfigs struct {
	Default map[string]string            `json:"default,omitempty"`
	Brokers map[string]map[string]string `json:"brokers,omitempty"`
}

// Scope is the configs of a BROKER resource: "" the cluster-wide defaults, else the
// broker of that id.
func (b *BrokerConfigs) Scope(resource string) map[string]string {
	if b == nil {
		return nil
	}
	if resource == "" {
		return b.Default
	}
	return b.Brokers[resource]
}

// with is b with resource's configs replaced.
func (b *BrokerConfigs) with(resource string, configs map[string]string) *BrokerConfigs {
	out := &BrokerConfigs{}
	if b != nil {
		out.Default = b.Default
		out.Brokers = maps.Clone(b.Brokers)
	}
	if len(configs) == 0 {
		configs = nil
	}
	if resource == "" {
		out.Default = configs
		return out
	}
	if out.Brokers == nil {
		out.Brokers = map[string]map[string]string{}
	}
	out.Brokers[resource] = configs
	if configs == nil {
		delete(out.Brokers, resource)
	}
	if len(out.Brokers) == 0 {
		out.Brokers = nil
	}
	return out
}

func (b *BrokerConfigs) equal(o *BrokerConfigs) bool {
	if !maps.Equal(b.Scope(""), o.Scope("")) {
		return false
	}
	var bb, ob map[string]map[string]string
	if b != nil {
		bb = b.Brokers
	}
	if o != nil {
		ob = o.Brokers
	}
	return maps.EqualFunc(bb, ob, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// topicDefaults are the topic configs' dynamic defaults on broker node: its own values
// over the cluster-wide ones, by topic config name.
func (b *BrokerConfigs) topicDefaults(node int32) map[string]string {
	out := map[string]string{}
	for n, v := range b.Scope("") {
		if t, ok := brokerToTopic[n]; ok {
			out[t] = v
		}
	}
	for n, v := range b.Scope(strconv.Itoa(int(node))) {
		if t, ok := brokerToTopic[n]; ok {
			out[t] = v
		}
	}
	return out
}

func loadBrokerConfigs(fsys storage.FS, root string) (*BrokerConfigs, error) {
	data, err := fsys.ReadFile(filepath.Join(root, brokerConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &BrokerConfigs{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read dynamic broker configs: %w", err)
	}
	var b BrokerConfigs
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("dynamic broker configs: corrupt %s: %w", brokerConfigFile, err)
	}
	return &b, nil
}

func saveBrokerConfigs(fsys storage.FS, root string, b *BrokerConfigs) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return fmt.Errorf("encode dynamic broker configs: %w", err)
	}
	return storage.WriteFileAtomic(fsys, root, brokerConfigFile, data)
}

// defaults are what a topic's configs fall back to where it does not override them.
type defaults struct {
	static *config.Config
	dyn    map[string]string // dynamic defaults by topic config name
}

// of is a topic config's value: the override, else the dynamic broker default, else the
// static one.
func (d defaults) of(overrides map[string]string, name string) string {
	if v, ok := overrides[name]; ok {
		return v
	}
	if v, ok := d.dyn[name]; ok {
		return v
	}
	return topicConfigs[name].def(d.static)
}

func (m *manager) defaults() defaults { return defaults{static: m.cfg.Broker, dyn: m.dynTopic} }

// alterBrokerConfigs changes a BROKER resource's dynamic configs (the writer of the
// catalogue: a broker resource forwarded by another broker names that broker).
func (m *manager) alterBrokerConfigs(ctx actor.Context, ch TopicConfigChange, validateOnly bool, answer func(TopicInfo)) {
	if m.dynUnread {
		m.readBrokerConfigs(ctx)
		if m.dynUnread {
			// Written now, the file would lose the configs it holds.
			answer(failed(ch.Name, kerr.KafkaStorageError.Code, "the dynamic broker configs on disk could not be read"))
			return
		}
	}
	latest := m.dyn
	if m.dynQueued != nil {
		latest = m.dynQueued
	}
	base := latest.Scope(ch.Name)
	next, code, msg := m.changedBrokerConfigs(base, ch)
	if code != 0 {
		answer(failed(ch.Name, code, msg))
		return
	}
	if validateOnly || maps.Equal(next, base) {
		answer(TopicInfo{Name: ch.Name})
		return
	}
	all := latest.with(ch.Name, next)
	m.dynQueued = all
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error { return saveBrokerConfigs(fsys, root, all) }, func(ctx actor.Context, err error) {
		if m.dynQueued == all {
			m.dynQueued = nil
		}
		if err != nil {
			m.log.Error().Err(err).Str("resource", ch.Name).Msg("broker_configs_alter_failed")
			answer(failed(ch.Name, kerr.KafkaStorageError.Code, "the dynamic broker configs could not be written to disk"))
			return
		}
		m.setBrokerConfigs(ctx, all)
		answer(TopicInfo{Name: ch.Name})
	})
}

// changedBrokerConfigs applies a change to a BROKER resource's dynamic configs and checks
// the result as Apache's ConfigAdminManager does (a failed check of a broker config is
// INVALID_REQUEST there, KAFKA-13609).
func (m *manager) changedBrokerConfigs(base map[string]string, ch TopicConfigChange) (map[string]string, int16, string) {
	if ch.Name != "" {
		if _, err := strconv.ParseInt(ch.Name, 10, 32); err != nil {
			return nil, kerr.InvalidRequest.Code, "Node id must be an integer, but it is: " + ch.Name
		}
	}
	next, code, msg := applyConfigOps(base, ch, func(next map[string]string, op ConfigOp) (int16, string) {
		switch op.Op {
		case int8(kmsg.IncrementalAlterConfigOpAppend), int8(kmsg.IncrementalAlterConfigOpSubtract):
			topic, ok := brokerToTopic[op.Name]
			if !ok || topicConfigs[topic].typ != kmsg.ConfigTypeList {
				verb := "append"
				if op.Op == int8(kmsg.IncrementalAlterConfigOpSubtract) {
					verb = "subtract"
				}
				return kerr.InvalidConfig.Code, fmt.Sprintf("Config value %s is not allowed for config key: %s", verb, op.Name)
			}
			cur, ok := next[op.Name]
			if !ok {
				cur = m.defaults().of(nil, topic)
			}
			next[op.Name] = editList(cur, op.Value, op.Op == int8(kmsg.IncrementalAlterConfigOpAppend))
			return 0, ""
		}
		return kerr.InvalidRequest.Code, fmt.Sprintf("Unknown operations type %d", op.Op)
	})
	if code != 0 {
		return nil, code, msg
	}
	var fixed []string
	for n := range next {
		if !IsDynamicBrokerConfig(n) {
			fixed = append(fixed, n)
		}
	}
	if len(fixed) > 0 {
		sort.Strings(fixed)
		return nil, kerr.InvalidRequest.Code, "Cannot update these configs dynamically: Set(" + strings.Join(fixed, ", ") + ")"
	}
	names := make([]string, 0, len(next))
	for n := range next {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := CheckBrokerConfig(n, next[n]); err != nil {
			return nil, kerr.InvalidRequest.Code, err.Error()
		}
	}
	return next, 0, ""
}

// setBrokerConfigs makes b the dynamic broker configs in force: every running partition
// gets its topic's configs again and the catalogue is published.
func (m *manager) setBrokerConfigs(ctx actor.Context, b *BrokerConfigs) {
	if b.equal(m.dyn) {
		return
	}
	m.dyn, m.dynTopic = b, b.topicDefaults(m.cfg.NodeID)
	for _, t := range m.topics {
		if !t.deleting {
			m.reconfigurePartitions(ctx, t)
		}
	}
	m.publish()
	m.log.Info().Int("cluster_defaults", len(b.Default)).Int("own", len(b.Scope(strconv.Itoa(int(m.cfg.NodeID))))).
		Msg("dynamic_broker_configs_applied")
}

// readBrokerConfigsAgain asks the topics manager to read the dynamic broker configs
// again (a broker that forwarded a change of them to the writer).
type readBrokerConfigsAgain struct{}

// ReadBrokerConfigsMessage is the message that asks it.
func ReadBrokerConfigsMessage() any { return &readBrokerConfigsAgain{} }

func (m *manager) onReadBrokerConfigs(ctx actor.Context) {
	c := m.cfg.Cluster
	if c == nil || c.Catalogue() && m.ownCatalogue || m.stopping {
		return
	}
	m.readBrokerConfigs(ctx)
}

// readBrokerConfigs reads the dynamic broker configs again (a broker that does not write
// the catalogue) and applies them if they changed.
func (m *manager) readBrokerConfigs(ctx actor.Context) {
	b, err := loadBrokerConfigs(m.cfg.FS, m.root)
	if err != nil {
		// Logged once per reason, not at every tick; the configs in force stay.
		if reason := clip(err.Error(), 256); reason != m.dynReadErr {
			m.dynReadErr = reason
			m.log.Warn().Str("reason", reason).Msg("dynamic_broker_configs_not_read")
		}
		return
	}
	m.dynReadErr, m.dynUnread = "", false
	m.setBrokerConfigs(ctx, b)
}

// BrokerConfigs are the dynamic broker configs published with the catalogue (nil before
// the first publish).
func (c *Catalog) BrokerConfigs() *BrokerConfigs { return c.p.Load().brokerConfigs }

// Synonym is one source of a config's value, in Apache's order of precedence.
type Synonym struct {
	Name, Value string
	Source      kmsg.ConfigSource
}

// layers are the dynamic sources of the broker config name on broker node, most
// precedent first: its own value (perBroker only), then the cluster-wide one.
func (b *BrokerConfigs) layers(name string, node int32, perBroker bool) []Synonym {
	var out []Synonym
	if v, ok := b.Scope(strconv.Itoa(int(node)))[name]; ok && perBroker {
		out = append(out, Synonym{name, v, kmsg.ConfigSourceDynamicBrokerConfig})
	}
	if v, ok := b.Scope("")[name]; ok {
		out = append(out, Synonym{name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig})
	}
	return out
}

// BrokerEntry is a broker config as DescribeConfigs shows it on broker node: static is
// the setting it started with (its source STATIC_BROKER_CONFIG or DEFAULT_CONFIG),
// under any dynamic values; perBroker false describes the cluster-wide resource, which
// leaves this broker's own values out.
func (b *BrokerConfigs) BrokerEntry(static ConfigEntry, src kmsg.ConfigSource, node int32, perBroker bool) ConfigEntry {
	e := static
	e.Synonyms = append(b.layers(static.Name, node, perBroker), Synonym{static.Name, static.Value, src})
	e.Value, e.Source = e.Synonyms[0].Value, e.Synonyms[0].Source
	e.Default = e.Source == kmsg.ConfigSourceDefaultConfig
	return e
}

// DynamicBrokerStatics are the broker configs kaas changes at runtime that the broker
// description does not list otherwise, with their static values (the topic configs'
// defaults).
func DynamicBrokerStatics(c *config.Config, listed map[string]bool) []ConfigEntry {
	var out []ConfigEntry
	for _, s := range brokerSynonyms {
		if !listed[s.broker] {
			def := topicConfigs[s.topic]
			out = append(out, ConfigEntry{Name: s.broker, Value: def.def(c), Default: true, Type: def.typ})
		}
	}
	return out
}
