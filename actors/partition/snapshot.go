package partition

import "sync/atomic"

// Catalog is the topic catalogue as the connections read it: an immutable snapshot the
// topics manager replaces (copy on write) each time a topic is created, grown or deleted,
// as the registry publishes the broker set. A connection answers "does this partition
// exist" from it directly instead of asking the manager, whose mailbox carries the data
// path. Reads are lock-free; only the manager writes.
type Catalog struct {
	p atomic.Pointer[catalogSnap]
}

type catalogSnap struct {
	partitions map[string]int32 // topic → partition count
}

// NewCatalog is an empty catalogue (the manager fills it at start).
func NewCatalog() *Catalog {
	c := &Catalog{}
	c.p.Store(&catalogSnap{partitions: map[string]int32{}})
	return c
}

// Exists reports, for each partition, whether its topic has it.
func (c *Catalog) Exists(tps []TopicPartition) []bool {
	snap := c.p.Load()
	out := make([]bool, len(tps))
	for i, tp := range tps {
		n, ok := snap.partitions[tp.Topic]
		out[i] = ok && tp.Partition >= 0 && tp.Partition < n
	}
	return out
}

// Partitions is the partition count of topic, false when there is no such topic.
func (c *Catalog) Partitions(topic string) (int32, bool) {
	n, ok := c.p.Load().partitions[topic]
	return n, ok
}

// publish replaces the snapshot with the manager's topics (the manager's Receive only).
func (m *manager) publish() {
	if m.cfg.Catalog == nil {
		return
	}
	snap := &catalogSnap{partitions: make(map[string]int32, len(m.topics))}
	for name, t := range m.topics {
		snap.partitions[name] = t.meta.Partitions
	}
	m.cfg.Catalog.p.Store(snap)
}
