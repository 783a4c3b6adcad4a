package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/config"
)

// maxPartitionsPerTopic bounds one CreateTopics or CreatePartitions: each partition is an
// actor and a directory, so an absurd count is refused (INVALID_PARTITIONS) rather than
// allowed to exhaust the broker.
const maxPartitionsPerTopic = 10000

// Config is what the topics manager needs.
type Config struct {
	Broker *config.Config
	NodeID int32
	Log    zerolog.Logger
	// Brokers lists the ids of the brokers replication factors and assignments are
	// checked against; nil means this broker alone.
	Brokers func() []int32
	// TopicsDeleted is called (from the manager's Receive, so it must not block) after
	// topics were deleted: the groups side drops their committed offsets from every
	// group, as Apache's GroupCoordinator.onPartitionsDeleted does.
	TopicsDeleted func(topics []string)
	// IdleClose closes an idle partition's segment files after this long; 0 is 5 minutes.
	IdleClose time.Duration
	// RequestTimeout bounds a produce or list request whose partitions do not answer; 0 is
	// 30 s.
	RequestTimeout time.Duration
	Now            func() time.Time
	// Metrics are shared by every partition; nil records nothing.
	Metrics *Metrics
	// SyncFile makes an appended segment durable; nil is (*os.File).Sync. Tests inject
	// failures here.
	SyncFile func(*os.File) error
}

type topicState struct {
	meta *topicMeta
	id   TopicID
	pids []*actor.PID
}

// manager is the topics manager: the catalogue under <data>/topics/, the parent of one
// actor per partition, and the spawner of the short-lived actors that serve
// multi-partition requests.
type manager struct {
	cfg  Config
	log  zerolog.Logger
	root string

	topics map[string]*topicState
	byID   map[TopicID]*topicState

	nextProducerID, producerIDLimit int64
}

// ManagerProps makes the props of the topics manager (broker wiring: Env.Topics).
func ManagerProps(cfg Config) *actor.Props {
	if cfg.IdleClose == 0 {
		cfg.IdleClose = 5 * time.Minute
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	return actor.PropsOf(func() actor.Actor { return &manager{cfg: cfg} },
		actor.WithSupervisor(actor.RestartChildren(10, 10*time.Second, func(reason any) {
			log.Error().Interface("reason", reason).Msg("partition_actor_failed")
		})))
}

func (m *manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.onStarted(ctx)
	case *Describe:
		msg.Reply.Resolve(m.handleDescribe(ctx, msg))
	case *CreateTopics:
		msg.Reply.Resolve(m.handleCreateTopics(ctx, msg))
	case *DeleteTopics:
		msg.Reply.Resolve(m.handleDeleteTopics(ctx, msg))
	case *CreatePartitions:
		msg.Reply.Resolve(m.handleCreatePartitions(ctx, msg))
	case *PartitionsExist:
		msg.Reply.Resolve(m.handleExist(msg))
	case *Produce:
		m.handleProduce(ctx, msg)
	case *Fetch:
		m.handleFetch(ctx, msg)
	case *ListOffsets:
		m.handleListOffsets(ctx, msg)
	case *EpochEnds:
		m.handleEpochEnds(ctx, msg)
	case *InitProducerID:
		msg.Reply.Resolve(m.handleInitProducerID())
	}
}

func (m *manager) onStarted(ctx actor.Context) {
	m.log = m.cfg.Log.With().Str("actor", "topics").Logger()
	m.root = topicsDir(m.cfg.Broker.DataDir)
	m.topics = map[string]*topicState{}
	m.byID = map[TopicID]*topicState{}
	m.nextProducerID, m.producerIDLimit = 0, 0
	metas, errs := loadCatalog(m.root)
	for _, err := range errs {
		m.log.Error().Err(err).Msg("topic_load_failed")
	}
	for _, meta := range metas {
		m.add(ctx, meta)
	}
	m.log.Info().Int("topics", len(m.topics)).Msg("topics_loaded")
}

// add registers a topic and spawns its partitions.
func (m *manager) add(ctx actor.Context, meta *topicMeta) *topicState {
	t := &topicState{meta: meta, id: meta.id()}
	m.topics[meta.Name] = t
	m.byID[t.id] = t
	m.spawnPartitions(ctx, t, 0)
	return t
}

func (m *manager) spawnPartitions(ctx actor.Context, t *topicState, from int32) {
	for p := from; p < t.meta.Partitions; p++ {
		t.pids = append(t.pids, actor.Spawn(ctx, PartitionProps(m.partitionConfig(t.meta, p))))
	}
}

func (m *manager) partitionConfig(meta *topicMeta, p int32) PartitionConfig {
	c := m.cfg.Broker
	return PartitionConfig{
		Dir:             partitionDir(m.root, meta.Name, p),
		Topic:           meta.Name,
		Partition:       p,
		LeaderEpoch:     meta.LeaderEpochs[p],
		MaxMessageBytes: int32(effective(c, meta.Configs, "max.message.bytes")),
		SegmentBytes:    effective(c, meta.Configs, "segment.bytes"),
		RetentionMS:     effective(c, meta.Configs, "retention.ms"),
		RetentionBytes:  effective(c, meta.Configs, "retention.bytes"),
		FlushMessages:   max(1, effective(c, meta.Configs, "flush.messages")),
		RetentionCheck:  c.LogRetentionCheck,
		IdleClose:       m.cfg.IdleClose,
		Now:             m.cfg.Now,
		Log:             m.cfg.Log,
		Metrics:         m.cfg.Metrics,
		SyncFile:        m.cfg.SyncFile,
	}
}

func (m *manager) info(t *topicState) TopicInfo {
	ti := TopicInfo{Name: t.meta.Name, ID: t.id, ReplicationFactor: t.meta.ReplicationFactor, Configs: t.meta.Configs}
	for p := int32(0); p < t.meta.Partitions; p++ {
		ti.Partitions = append(ti.Partitions, PartitionInfo{Partition: p, Leader: m.cfg.NodeID, LeaderEpoch: t.meta.LeaderEpochs[p]})
	}
	return ti
}

func (m *manager) brokers() []int32 {
	if m.cfg.Brokers != nil {
		if ids := m.cfg.Brokers(); len(ids) > 0 {
			return ids
		}
	}
	return []int32{m.cfg.NodeID}
}

func (m *manager) handleDescribe(ctx actor.Context, d *Describe) *Described {
	out := &Described{}
	if d.All {
		names := make([]string, 0, len(m.topics))
		for n := range m.topics {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out.Topics = append(out.Topics, m.info(m.topics[n]))
		}
		return out
	}
	for _, name := range d.Names {
		if t := m.topics[name]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
			continue
		}
		if err := ValidateTopicName(name); err != nil {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.InvalidTopicException.Code, ErrorMessage: err.Error()})
			continue
		}
		if !d.AutoCreate || !m.cfg.Broker.AutoCreateTopics {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.UnknownTopicOrPartition.Code})
			continue
		}
		out.Topics = append(out.Topics, m.create(ctx, NewTopic{Name: name, Partitions: -1, ReplicationFactor: -1}, false))
	}
	for _, id := range d.IDs {
		if t := m.byID[id]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
		} else {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code})
		}
	}
	return out
}

func failed(name string, code int16, msg string) TopicInfo {
	return TopicInfo{Name: name, ErrorCode: code, ErrorMessage: msg}
}

func (m *manager) handleCreateTopics(ctx actor.Context, c *CreateTopics) *Created {
	count := map[string]int{}
	for _, t := range c.Topics {
		count[t.Name]++
	}
	out := &Created{}
	for _, t := range c.Topics {
		if count[t.Name] > 1 {
			// Apache: every entry of a name given twice fails.
			out.Topics = append(out.Topics, failed(t.Name, kerr.InvalidRequest.Code, "Create topics request from client contains multiple entries for the same topic"))
			continue
		}
		out.Topics = append(out.Topics, m.create(ctx, t, c.ValidateOnly))
	}
	return out
}

// create checks a new topic as Apache's ReplicationControlManager.createTopic does and,
// unless validateOnly, writes it to the catalogue and starts its partitions.
func (m *manager) create(ctx actor.Context, t NewTopic, validateOnly bool) TopicInfo {
	if err := ValidateTopicName(t.Name); err != nil {
		return failed(t.Name, kerr.InvalidTopicException.Code, err.Error())
	}
	if m.topics[t.Name] != nil {
		return failed(t.Name, kerr.TopicAlreadyExists.Code, fmt.Sprintf("Topic '%s' already exists.", t.Name))
	}
	brokers := m.brokers()
	if len(t.Assignment) > 0 {
		if t.Partitions != -1 || t.ReplicationFactor != -1 {
			return failed(t.Name, kerr.InvalidRequest.Code, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
		}
		if err := checkAssignment(t.Assignment, brokers); err != nil {
			return failed(t.Name, kerr.InvalidReplicaAssignment.Code, err.Error())
		}
		t.Partitions, t.ReplicationFactor = int32(len(t.Assignment)), int16(len(t.Assignment[0]))
	}
	if t.Partitions == -1 {
		t.Partitions = m.cfg.Broker.NumPartitions
	}
	if t.ReplicationFactor == -1 {
		t.ReplicationFactor = m.cfg.Broker.DefaultReplicationFactor
	}
	switch {
	case t.Partitions < 1:
		return failed(t.Name, kerr.InvalidPartitions.Code, "Number of partitions was set to an invalid non-positive value.")
	case t.Partitions > maxPartitionsPerTopic:
		return failed(t.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic))
	case t.ReplicationFactor < 1:
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, "Replication factor must be larger than 0, or -1 to use the default value.")
	case int(t.ReplicationFactor) > len(brokers):
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, fmt.Sprintf(
			"Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.",
			t.ReplicationFactor, t.ReplicationFactor, len(brokers)))
	}
	if err := validateTopicConfigs(t.Configs); err != nil {
		return failed(t.Name, kerr.InvalidConfig.Code, err.Error())
	}
	meta := &topicMeta{
		Version: 1, Name: t.Name, ID: uuid.NewString(), Partitions: t.Partitions,
		ReplicationFactor: t.ReplicationFactor, LeaderEpochs: make([]int32, t.Partitions), Configs: t.Configs,
	}
	if len(meta.Configs) == 0 {
		meta.Configs = nil
	}
	if validateOnly {
		ti := m.info(&topicState{meta: meta})
		ti.ID = TopicID{}
		return ti
	}
	if err := saveMeta(m.root, meta); err != nil {
		m.log.Error().Err(err).Str("topic", t.Name).Msg("topic_create_failed")
		os.RemoveAll(filepath.Join(m.root, t.Name))
		return failed(t.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk")
	}
	st := m.add(ctx, meta)
	m.log.Info().Str("topic", t.Name).Int32("partitions", t.Partitions).Str("topic_id", meta.ID).Msg("topic_created")
	return m.info(st)
}

// checkAssignment accepts replica lists that are non-empty, of one length, without
// duplicates and naming known brokers.
func checkAssignment(a [][]int32, brokers []int32) error {
	known := map[int32]bool{}
	for _, b := range brokers {
		known[b] = true
	}
	if len(a) > maxPartitionsPerTopic {
		return fmt.Errorf("too many partitions in the assignment")
	}
	for i, replicas := range a {
		if len(replicas) == 0 || len(replicas) != len(a[0]) {
			return fmt.Errorf("partition %d: all partitions must have the same, non-zero number of replicas", i)
		}
		seen := map[int32]bool{}
		for _, r := range replicas {
			if seen[r] {
				return fmt.Errorf("partition %d: duplicate replica %d", i, r)
			}
			if !known[r] {
				return fmt.Errorf("partition %d: replica %d is not a registered broker", i, r)
			}
			seen[r] = true
		}
	}
	return nil
}

func (m *manager) handleDeleteTopics(ctx actor.Context, d *DeleteTopics) *Deleted {
	out := &Deleted{}
	seen := map[*topicState]int{}
	type entry struct {
		t   *topicState
		out int
	}
	var doomed []entry
	for _, name := range d.Names {
		t := m.topics[name]
		if t == nil {
			out.Topics = append(out.Topics, failed(name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition."))
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: name, ID: t.id})
	}
	for _, id := range d.IDs {
		t := m.byID[id]
		if t == nil {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code, ErrorMessage: "This server does not host this topic ID."})
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: t.meta.Name, ID: t.id})
	}
	var deleted []string
	for _, e := range doomed {
		if seen[e.t] > 1 {
			// Apache: a topic named twice (or by name and id) is INVALID_REQUEST.
			out.Topics[e.out].ErrorCode = kerr.InvalidRequest.Code
			out.Topics[e.out].ErrorMessage = "Duplicate topic in request."
			continue
		}
		if err := m.remove(ctx, e.t); err != nil {
			m.log.Error().Err(err).Str("topic", e.t.meta.Name).Msg("topic_delete_failed")
			out.Topics[e.out].ErrorCode = kerr.KafkaStorageError.Code
			continue
		}
		deleted = append(deleted, e.t.meta.Name)
	}
	if len(deleted) > 0 {
		m.log.Info().Strs("topics", deleted).Msg("topics_deleted")
		if m.cfg.TopicsDeleted != nil {
			m.cfg.TopicsDeleted(deleted)
		}
	}
	return out
}

// remove stops a topic's partitions (after what their mailboxes hold) and moves its
// directory aside; the files are removed in the background.
func (m *manager) remove(ctx actor.Context, t *topicState) error {
	aside, err := deleteTopicDir(m.root, t.meta.Name)
	if err != nil {
		return err
	}
	for _, pid := range t.pids {
		ctx.Poison(pid)
	}
	delete(m.topics, t.meta.Name)
	delete(m.byID, t.id)
	log := m.log
	go func() {
		if err := os.RemoveAll(aside); err != nil {
			log.Warn().Err(err).Str("dir", aside).Msg("topic_files_remove_failed")
		}
	}()
	return nil
}

func (m *manager) handleCreatePartitions(ctx actor.Context, c *CreatePartitions) *Created {
	count := map[string]int{}
	for _, t := range c.Topics {
		count[t.Name]++
	}
	out := &Created{}
	for _, inc := range c.Topics {
		t := m.topics[inc.Name]
		cur := int32(0)
		if t != nil {
			cur = t.meta.Partitions
		}
		switch {
		case count[inc.Name] > 1:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidRequest.Code, "Duplicate topic in request."))
		case t == nil:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition."))
		case inc.Count < cur:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidPartitions.Code,
				fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", cur, inc.Count)))
		case inc.Count == cur:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Topic already has %d partitions.", cur)))
		case inc.Count > maxPartitionsPerTopic:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic)))
		case inc.Assignment != nil && int32(len(inc.Assignment)) != inc.Count-cur:
			out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidReplicaAssignment.Code,
				fmt.Sprintf("Increasing the number of partitions by %d but %d assignments provided.", inc.Count-cur, len(inc.Assignment))))
		default:
			if inc.Assignment != nil {
				if err := checkAssignment(inc.Assignment, m.brokers()); err != nil {
					out.Topics = append(out.Topics, failed(inc.Name, kerr.InvalidReplicaAssignment.Code, err.Error()))
					continue
				}
			}
			if c.ValidateOnly {
				out.Topics = append(out.Topics, TopicInfo{Name: inc.Name, ID: t.id})
				continue
			}
			meta := *t.meta
			meta.Partitions = inc.Count
			meta.LeaderEpochs = append(append([]int32(nil), t.meta.LeaderEpochs...), make([]int32, inc.Count-cur)...)
			if err := saveMeta(m.root, &meta); err != nil {
				m.log.Error().Err(err).Str("topic", inc.Name).Msg("partitions_create_failed")
				out.Topics = append(out.Topics, failed(inc.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
				continue
			}
			t.meta = &meta
			m.spawnPartitions(ctx, t, cur)
			m.log.Info().Str("topic", inc.Name).Int32("partitions", inc.Count).Msg("partitions_created")
			out.Topics = append(out.Topics, TopicInfo{Name: inc.Name, ID: t.id})
		}
	}
	return out
}

func (m *manager) handleExist(e *PartitionsExist) *Existence {
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
	if t == nil || p < 0 || p >= int32(len(t.pids)) {
		return t, nil, kerr.UnknownTopicOrPartition.Code
	}
	return t, t.pids[p], 0
}

// nested maps flat results back to topics × partitions.
func nested[T any](sizes []int, flat []any) [][]T {
	out := make([][]T, len(sizes))
	k := 0
	for i, n := range sizes {
		out[i] = make([]T, n)
		for j := 0; j < n; j++ {
			out[i][j] = flat[k].(T)
			k++
		}
	}
	return out
}

// spawnCollect gathers the answers to asks (results holds the preset ones, where a.to
// is nil) and calls finish with all of them, in a short-lived child (actor.Gather). The
// manager itself sends each partition its part, in order, so that the batches of
// pipelined produce requests reach a partition in the order they were sent: an
// idempotent producer's sequence numbers depend on it. A partition that does not answer
// within timeout (a restart lost the message), or that stops first (its topic deleted),
// gets missing(i).
func (m *manager) spawnCollect(ctx actor.Context, asks []ask, results []any, timeout time.Duration, missing func(int) any, finish func([]any)) {
	var idx []int
	var watch []*actor.PID
	for i, a := range asks {
		if a.to != nil {
			idx = append(idx, i)
			watch = append(watch, a.to)
		}
	}
	if len(idx) == 0 {
		finish(results)
		return
	}
	ps := actor.Gather(ctx, len(idx), timeout, watch, func(k int) any { return missing(idx[k]) }, func(v []any) {
		for k, x := range v {
			results[idx[k]] = x
		}
		finish(results)
	})
	for k, i := range idx {
		ctx.Send(asks[i].to, asks[i].msg(ps[k]))
	}
}

func (m *manager) handleProduce(ctx actor.Context, pr *Produce) {
	var asks []ask
	var results []any
	sizes := make([]int, len(pr.Topics))
	for i, t := range pr.Topics {
		sizes[i] = len(t.Partitions)
		for _, p := range t.Partitions {
			_, pid, code := m.lookup(t.Name, t.ID, p.Partition)
			records := p.Records
			asks = append(asks, ask{to: pid, msg: func(reply actor.Promise) any {
				return &appendBatch{records: records, reply: reply}
			}})
			var preset any
			if pid == nil {
				preset = &Produced{ErrorCode: code, BaseOffset: -1, LogStartOffset: -1}
			}
			results = append(results, preset)
		}
	}
	timeout := max(pr.Timeout, time.Second)
	if pr.Timeout <= 0 {
		timeout = m.cfg.RequestTimeout
	}
	reply := pr.Reply
	m.spawnCollect(ctx, asks, results, timeout,
		func(int) any {
			return &Produced{ErrorCode: kerr.RequestTimedOut.Code, BaseOffset: -1, LogStartOffset: -1}
		},
		func(flat []any) { reply.Resolve(&ProduceResult{Topics: nested[*Produced](sizes, flat)}) })
}

func (m *manager) handleFetch(ctx actor.Context, f *Fetch) {
	out := &FetchResult{Topics: make([]FetchedTopic, len(f.Topics))}
	var slots []fetchSlot
	for i, t := range f.Topics {
		out.Topics[i] = FetchedTopic{Name: t.Name, ID: t.ID, Partitions: make([]*Fetched, len(t.Partitions))}
		for j, p := range t.Partitions {
			ts, pid, code := m.lookup(t.Name, t.ID, p.Partition)
			if ts != nil {
				out.Topics[i].Name, out.Topics[i].ID = ts.meta.Name, ts.id
			}
			s := fetchSlot{topic: i, index: j, to: pid, offset: p.Offset, maxBytes: p.MaxBytes, epoch: p.CurrentLeaderEpoch}
			if pid == nil {
				s.res = &Fetched{ErrorCode: code, HighWatermark: -1, LogStartOffset: -1}
			}
			slots = append(slots, s)
		}
	}
	fr := &fetcher{req: f, out: out, slots: slots}
	actor.Spawn(ctx, actor.PropsOf(func() actor.Actor { return fr }))
}

func (m *manager) offsetAsks(topics []OffsetTopic, build func(q OffsetQuery, reply actor.Promise) any, unknown func(code int16) any) ([]ask, []any, []int) {
	var asks []ask
	var results []any
	sizes := make([]int, len(topics))
	for i, t := range topics {
		sizes[i] = len(t.Partitions)
		for _, q := range t.Partitions {
			_, pid, code := m.lookup(t.Name, TopicID{}, q.Partition)
			q := q
			asks = append(asks, ask{to: pid, msg: func(reply actor.Promise) any { return build(q, reply) }})
			var preset any
			if pid == nil {
				preset = unknown(code)
			}
			results = append(results, preset)
		}
	}
	return asks, results, sizes
}

func (m *manager) handleListOffsets(ctx actor.Context, l *ListOffsets) {
	none := func(code int16) any { return &Listed{ErrorCode: code, Timestamp: -1, Offset: -1, LeaderEpoch: -1} }
	asks, results, sizes := m.offsetAsks(l.Topics, func(q OffsetQuery, reply actor.Promise) any {
		return &listOffset{timestamp: q.Timestamp, currentEpoch: q.CurrentLeaderEpoch, reply: reply}
	}, none)
	reply := l.Reply
	m.spawnCollect(ctx, asks, results, m.cfg.RequestTimeout,
		func(int) any { return none(kerr.RequestTimedOut.Code) },
		func(flat []any) { reply.Resolve(&ListOffsetsResult{Topics: nested[*Listed](sizes, flat)}) })
}

func (m *manager) handleEpochEnds(ctx actor.Context, e *EpochEnds) {
	none := func(code int16) any { return &EpochEnd{ErrorCode: code, LeaderEpoch: -1, EndOffset: -1} }
	asks, results, sizes := m.offsetAsks(e.Topics, func(q OffsetQuery, reply actor.Promise) any {
		return &epochEndOf{epoch: q.LeaderEpoch, currentEpoch: q.CurrentLeaderEpoch, reply: reply}
	}, none)
	reply := e.Reply
	m.spawnCollect(ctx, asks, results, m.cfg.RequestTimeout,
		func(int) any { return none(kerr.RequestTimedOut.Code) },
		func(flat []any) { reply.Resolve(&EpochEndsResult{Topics: nested[*EpochEnd](sizes, flat)}) })
}

// handleInitProducerID hands out ids from a block reserved on disk, so an id is never
// reused after a restart (Apache allocates blocks through the controller likewise).
func (m *manager) handleInitProducerID() *ProducerID {
	if m.nextProducerID >= m.producerIDLimit {
		next, err := reserveProducerIDs(m.root)
		if err != nil {
			m.log.Error().Err(err).Msg("producer_id_reserve_failed")
			return &ProducerID{ErrorCode: kerr.CoordinatorNotAvailable.Code, ID: -1, Epoch: -1}
		}
		m.nextProducerID, m.producerIDLimit = next, next+producerIDBlock
	}
	id := m.nextProducerID
	m.nextProducerID++
	return &ProducerID{ID: id, Epoch: 0}
}
