package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/config"
	"kaas/storage"
)

// Per-group configs (GROUP config resources, KIP-848), as Apache's GroupConfig keeps
// them: consumer.session.timeout.ms and consumer.heartbeat.interval.ms of one
// consumer-protocol group, set through AlterConfigs and IncrementalAlterConfigs. They
// live in the topic catalogue beside the topics, in one file written by the broker that
// writes the catalogue, through the catalogue's queue (durable before the answer, off
// the manager's Receive); the other brokers read it again with the catalogue
// (onCatalogTick) and before a DescribeConfigs of a group (Describe.Groups). The manager
// publishes the values (Catalog.ConsumerGroupTimes) for the group actors, which read
// them at each heartbeat.

const (
	// groupConfigsFile holds every group's configs ('~' is not a topic name character).
	groupConfigsFile = "~group-configs.json"

	// GroupSessionTimeoutConfig and GroupHeartbeatIntervalConfig are the group configs
	// kaas applies (Apache's GroupConfig names).
	GroupSessionTimeoutConfig    = "consumer.session.timeout.ms"
	GroupHeartbeatIntervalConfig = "consumer.heartbeat.interval.ms"
)

// GroupConfigDocs are the group configs' documentation (DescribeConfigs v3+), Apache's.
var GroupConfigDocs = map[string]string{
	GroupSessionTimeoutConfig:    "The timeout to detect client failures when using the consumer group protocol.",
	GroupHeartbeatIntervalConfig: "The heartbeat interval given to the members of a consumer group.",
}

// shareGroupConfigs are the share-group configs Apache knows: kaas has no share groups,
// so it applies none of them and refuses them.
var shareGroupConfigs = []string{"share.auto.offset.reset", "share.heartbeat.interval.ms",
	"share.record.lock.duration.ms", "share.session.timeout.ms"}

// GroupConfigResult is one group's outcome of an AlterTopicConfigs.
type GroupConfigResult struct {
	ErrorCode    int16
	ErrorMessage string
}

type groupConfigsData struct {
	Version int                          `json:"version"`
	Groups  map[string]map[string]string `json:"groups"`
}

// readGroupConfigs reads the group configs file under root (none: no group has any).
func readGroupConfigs(fsys storage.FS, root string) (map[string]map[string]string, error) {
	data, err := fsys.ReadFile(filepath.Join(root, groupConfigsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", groupConfigsFile, err)
	}
	var d groupConfigsData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", groupConfigsFile, err)
	}
	if d.Groups == nil {
		d.Groups = map[string]map[string]string{}
	}
	return d.Groups, nil
}

// saveGroupConfigs writes every group's configs atomically (tmp, fsync, rename,
// directory fsync).
func saveGroupConfigs(fsys storage.FS, root string, groups map[string]map[string]string) error {
	data, err := json.MarshalIndent(groupConfigsData{Version: 1, Groups: groups}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", groupConfigsFile, err)
	}
	return storage.WriteFileAtomic(fsys, root, groupConfigsFile, data)
}

// ValidateGroupConfigs checks a group's whole set of overrides as Apache's
// GroupConfigManager.validate does (each unset one at the broker's setting), and refuses
// the configs kaas does not apply: the code and message to answer, or 0.
func ValidateGroupConfigs(cfgs map[string]string, b *config.Config) (int16, string) {
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		switch {
		case name == GroupSessionTimeoutConfig || name == GroupHeartbeatIntervalConfig:
		case slices.Contains(shareGroupConfigs, name):
			return kerr.InvalidConfig.Code, "Group config " + name + " is not supported: kaas has no share groups."
		default:
			return kerr.InvalidConfig.Code, "Unknown group config name: " + name
		}
	}
	parse := func(name string, def time.Duration) (int64, string) {
		v, ok := cfgs[name]
		if !ok {
			return def.Milliseconds(), ""
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return 0, "Invalid value " + v + " for configuration " + name + ": Not a number of type INT"
		}
		if n < 1 {
			return 0, "Invalid value " + v + " for configuration " + name + ": Value must be at least 1"
		}
		return n, ""
	}
	session, msg := parse(GroupSessionTimeoutConfig, b.GroupConsumerSessionTimeout)
	if msg != "" {
		return kerr.InvalidConfig.Code, msg
	}
	heartbeat, msg := parse(GroupHeartbeatIntervalConfig, b.GroupConsumerHeartbeatInterval)
	if msg != "" {
		return kerr.InvalidConfig.Code, msg
	}
	switch {
	case heartbeat < b.GroupConsumerMinHeartbeatInterval.Milliseconds():
		msg = GroupHeartbeatIntervalConfig + " must be greater than or equal to group.consumer.min.heartbeat.interval.ms"
	case heartbeat > b.GroupConsumerMaxHeartbeatInterval.Milliseconds():
		msg = GroupHeartbeatIntervalConfig + " must be less than or equal to group.consumer.max.heartbeat.interval.ms"
	case session < b.GroupConsumerMinSessionTimeout.Milliseconds():
		msg = GroupSessionTimeoutConfig + " must be greater than or equal to group.consumer.min.session.timeout.ms"
	case session > b.GroupConsumerMaxSessionTimeout.Milliseconds():
		msg = GroupSessionTimeoutConfig + " must be less than or equal to group.consumer.max.session.timeout.ms"
	case session <= heartbeat:
		msg = GroupSessionTimeoutConfig + " must be greater than " + GroupHeartbeatIntervalConfig
	default:
		return 0, ""
	}
	return kerr.InvalidConfig.Code, msg
}

// changedGroupConfigs applies a change to a group's overrides and validates the result,
// in Apache's order (the operations, the name, the values): the new overrides, or the
// error code and message to answer.
func (m *manager) changedGroupConfigs(base map[string]string, ch TopicConfigChange) (map[string]string, int16, string) {
	next, code, msg := applyConfigOps(base, ch, func(_ map[string]string, op ConfigOp) (int16, string) {
		switch op.Op {
		case int8(kmsg.IncrementalAlterConfigOpAppend):
			return kerr.InvalidConfig.Code, "Can't APPEND to key " + op.Name + " because its type is not LIST."
		case int8(kmsg.IncrementalAlterConfigOpSubtract):
			return kerr.InvalidConfig.Code, "Can't SUBTRACT to key " + op.Name + " because its type is not LIST."
		}
		return kerr.InvalidRequest.Code, fmt.Sprintf("Unknown operation type %d", op.Op)
	})
	if code != 0 {
		return nil, code, msg
	}
	if ch.Name == "" {
		return nil, kerr.InvalidRequest.Code, "Default group resources are not allowed."
	}
	if code, msg := ValidateGroupConfigs(next, m.cfg.Broker); code != 0 {
		return nil, code, msg
	}
	return next, 0, ""
}

// latestGroupConfigs are the group configs once the queued writes are made.
func (m *manager) latestGroupConfigs() map[string]map[string]string {
	if m.groupCfgsQueued != nil {
		return m.groupCfgsQueued
	}
	return m.groupCfgs
}

// alterGroupConfigs changes the groups' configs of a, each checked on its own; the
// changes that pass are written together in one write of the file, and each group is
// answered once it is on disk. answer gets one result per group, in order.
func (m *manager) alterGroupConfigs(ctx actor.Context, a *AlterTopicConfigs, answer func([]GroupConfigResult)) {
	out := make([]GroupConfigResult, len(a.Groups))
	if len(a.Groups) == 0 {
		answer(out)
		return
	}
	if m.groupCfgs == nil {
		m.loadGroupConfigs() // unread at start: read again, never overwritten unread
	}
	if m.groupCfgs == nil {
		for i := range out {
			out[i] = GroupConfigResult{ErrorCode: kerr.KafkaStorageError.Code, ErrorMessage: "the group configs could not be read from disk"}
		}
		answer(out)
		return
	}
	all := maps.Clone(m.latestGroupConfigs())
	var written []int
	for i, ch := range a.Groups {
		base := all[ch.Name]
		next, code, msg := m.changedGroupConfigs(base, ch)
		if code != 0 {
			out[i] = GroupConfigResult{ErrorCode: code, ErrorMessage: msg}
			continue
		}
		if a.ValidateOnly || maps.Equal(next, base) {
			continue
		}
		if len(next) == 0 {
			delete(all, ch.Name)
		} else {
			all[ch.Name] = next
		}
		written = append(written, i)
	}
	if len(written) == 0 {
		answer(out)
		return
	}
	m.groupCfgsQueued = all
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error { return saveGroupConfigs(fsys, root, all) }, func(ctx actor.Context, err error) {
		if m.groupCfgsQueued != nil && maps.EqualFunc(m.groupCfgsQueued, all, maps.Equal) {
			m.groupCfgsQueued = nil
		}
		if err != nil {
			m.log.Error().Err(err).Int("groups", len(written)).Msg("group_configs_alter_failed")
			for _, i := range written {
				out[i] = GroupConfigResult{ErrorCode: kerr.KafkaStorageError.Code, ErrorMessage: "the group configs could not be written to disk"}
			}
			answer(out)
			return
		}
		m.setGroupConfigs(all)
		for _, i := range written {
			m.log.Info().Str("group", clip(a.Groups[i].Name, 256)).Int("overrides", len(all[a.Groups[i].Name])).Msg("group_configs_altered")
		}
		answer(out)
	})
}

// setGroupConfigs makes groups the group configs in force and publishes them.
func (m *manager) setGroupConfigs(groups map[string]map[string]string) {
	m.groupCfgs = groups
	if m.cfg.Catalog == nil {
		return
	}
	snap := make(map[string]groupTimes, len(groups))
	for g, cfgs := range groups {
		var t groupTimes
		if code, _ := ValidateGroupConfigs(cfgs, m.cfg.Broker); code == 0 {
			t.session = configMillis(cfgs[GroupSessionTimeoutConfig])
			t.heartbeat = configMillis(cfgs[GroupHeartbeatIntervalConfig])
		} else {
			// Written under other broker settings: shown, not applied until changed.
			m.log.Warn().Str("group", clip(g, 256)).Msg("group_config_not_applied")
		}
		snap[g] = t
	}
	m.cfg.Catalog.groups.Store(&snap)
}

// configMillis is a validated millisecond config as a duration (0: unset).
func configMillis(v string) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// loadGroupConfigs reads the group configs file again (at start, and on a broker that
// does not write the catalogue) and publishes it if it changed.
func (m *manager) loadGroupConfigs() {
	groups, err := readGroupConfigs(m.cfg.FS, m.root)
	if err != nil {
		// Logged once per reason, not at every catalogue tick; the configs in force stay.
		if reason := clip(err.Error(), 256); reason != m.groupCfgsReadErr {
			m.groupCfgsReadErr = reason
			m.log.Error().Str("reason", reason).Msg("group_configs_load_failed")
		}
		return
	}
	m.groupCfgsReadErr = ""
	if m.groupCfgs != nil && maps.EqualFunc(groups, m.groupCfgs, maps.Equal) {
		return
	}
	m.setGroupConfigs(groups)
}

// refreshGroupConfigs (a broker that does not write the catalogue) reads the group
// configs again before a DescribeConfigs answers them, so that a change made through
// the writer shows at once.
func (m *manager) refreshGroupConfigs() {
	c := m.cfg.Cluster
	if c == nil || c.Catalogue() && m.ownCatalogue || m.writing || len(m.jobs) > 0 {
		return
	}
	m.loadGroupConfigs()
}

// groupTimes are a group's consumer.* configs as the group actors apply them (0: the
// broker's setting).
type groupTimes struct{ session, heartbeat time.Duration }

// ConsumerGroupTimes is group's consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms, each 0 when the group does not set it (the broker's
// setting applies). Read without asking the manager (the group actors, at each
// heartbeat).
func (c *Catalog) ConsumerGroupTimes(group string) (session, heartbeat time.Duration) {
	p := c.groups.Load()
	if p == nil {
		return 0, 0
	}
	t := (*p)[group]
	return t.session, t.heartbeat
}
