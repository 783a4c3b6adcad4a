package partition

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
)

// Changing a topic's configs (AlterConfigs, IncrementalAlterConfigs), as Apache's
// ConfigurationControlManager does: the new set of overrides is computed, validated as
// CreateTopics validates them (validateTopicConfigs), the topic looked up, and the
// catalogue entry written through the catalogue's queue. Once written, the running
// partitions get the values they apply (reconfigure) and the published catalogue the
// topic's max.message.bytes; brokers that do not write the catalogue pick the entry up
// when they read it again (onCatalogTick, refreshEntries).

func (m *manager) handleAlterConfigs(ctx actor.Context, a *AlterTopicConfigs) {
	names := topicNames(a.Topics, func(t TopicConfigChange) string { return t.Name })
	if m.notWriter() {
		out := &Created{Groups: make([]GroupConfigResult, len(a.Groups))}
		for _, n := range names {
			out.Topics = append(out.Topics, failed(n, kerr.NotController.Code, notControllerMsg))
		}
		for i := range out.Groups {
			out.Groups[i] = GroupConfigResult{ErrorCode: kerr.NotController.Code, ErrorMessage: notControllerMsg}
		}
		a.Reply.Resolve(out)
		return
	}
	_, out, _ := m.writerChecks(names, a.Reply)
	w := newWaitAll(func() { a.Reply.Resolve(out) })
	w.add()
	m.alterGroupConfigs(ctx, a, func(rs []GroupConfigResult) {
		out.Groups = rs
		w.done()
	})
	for i, ch := range a.Topics {
		if ch.Broker {
			w.add()
			m.alterBrokerConfigs(ctx, ch, a.ValidateOnly, func(ti TopicInfo) {
				out.Topics[i] = ti
				w.done()
			})
			continue
		}
		t := m.topics[ch.Name]
		if t != nil && t.deleting {
			t = nil
		}
		base := map[string]string{}
		if t != nil {
			base = t.latest().Configs
		}
		next, code, msg := m.changedConfigs(base, ch)
		if ch.Name == "" {
			code, msg = kerr.InvalidRequest.Code, "Default topic resources are not allowed."
		} else if err := ValidateTopicName(ch.Name); err != nil {
			code, msg = kerr.InvalidTopicException.Code, err.Error()
		}
		if code == 0 && t == nil {
			code, msg = kerr.UnknownTopicOrPartition.Code, fmt.Sprintf("The topic '%s' does not exist.", ch.Name)
		}
		if code != 0 {
			out.Topics[i] = failed(ch.Name, code, msg)
			continue
		}
		if a.ValidateOnly || maps.Equal(next, base) {
			out.Topics[i] = TopicInfo{Name: ch.Name, ID: t.id}
			continue
		}
		w.add()
		m.alter(ctx, t, next, func(ti TopicInfo) {
			out.Topics[i] = ti
			w.done()
		})
	}
	w.done()
}

// changedConfigs applies a change to a topic's overrides and validates the result: the
// new overrides, or the error code and message to answer.
func (m *manager) changedConfigs(base map[string]string, ch TopicConfigChange) (map[string]string, int16, string) {
	next, code, msg := applyConfigOps(base, ch, func(next map[string]string, op ConfigOp) (int16, string) {
		switch op.Op {
		case int8(kmsg.IncrementalAlterConfigOpAppend), int8(kmsg.IncrementalAlterConfigOpSubtract):
			def, ok := topicConfigs[op.Name]
			if !ok || def.typ != kmsg.ConfigTypeList {
				verb := "APPEND"
				if op.Op == int8(kmsg.IncrementalAlterConfigOpSubtract) {
					verb = "SUBTRACT"
				}
				return kerr.InvalidConfig.Code, fmt.Sprintf("Can't %s to key %s because its type is not LIST.", verb, op.Name)
			}
			cur := m.defaults().of(next, op.Name)
			next[op.Name] = editList(cur, op.Value, op.Op == int8(kmsg.IncrementalAlterConfigOpAppend))
			return 0, ""
		}
		return kerr.InvalidRequest.Code, fmt.Sprintf("Unknown operation type %d", op.Op)
	})
	if code != 0 {
		return nil, code, msg
	}
	if err := validateTopicConfigs(next); err != nil {
		return nil, kerr.InvalidConfig.Code, err.Error()
	}
	return next, 0, ""
}

// applyConfigOps is a resource's configs after a change: base, or the change's whole set
// for a legacy AlterConfigs (Replace), with its SET and DELETE operations applied and
// every other operation handed to other, which edits next or answers the code and
// message to refuse the change with (each resource type has its own APPEND, SUBTRACT
// and unknown-operation answers).
func applyConfigOps(base map[string]string, ch TopicConfigChange, other func(next map[string]string, op ConfigOp) (int16, string)) (map[string]string, int16, string) {
	next := maps.Clone(base)
	if ch.Replace {
		next = maps.Clone(ch.Configs)
	}
	if next == nil {
		next = map[string]string{}
	}
	for _, op := range ch.Ops {
		switch op.Op {
		case int8(kmsg.IncrementalAlterConfigOpSet):
			next[op.Name] = op.Value
		case int8(kmsg.IncrementalAlterConfigOpDelete):
			delete(next, op.Name)
		default:
			if code, msg := other(next, op); code != 0 {
				return nil, code, msg
			}
		}
	}
	return next, 0, ""
}

// editList appends the items of value to the list cur (those not in it yet), or
// subtracts them from it, as Apache's APPEND and SUBTRACT.
func editList(cur, value string, add bool) string {
	var parts []string
	for _, p := range strings.Split(cur, ",") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	for _, v := range strings.Split(value, ",") {
		i := slices.Index(parts, v)
		switch {
		case add && i < 0:
			parts = append(parts, v)
		case !add && i >= 0:
			parts = slices.Delete(parts, i, i+1)
		}
	}
	return strings.Join(parts, ",")
}

// latest is the catalogue entry t will have once its queued writes are made.
func (t *topicState) latest() *topicMeta {
	if t.queued != nil {
		return t.queued
	}
	return t.meta
}

// alter queues the write of t's catalogue entry with configs (built on the last one
// queued, as grow's are: a write of the topic queued behind a failed one still carries
// the failed one's change); once written, the topic's running partitions apply them.
func (m *manager) alter(ctx actor.Context, t *topicState, configs map[string]string, answer func(TopicInfo)) {
	meta := *t.latest()
	meta.Configs = configs
	if len(configs) == 0 {
		meta.Configs = nil
	}
	t.queued = &meta
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error { return saveMeta(fsys, root, &meta) }, func(ctx actor.Context, err error) {
		if t.queued == &meta {
			t.growTo, t.queued = 0, nil
		}
		if err != nil {
			m.log.Error().Err(err).Str("topic", meta.Name).Msg("topic_configs_alter_failed")
			answer(failed(meta.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
			return
		}
		m.applyMeta(ctx, t, &meta)
		m.log.Info().Str("topic", meta.Name).Int("overrides", len(meta.Configs)).Msg("topic_configs_altered")
		answer(TopicInfo{Name: meta.Name, ID: t.id})
	})
}

// applyMeta makes a written catalogue entry of t current: partitions it adds are
// started, changed configs given to the running partitions, and the catalogue published.
func (m *manager) applyMeta(ctx actor.Context, t *topicState, meta *topicMeta) {
	old := t.meta
	grown := meta.Partitions > old.Partitions
	reconf := !maps.Equal(meta.Configs, old.Configs)
	if !grown && !reconf {
		return
	}
	if meta.Partitions < old.Partitions {
		// Never shrink: an entry built on an older one that a grow since replaced.
		c := *meta
		c.Partitions, c.LeaderEpochs = old.Partitions, old.LeaderEpochs
		meta = &c
	}
	t.meta = meta
	if reconf {
		m.reconfigurePartitions(ctx, t)
	}
	if grown && !m.stopping {
		m.spawnPartitions(ctx, t)
	}
	// Published once the new partitions run: connections route to their actors, and
	// validate produced batches by the new max.message.bytes.
	m.publish()
}

// reconfigurePartitions gives t's running partitions the values of its configs.
func (m *manager) reconfigurePartitions(ctx actor.Context, t *topicState) {
	for p, pid := range t.pids {
		if pid == nil {
			continue
		}
		pc := m.partitionConfig(t.meta, int32(p))
		ctx.Send(pid, &reconfigure{segmentBytes: pc.SegmentBytes, retentionMS: pc.RetentionMS,
			retentionBytes: pc.RetentionBytes, flushMessages: pc.FlushMessages, cleaner: pc.Cleaner, timing: pc.Timing})
	}
}

// refreshEntries (a broker that does not write the catalogue) reads again the catalogue
// entries of the known topics named, so that a config changed through the writer is
// shown here at once (DescribeConfigs), not at the next catalogue tick.
func (m *manager) refreshEntries(ctx actor.Context, names []string) {
	c := m.cfg.Cluster
	if c == nil || c.Catalogue() && m.ownCatalogue || m.writing || len(m.jobs) > 0 {
		return
	}
	m.readBrokerConfigs(ctx)
	for _, n := range names {
		t := m.topics[n]
		if t == nil || t.deleting {
			continue
		}
		data, err := m.cfg.FS.ReadFile(filepath.Join(m.root, n, metaFile))
		if err != nil {
			continue
		}
		var meta topicMeta
		if json.Unmarshal(data, &meta) != nil || meta.Name != n || meta.ID != t.meta.ID || meta.Partitions < 1 {
			continue
		}
		for int32(len(meta.LeaderEpochs)) < meta.Partitions {
			meta.LeaderEpochs = append(meta.LeaderEpochs, 0)
		}
		m.applyMeta(ctx, t, &meta)
	}
}
