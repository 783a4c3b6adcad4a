package partition

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// Catalog is the topic catalogue as the connections read it: an immutable snapshot the
// topics manager replaces (copy on write) each time a topic is created, grown, deleted or
// its configs changed, as the registry publishes the broker set. A connection answers "does this partition
// exist" from it directly instead of asking the manager, and sends Produce, Fetch,
// ListOffsets and OffsetForLeaderEpoch straight to the partition actors it names: this
// is the only data route. Reads are lock-free; only the manager writes.
type Catalog struct {
	p          atomic.Pointer[catalogSnap]
	gens       atomic.Uint64 // each publish's number (TopicNames)
	loaded     chan struct{} // closed by the first publish
	loadedOnce sync.Once
	// groups are the per-group consumer configs (groupconfigs.go), published apart
	// from the topics.
	groups atomic.Pointer[map[string]groupTimes]
}

type catalogSnap struct {
	topics map[string]*snapTopic
	byID   map[TopicID]*snapTopic
	gen    uint64 // the publish that made it
	// met and log are the partitions' metrics and logger: a connection validating a
	// batch counts and logs a refusal as the partition would (Route.ValidateBatch).
	met *Metrics
	log zerolog.Logger
	// brokerConfigs are the dynamic broker configs in force (brokerconfigs.go).
	brokerConfigs *BrokerConfigs
}

// snapTopic is one topic as published: never changed once stored.
type snapTopic struct {
	name       string
	id         TopicID
	partitions int32        // the catalogue entry's count
	pids       []*actor.PID // the partition actors started, by partition
	// maxMessageBytes is the topic's max.message.bytes: a change of it is published
	// with a new snapshot.
	maxMessageBytes int32
	// compact: its cleanup.policy holds compact, so a record without a key is refused.
	compact bool
	// timestamps: its message.timestamp.* settings (timestamps.go).
	timestamps timestampPolicy
	// codec: its compression.type as a batch codec plus one; 0 (the zero value) for
	// "producer", batches stored as sent (recompress.go).
	codec int16
}

// NewCatalog is an empty catalogue (the manager fills it at start).
func NewCatalog() *Catalog {
	c := &Catalog{loaded: make(chan struct{})}
	c.p.Store(&catalogSnap{topics: map[string]*snapTopic{}, byID: map[TopicID]*snapTopic{}})
	return c
}

// Loaded is closed once the manager has published the catalogue it loaded at start:
// before, the snapshot is empty and would route every partition to
// UNKNOWN_TOPIC_OR_PARTITION, so the broker accepts connections only once it is closed
// (broker/topics.go).
func (c *Catalog) Loaded() <-chan struct{} { return c.loaded }

// Exists reports, for each partition, whether its topic has it.
func (c *Catalog) Exists(tps []TopicPartition) []bool {
	snap := c.p.Load()
	out := make([]bool, len(tps))
	for i, tp := range tps {
		t, ok := snap.topics[tp.Topic]
		out[i] = ok && tp.Partition >= 0 && tp.Partition < t.partitions
	}
	return out
}

// Partitions is the partition count of topic, false when there is no such topic.
func (c *Catalog) Partitions(topic string) (int32, bool) {
	t, ok := c.p.Load().topics[topic]
	if !ok {
		return 0, false
	}
	return t.partitions, true
}

// Route is where one partition of a data request goes: its actor, or the error code to
// answer (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
// NOT_LEADER_OR_FOLLOWER for a partition with no actor here). Topic and
// ID name the topic when it is known.
type Route struct {
	PID   *actor.PID
	Topic string
	ID    TopicID
	Code  int16

	// What a produced batch is validated by before it is sent (ValidateBatch).
	partition       int32
	maxMessageBytes int32
	compact         bool
	timestamps      timestampPolicy
	codec           int16
	met             *Metrics
	log             zerolog.Logger
}

// Routes is one snapshot of the catalogue for the partitions of one request: every
// partition of a request is routed by the same catalogue.
type Routes struct{ snap *catalogSnap }

// Routes takes the catalogue as it is now.
func (c *Catalog) Routes() Routes { return Routes{c.p.Load()} }

// Find routes partition p of the topic named name, or, when name is empty, of the topic
// with id (Produce and Fetch v13+), as the topics manager looks partitions up (lookup).
func (r Routes) Find(name string, id TopicID, p int32) Route {
	t := r.snap.topics[name]
	if name == "" && id != (TopicID{}) {
		t = r.snap.byID[id]
		if t == nil {
			return Route{Code: kerr.UnknownTopicID.Code}
		}
	}
	if t == nil {
		return Route{Code: kerr.UnknownTopicOrPartition.Code}
	}
	if p < 0 || p >= int32(len(t.pids)) {
		return Route{Topic: t.name, ID: t.id, Code: kerr.UnknownTopicOrPartition.Code}
	}
	if t.pids[p] == nil {
		// Led by another broker (a cluster starts actors only for what it leads), or
		// between a move's release and adoption: never a success code with no write.
		return Route{Topic: t.name, ID: t.id, Code: kerr.NotLeaderForPartition.Code}
	}
	return Route{PID: t.pids[p], Topic: t.name, ID: t.id,
		partition: p, maxMessageBytes: t.maxMessageBytes, compact: t.compact, timestamps: t.timestamps, codec: t.codec, met: r.snap.met, log: r.snap.log}
}

// DefaultRequestTimeout bounds a produce (without a timeout of its own), a ListOffsets
// or an OffsetForLeaderEpoch whose partitions do not answer (a restart lost the message).
const DefaultRequestTimeout = 30 * time.Second

// ProduceTimeout is how long a produce with timeout_ms d waits for its partitions: d,
// at least a second, or DefaultRequestTimeout when d is not positive.
func ProduceTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultRequestTimeout
	}
	return max(d, time.Second)
}

// AppendMessage is what a partition actor appends a validated batch from
// (Route.ValidateBatch); reply gets *Produced once the batch is durable (a zero Promise
// for acks=0).
func AppendMessage(b *Batch, reply actor.Promise) any {
	return &appendBatch{batch: b, reply: reply}
}

// VerifiedAppendMessage is AppendMessage for a transactional batch whose partition its
// sender verified with the transaction coordinator after the partition answered
// NeedsVerify with token: appended unless a marker for the producer came since. With
// epochBumps (Produce v12+, KIP-890 part 2: every transaction has its own epoch, and
// its markers carry the next) the marker's epoch fences a late batch instead, and a
// marker that ended the producer's previous transaction while the new one was
// verified does not refuse it.
func VerifiedAppendMessage(b *Batch, token uint32, epochBumps bool, reply actor.Promise) any {
	return &appendBatch{batch: b, verified: true, token: token, epochBumps: epochBumps, reply: reply}
}

// ProducersMessage asks a partition actor for its producer state (DescribeProducers);
// reply gets *ProducerStates.
func ProducersMessage(reply actor.Promise) any { return &describeProducers{reply: reply} }

// ListOffsetMessage asks a partition actor for one ListOffsets answer; reply gets *Listed.
func ListOffsetMessage(q OffsetQuery, reply actor.Promise) any {
	return &listOffset{timestamp: q.Timestamp, currentEpoch: q.CurrentLeaderEpoch, committed: q.ReadCommitted, reply: reply}
}

// EpochEndMessage asks a partition actor for one OffsetForLeaderEpoch answer: the end
// offset of the largest leader epoch at most q.LeaderEpoch. reply gets *EpochEnd.
func EpochEndMessage(q OffsetQuery, reply actor.Promise) any {
	return &epochEndOf{epoch: q.LeaderEpoch, currentEpoch: q.CurrentLeaderEpoch, reply: reply}
}

// publish replaces the snapshot with the manager's topics (the manager's Receive only),
// after the partitions of a new or grown topic are started.
func (m *manager) publish() {
	if m.cfg.Catalog == nil {
		return
	}
	snap := &catalogSnap{topics: make(map[string]*snapTopic, len(m.topics)), byID: make(map[TopicID]*snapTopic, len(m.topics)),
		met: m.cfg.Metrics, log: m.cfg.Log, gen: m.cfg.Catalog.gens.Add(1), brokerConfigs: m.dyn}
	d := m.defaults()
	for name, t := range m.topics {
		if t.deleting {
			continue
		}
		st := &snapTopic{name: name, id: t.id, partitions: t.meta.Partitions, pids: append([]*actor.PID(nil), t.pids...),
			maxMessageBytes: m.maxMessageBytes(t.meta), compact: cleanerConfig(d, t.meta.Configs) != nil,
			timestamps: timestampPolicyOf(d, t.meta.Configs), codec: topicCodec(d.of(t.meta.Configs, "compression.type")) + 1}
		snap.topics[name] = st
		snap.byID[t.id] = st
	}
	m.cfg.Catalog.p.Store(snap)
	m.cfg.Catalog.loadedOnce.Do(func() { close(m.cfg.Catalog.loaded) })
}

// Topic is topic's id and partition count, false when there is no such topic (the
// consumer-protocol groups assign from it, KIP-848).
func (c *Catalog) Topic(name string) (TopicID, int32, bool) {
	t, ok := c.p.Load().topics[name]
	if !ok {
		return TopicID{}, 0, false
	}
	return t.id, t.partitions, true
}

// TopicName is the name of the topic with id, false when there is none.
func (c *Catalog) TopicName(id TopicID) (string, bool) {
	t, ok := c.p.Load().byID[id]
	if !ok {
		return "", false
	}
	return t.name, true
}

// TopicNames lists every topic, with the number of the catalogue it comes from: a caller
// that keeps the number knows the list is unchanged while TopicsGen returns it
// (regular-expression subscriptions of consumer-protocol groups, KIP-848).
func (c *Catalog) TopicNames() ([]string, uint64) {
	snap := c.p.Load()
	out := make([]string, 0, len(snap.topics))
	for name := range snap.topics {
		out = append(out, name)
	}
	return out, snap.gen
}

// TopicsGen is the number of the catalogue in force.
func (c *Catalog) TopicsGen() uint64 { return c.p.Load().gen }
