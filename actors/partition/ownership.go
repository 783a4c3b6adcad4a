package partition

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kaas/actors/actor"
)

// In a cluster: the partitions this broker leads (a Rebalance from the ownership
// controller), and the catalogue re-read from the shared volume by a broker that does
// not write it.

func (m *manager) spawnOwned(ctx actor.Context, t *topicState, owns func(string, int32) bool) {
	for int32(len(t.pids)) < t.meta.Partitions {
		t.pids = append(t.pids, nil)
	}
	for p := int32(0); p < t.meta.Partitions; p++ {
		if t.pids[p] == nil && (owns == nil || owns(t.meta.Name, p)) {
			t.pids[p] = actor.Spawn(ctx, PartitionProps(m.partitionConfig(t.meta, p)))
		}
	}
}

// owns is the cluster's Owns (nil: a broker alone leads every partition).
func (m *manager) owns(topic string, p int32) bool {
	if c := m.cfg.Cluster; c != nil {
		return c.Owns(topic, p)
	}
	return true
}

// onRebalance stops the partitions no longer led here and starts the ones gained.
func (m *manager) onRebalance(ctx actor.Context, r *Rebalance) {
	waiting := map[string]bool{}
	for _, t := range m.topics {
		if t.deleting {
			continue
		}
		for p, pid := range t.pids {
			if pid != nil && !r.Owns(t.meta.Name, int32(p)) {
				waiting[pid.Id] = true
				ctx.Watch(pid)
				ctx.Poison(pid)
				t.pids[p] = nil
				t.partitionStopped(int32(p))
			}
		}
		m.spawnOwned(ctx, t, r.Owns)
	}
	m.publish()
	m.readEpochsOfOthers(ctx) // leaders moved: their epochs are read again
	if len(waiting) == 0 {
		r.Reply.Resolve(nil)
		return
	}
	m.log.Info().Int("partitions", len(waiting)).Msg("partitions_released")
	m.released = append(m.released, &releaseJob{waiting: waiting, reply: r.Reply})
}

type releaseJob struct {
	waiting map[string]bool
	reply   actor.Promise
}

// onCatalogTick re-reads the catalogue another broker writes: new topics, grown ones,
// ones whose configs changed and deleted ones.
func (m *manager) onCatalogTick(ctx actor.Context) {
	c := m.cfg.Cluster
	if c == nil || m.stopping || m.writing || len(m.jobs) > 0 {
		return
	}
	writer := c.Catalogue()
	if writer && m.ownCatalogue {
		return // this broker's memory is the catalogue
	}
	m.readBrokerConfigs(ctx)
	metas, errs := readCatalog(m.cfg.FS, m.root)
	if len(errs) > 0 {
		return // read again at the next tick
	}
	seen := map[string]bool{}
	changed := false
	for _, meta := range metas {
		seen[meta.Name] = true
		t := m.topics[meta.Name]
		switch {
		case t == nil:
			m.add(ctx, meta)
			changed = true
		case t.meta.ID != meta.ID:
			// Deleted and created again: the old one's partitions go first.
			m.dropTopic(ctx, t)
			m.add(ctx, meta)
			changed = true
		case meta.Partitions > t.meta.Partitions || !maps.Equal(meta.Configs, t.meta.Configs):
			m.applyMeta(ctx, t, meta) // grown, or its configs changed: publishes
		}
	}
	for name, t := range m.topics {
		if !seen[name] && !t.deleting {
			m.dropTopic(ctx, t)
			changed = true
		}
	}
	if changed {
		m.publish()
	}
	m.loadGroupConfigs()
	m.ownCatalogue = writer // read once more after taking the catalogue over
}

// missReadEvery bounds the catalogue re-reads that lookups of unknown topic ids, and of
// partitions past a known topic's count, cause.
const missReadEvery = 100 * time.Millisecond

// readOnMiss re-reads the catalogue another broker writes when a request names a topic
// this broker does not know: a topic just created (or grown) through the writer is known
// here at once (Metadata, DescribeConfigs, the existence check of OffsetCommit), not at
// the next catalogue tick, as a client that creates a topic and then asks any broker
// about it expects. A name is first looked for on disk (an unknown name costs one failed
// read); an unknown id, or a partition past a known topic's count (beyond), re-reads at
// most every missReadEvery.
func (m *manager) readOnMiss(ctx actor.Context, names []string, ids []TopicID, beyond bool) {
	c := m.cfg.Cluster
	if c == nil || c.Catalogue() && m.ownCatalogue {
		return
	}
	miss := false
	for _, n := range names {
		if m.topics[n] == nil && m.entryOnDisk(n) {
			miss = true
			break
		}
	}
	if !miss && (beyond || slices.ContainsFunc(ids, func(id TopicID) bool { return m.byID[id] == nil })) &&
		time.Since(m.missRead) >= missReadEvery {
		miss, m.missRead = true, time.Now()
	}
	if miss {
		m.onCatalogTick(ctx)
	}
}

// readOnListing re-reads the catalogue another broker writes before a listing of every
// topic (Metadata for all, `kaas topics list`) when the topics on disk are not the ones
// this broker knows: a name in the topics directory with an entry it lacks, or fewer
// topics than it knows (one deleted). Listing the directory costs what the answer, a
// topic each, costs already.
func (m *manager) readOnListing(ctx actor.Context) {
	c := m.cfg.Cluster
	if c == nil || c.Catalogue() && m.ownCatalogue {
		return
	}
	names, err := m.cfg.FS.ReadDirNames(m.root)
	if err != nil {
		return
	}
	known := 0
	for _, n := range names {
		switch {
		case strings.Contains(n, "~"): // a deleted topic not yet removed
		case m.topics[n] != nil:
			known++
		case m.entryOnDisk(n):
			m.onCatalogTick(ctx)
			return
		}
	}
	if known != len(m.topics) {
		m.onCatalogTick(ctx)
	}
}

// entryOnDisk reports whether topic name (a client's, so checked first) has a catalogue
// entry in the topics directory.
func (m *manager) entryOnDisk(name string) bool {
	if ValidateTopicName(name) != nil {
		return false
	}
	_, err := m.cfg.FS.ReadFile(filepath.Join(m.root, name, metaFile))
	return err == nil
}
