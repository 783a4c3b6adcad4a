package partition

import (
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// What the topics manager answers of the data path: the connections route Produce,
// Fetch, ListOffsets and OffsetForLeaderEpoch to the partition actors themselves, by the
// published catalogue (Catalog), and ask the manager only about partitions that catalogue
// does not name (ResolveMessage, PartitionsExist): in a cluster, a topic created through
// another broker is known here once the catalogue is read again.

func (m *manager) handleExist(ctx actor.Context, e *PartitionsExist) *Existence {
	var names []string
	beyond := false
	for _, tp := range e.Partitions {
		if t := m.topics[tp.Topic]; t == nil {
			names = append(names, tp.Topic)
		} else if tp.Partition >= t.meta.Partitions {
			beyond = true // grown by the writer, perhaps
		}
	}
	m.readOnMiss(ctx, names, nil, beyond)
	out := &Existence{Exists: make([]bool, len(e.Partitions))}
	for i, tp := range e.Partitions {
		t := m.topics[tp.Topic]
		out.Exists[i] = t != nil && tp.Partition >= 0 && tp.Partition < t.meta.Partitions
	}
	return out
}

// lookup finds a partition by topic name, or by id when the name is empty (v13+).
func (m *manager) lookup(name string, id TopicID, p int32) (*topicState, *actor.PID, int16) {
	t := m.topics[name]
	if name == "" && id != (TopicID{}) {
		t = m.byID[id]
		if t == nil {
			return nil, nil, kerr.UnknownTopicID.Code
		}
	}
	if t != nil && t.deleting {
		return nil, nil, kerr.UnknownTopicOrPartition.Code
	}
	if t == nil || p < 0 || p >= int32(len(t.pids)) {
		return t, nil, kerr.UnknownTopicOrPartition.Code
	}
	if t.pids[p] == nil {
		return t, nil, kerr.NotLeaderForPartition.Code // led by another broker
	}
	return t, t.pids[p], 0
}

// readUnknown re-reads the catalogue another broker writes (readOnMiss) when refs name
// a topic, a topic id or a partition this broker does not know: a partition of a topic
// created through another broker is then routed, or answered NOT_LEADER_OR_FOLLOWER,
// instead of UNKNOWN_TOPIC_OR_PARTITION until the next catalogue tick.
func (m *manager) readUnknown(ctx actor.Context, refs []PartitionRef) {
	var names []string
	var ids []TopicID
	beyond := false
	for _, r := range refs {
		var t *topicState
		if r.Topic == "" && r.ID != (TopicID{}) {
			if t = m.byID[r.ID]; t == nil {
				ids = append(ids, r.ID)
			}
		} else if t = m.topics[r.Topic]; t == nil {
			names = append(names, r.Topic)
		}
		if t != nil && r.Partition >= t.meta.Partitions {
			beyond = true
		}
	}
	if len(names) > 0 || len(ids) > 0 || beyond {
		m.readOnMiss(ctx, names, ids, beyond)
	}
}

// handleResolve answers a connection's partitions that the published catalogue did not
// name (ResolveMessage). One that exists after the re-read is NOT_LEADER_OR_FOLLOWER
// even when its actor now runs here: the request is not sent on, so a later request of
// the same connection, routed directly, never overtakes it.
func (m *manager) handleResolve(ctx actor.Context, r *resolveUnknown) {
	m.readUnknown(ctx, r.parts)
	codes := make([]int16, len(r.parts))
	for i, p := range r.parts {
		if _, _, code := m.lookup(p.Topic, p.ID, p.Partition); code != 0 {
			codes[i] = code
		} else {
			codes[i] = kerr.NotLeaderForPartition.Code
		}
	}
	r.reply.Resolve(r.answer(codes))
}
