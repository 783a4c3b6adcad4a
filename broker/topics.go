package broker

import (
	"fmt"
	"time"

	"kaas/actors/group"
	"kaas/actors/partition"
	"kaas/storage"
)

// startTopics starts the topics manager (actors/partition) and sets Env.Topics. A
// DeleteTopics is passed on to the groups manager as *group.TopicsDeleted, so that
// every group drops its committed offsets for the deleted topics.
func (b *Broker) startTopics() error {
	catalog := b.catalog
	if catalog == nil {
		catalog = partition.NewCatalog()
	}
	pid, err := b.sys.SpawnNamed(partition.ManagerProps(partition.Config{
		Catalog:  catalog,
		FS:       storage.OSFS{},
		Cluster:  b.topicsCluster(),
		Broker:   &b.cfg,
		NodeID:   b.cfg.NodeID,
		Log:      b.log,
		Metrics:  b.partitionMetrics(),
		Restarts: b.met.ActorRestarts.WithLabelValues("partition"),
		Txns:     b.txnChecker(),
		Brokers: func() []int32 {
			var ids []int32
			for _, br := range b.env.Registry.Brokers() {
				ids = append(ids, br.ID)
			}
			return ids
		},
		TopicsDeleted: func(topics []string) {
			if groups := b.env.Groups; groups != nil {
				b.sys.Send(groups, &group.TopicsDeleted{Topics: topics})
			}
		},
	}), "topics")
	if err != nil {
		return fmt.Errorf("start topics manager: %w", err)
	}
	b.env.Topics = pid
	b.env.Catalog = catalog
	// Connections read the catalogue without asking the manager (OffsetCommit's
	// existence check, the data path's routes): it is loaded before they are accepted.
	select {
	case <-catalog.Loaded():
	case <-time.After(catalogLoadWait):
		return fmt.Errorf("start topics manager: the catalogue was not loaded within %v", catalogLoadWait)
	}
	return nil
}

// catalogLoadWait bounds the wait for the topics manager's first catalogue at start (it
// reads one topic.json per topic; partitions recover on their own afterwards).
const catalogLoadWait = 2 * time.Minute

// partitionMetrics are the partition actors' metrics, publishing each partition's high
// watermark into the broker's lag collector.
func (b *Broker) partitionMetrics() *partition.Metrics {
	m := partition.NewMetrics(b.met.Registry)
	m.Offsets = b.met.Offsets
	return m
}
