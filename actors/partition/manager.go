package partition

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/config"
	"kaas/storage"
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
	// Restarts, when set, counts partition actors restarted after a panic.
	Restarts prometheus.Counter
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
	// FS does the catalogue's file access and the fsync of appended segments; nil is
	// storage.OSFS. Tests inject failures here (storage.FaultFS).
	FS storage.FS
	// Catalog, if set, is published with every change of the topics, for the
	// connections to read (see Catalog).
	Catalog *Catalog
	// BeforeCatalogWrite, if set, runs before each catalogue write, on the goroutine
	// that makes it (tests hold a write back with it).
	BeforeCatalogWrite func()
	// Cluster, when set, makes this manager one of several on a shared data dir.
	Cluster *ClusterConfig
}

// ClusterConfig is what a topics manager of a cluster asks the ownership controller.
type ClusterConfig struct {
	// Owns reports whether this broker leads (topic, partition) now; only those get a
	// partition actor.
	Owns func(topic string, p int32) bool
	// Leader is the broker that leads (topic, partition), for Metadata (-1: none).
	Leader func(topic string, p int32) int32
	// Catalogue reports whether this broker writes the topic catalogue now (creates,
	// deletes, grows topics, reserves producer ids). The others re-read it.
	Catalogue func() bool
	// Reload is how often a broker that does not write the catalogue re-reads it.
	Reload time.Duration
	// Gate makes the Gate of a partition started now: writes may go on while the lease
	// taken at this term lasts.
	Gate func() func() bool
	// Size and Self interleave producer ids: each broker hands out the ids
	// n*Size+Self, so two brokers never give one out twice.
	Size int
}

// Rebalance starts the partition actors owns gives this broker and stops the others,
// then resolves Reply once those have stopped. The ownership controller sends it when
// partitions move.
type Rebalance struct {
	Owns  func(topic string, p int32) bool
	Reply actor.Promise
}

// catalogTick re-reads the catalogue (a broker that does not write it).
type catalogTick struct{ actor.Tick }
type topicState struct {
	meta *topicMeta
	id   TopicID
	pids []*actor.PID
	// deleting: a deletion of this topic is under way; it is not published, deleted or
	// grown again. stopping are its partitions not stopped yet, afterStop what follows.
	deleting  bool
	stopping  map[string]bool
	afterStop func(ctx actor.Context, err error)
	// growTo is the partition count once the queued CreatePartitions are written (0:
	// none queued), and growMeta the catalogue entry the last of them writes.
	growTo   int32
	growMeta *topicMeta
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
	// creating reserves the names whose creation is queued.
	creating map[string]bool

	nextProducerID, producerIDLimit int64
	// idWaiters are InitProducerId requests waiting for a block of ids to be reserved.
	idWaiters []actor.Promise
	reserving bool

	// jobs are the catalogue writes queued, the first running while writing.
	jobs    []*catalogJob
	writing bool
	// stopping: the manager is stopping or restarting; a write that finishes now
	// starts no partition (the next start loads it from the catalogue).
	stopping bool
	// released are the Rebalances waiting for the partitions they stopped.
	released []*releaseJob
	// ownCatalogue: in a cluster, this broker wrote the catalogue at the last tick and
	// has read it since it took it over.
	ownCatalogue bool
	missRead     time.Time // the last rate-limited re-read a miss caused (readOnMiss)
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
			if cfg.Restarts != nil {
				cfg.Restarts.Inc()
			}
		})))
}

func (m *manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.onStarted(ctx)
	case *actor.Stopping, *actor.Restarting:
		m.finishJobs(ctx)
		m.stopping = true
		for _, t := range m.topics {
			if next := t.afterStop; next != nil {
				t.afterStop = nil
				next(ctx, errStopping)
			}
		}
	case *actor.Terminated:
		m.onTerminated(ctx, msg.Who)
	case *catalogWritten:
		m.onCatalogWritten(ctx, msg)
	case *Describe:
		m.handleDescribe(ctx, msg)
	case *CreateTopics:
		m.handleCreateTopics(ctx, msg)
	case *DeleteTopics:
		m.handleDeleteTopics(ctx, msg)
	case *CreatePartitions:
		m.handleCreatePartitions(ctx, msg)
	case *PartitionsExist:
		msg.Reply.Resolve(m.handleExist(ctx, msg))
	case *Produce:
		m.handleProduce(ctx, msg)
	case *Fetch:
		m.handleFetch(ctx, msg)
	case *ListOffsets:
		m.handleListOffsets(ctx, msg)
	case *EpochEnds:
		m.handleEpochEnds(ctx, msg)
	case *InitProducerID:
		m.handleInitProducerID(ctx, msg)
	case *filesRemoved:
	case *Rebalance:
		m.onRebalance(ctx, msg)
	case *catalogTick:
		m.onCatalogTick(ctx)
	}
}

func (m *manager) onStarted(ctx actor.Context) {
	m.log = m.cfg.Log.With().Str("actor", "topics").Logger()
	m.root = topicsDir(m.cfg.Broker.DataDir)
	m.topics = map[string]*topicState{}
	m.byID = map[TopicID]*topicState{}
	m.creating = map[string]bool{}
	m.nextProducerID, m.producerIDLimit = 0, 0
	if m.cfg.FS == nil {
		m.cfg.FS = storage.OSFS{}
	}
	load := loadCatalog
	if m.cfg.Cluster != nil {
		load = readCatalog // another broker may be writing it; leftovers are left alone
		_ = m.cfg.FS.MkdirAll(m.root)
	}
	metas, errs := load(m.cfg.FS, m.root)
	for _, err := range errs {
		m.log.Error().Err(err).Msg("topic_load_failed")
	}
	for _, meta := range metas {
		m.add(ctx, meta)
	}
	m.publish()
	m.log.Info().Int("topics", len(m.topics)).Msg("topics_loaded")
	if c := m.cfg.Cluster; c != nil && c.Reload > 0 {
		actor.Every(ctx, c.Reload, &catalogTick{})
	}
}

// add registers a topic and spawns its partitions.
func (m *manager) add(ctx actor.Context, meta *topicMeta) *topicState {
	t := &topicState{meta: meta, id: meta.id()}
	m.topics[meta.Name] = t
	m.byID[t.id] = t
	m.spawnPartitions(ctx, t)
	return t
}

// spawnPartitions starts the partitions of t's catalogue entry that have no actor yet
// (in a cluster, those this broker leads).
func (m *manager) spawnPartitions(ctx actor.Context, t *topicState) {
	m.spawnOwned(ctx, t, m.owns)
}

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
			}
		}
		m.spawnOwned(ctx, t, r.Owns)
	}
	m.publish()
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

// onCatalogTick re-reads the catalogue another broker writes: new topics, grown ones
// and deleted ones.
func (m *manager) onCatalogTick(ctx actor.Context) {
	c := m.cfg.Cluster
	if c == nil || m.stopping || m.writing || len(m.jobs) > 0 {
		return
	}
	writer := c.Catalogue()
	if writer && m.ownCatalogue {
		return // this broker's memory is the catalogue
	}
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
		case meta.Partitions > t.meta.Partitions:
			t.meta = meta
			m.spawnPartitions(ctx, t)
			changed = true
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

// dropTopic forgets a topic another broker deleted, stopping its partitions.
func (m *manager) dropTopic(ctx actor.Context, t *topicState) {
	for _, pid := range t.pids {
		if pid != nil {
			ctx.Poison(pid)
		}
	}
	delete(m.topics, t.meta.Name)
	delete(m.byID, t.id)
	if m.cfg.TopicsDeleted != nil {
		m.cfg.TopicsDeleted([]string{t.meta.Name})
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
		FS:              m.cfg.FS,
		Gate:            m.gate(),
	}
}

// gate is a new partition actor's Gate in a cluster (nil: a broker alone).
func (m *manager) gate() func() bool {
	if c := m.cfg.Cluster; c != nil && c.Gate != nil {
		return c.Gate()
	}
	return nil
}

func (m *manager) info(t *topicState) TopicInfo {
	ti := TopicInfo{Name: t.meta.Name, ID: t.id, ReplicationFactor: t.meta.ReplicationFactor, Configs: t.meta.Configs}
	for p := int32(0); p < t.meta.Partitions; p++ {
		leader := m.cfg.NodeID
		if c := m.cfg.Cluster; c != nil {
			leader = c.Leader(t.meta.Name, p)
		}
		ti.Partitions = append(ti.Partitions, PartitionInfo{Partition: p, Leader: leader, LeaderEpoch: t.meta.LeaderEpochs[p]})
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

func (m *manager) handleDescribe(ctx actor.Context, d *Describe) {
	if d.All {
		m.readOnListing(ctx)
	} else {
		m.readOnMiss(ctx, d.Names, d.IDs, false)
	}
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
		d.Reply.Resolve(out)
		return
	}
	out.Topics = make([]TopicInfo, 0, len(d.Names)+len(d.IDs))
	w := newWaitAll(func() { d.Reply.Resolve(out) })
	for _, name := range d.Names {
		if t := m.topics[name]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
			continue
		}
		if err := ValidateTopicName(name); err != nil {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.InvalidTopicException.Code, ErrorMessage: err.Error()})
			continue
		}
		if !d.AutoCreate || !m.cfg.Broker.AutoCreateTopics || (m.cfg.Cluster != nil && !m.cfg.Cluster.Catalogue()) {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.UnknownTopicOrPartition.Code})
			continue
		}
		if m.creating[name] {
			// Being created by another request: retriable, as Apache answers a topic
			// whose creation has not finished.
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.LeaderNotAvailable.Code})
			continue
		}
		i := len(out.Topics)
		out.Topics = append(out.Topics, TopicInfo{Name: name})
		w.add()
		m.create(ctx, NewTopic{Name: name, Partitions: -1, ReplicationFactor: -1}, false, func(ti TopicInfo) {
			out.Topics[i] = ti
			w.done()
		})
	}
	for _, id := range d.IDs {
		if t := m.byID[id]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
		} else {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code})
		}
	}
	w.done()
}

func failed(name string, code int16, msg string) TopicInfo {
	return TopicInfo{Name: name, ErrorCode: code, ErrorMessage: msg}
}

// notWriter reports whether, in a cluster, another broker writes the catalogue: then
// a create, delete or grow is answered NOT_CONTROLLER and the client sends it to the
// controller Metadata names.
func (m *manager) notWriter() bool {
	return m.cfg.Cluster != nil && !m.cfg.Cluster.Catalogue()
}

const notControllerMsg = "This is not the correct controller for this cluster."

func (m *manager) handleCreateTopics(ctx actor.Context, c *CreateTopics) {
	if m.notWriter() {
		out := &Created{}
		for _, t := range c.Topics {
			out.Topics = append(out.Topics, failed(t.Name, kerr.NotController.Code, notControllerMsg))
		}
		c.Reply.Resolve(out)
		return
	}
	count := map[string]int{}
	for _, t := range c.Topics {
		count[t.Name]++
	}
	out := &Created{Topics: make([]TopicInfo, len(c.Topics))}
	w := newWaitAll(func() { c.Reply.Resolve(out) })
	for i, t := range c.Topics {
		if count[t.Name] > 1 {
			// Apache: every entry of a name given twice fails.
			out.Topics[i] = failed(t.Name, kerr.InvalidRequest.Code, "Create topics request from client contains multiple entries for the same topic")
			continue
		}
		w.add()
		m.create(ctx, t, c.ValidateOnly, func(ti TopicInfo) {
			out.Topics[i] = ti
			w.done()
		})
	}
	w.done()
}

// create checks a new topic as Apache's ReplicationControlManager.createTopic does and,
// unless validateOnly, queues its catalogue entry's write; once written, it starts the
// topic's partitions. answer gets the outcome, at once or from the Receive that applies
// the write.
func (m *manager) create(ctx actor.Context, t NewTopic, validateOnly bool, answer func(TopicInfo)) {
	ti, meta := m.checkNew(t)
	if meta == nil || validateOnly {
		answer(ti)
		return
	}
	m.creating[t.Name] = true
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error {
		err := saveMeta(fsys, root, meta)
		if err != nil {
			_ = fsys.RemoveAll(filepath.Join(root, meta.Name))
		}
		return err
	}, func(ctx actor.Context, err error) {
		delete(m.creating, meta.Name)
		if err != nil {
			m.log.Error().Err(err).Str("topic", meta.Name).Msg("topic_create_failed")
			answer(failed(meta.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
			return
		}
		m.log.Info().Str("topic", meta.Name).Int32("partitions", meta.Partitions).Str("topic_id", meta.ID).Msg("topic_created")
		if m.stopping {
			answer(m.info(&topicState{meta: meta, id: meta.id()}))
			return
		}
		st := m.add(ctx, meta)
		m.publish()
		answer(m.info(st))
	})
}

// checkNew validates a new topic; meta is nil when it fails (ti says why). For a valid
// one, ti is what validate-only answers and meta the entry to write.
func (m *manager) checkNew(t NewTopic) (TopicInfo, *topicMeta) {
	if err := ValidateTopicName(t.Name); err != nil {
		return failed(t.Name, kerr.InvalidTopicException.Code, err.Error()), nil
	}
	if m.topics[t.Name] != nil || m.creating[t.Name] {
		return failed(t.Name, kerr.TopicAlreadyExists.Code, fmt.Sprintf("Topic '%s' already exists.", t.Name)), nil
	}
	brokers := m.brokers()
	if len(t.Assignment) > 0 {
		if t.Partitions != -1 || t.ReplicationFactor != -1 {
			return failed(t.Name, kerr.InvalidRequest.Code, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."), nil
		}
		if err := checkAssignment(t.Assignment, brokers); err != nil {
			return failed(t.Name, kerr.InvalidReplicaAssignment.Code, err.Error()), nil
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
		return failed(t.Name, kerr.InvalidPartitions.Code, "Number of partitions was set to an invalid non-positive value."), nil
	case t.Partitions > maxPartitionsPerTopic:
		return failed(t.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic)), nil
	case t.ReplicationFactor < 1:
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, "Replication factor must be larger than 0, or -1 to use the default value."), nil
	case int(t.ReplicationFactor) > len(brokers):
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, fmt.Sprintf(
			"Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.",
			t.ReplicationFactor, t.ReplicationFactor, len(brokers))), nil
	}
	if err := validateTopicConfigs(t.Configs); err != nil {
		return failed(t.Name, kerr.InvalidConfig.Code, err.Error()), nil
	}
	meta := &topicMeta{
		Version: 1, Name: t.Name, ID: uuid.NewString(), Partitions: t.Partitions,
		ReplicationFactor: t.ReplicationFactor, LeaderEpochs: make([]int32, t.Partitions), Configs: t.Configs,
	}
	if len(meta.Configs) == 0 {
		meta.Configs = nil
	}
	ti := m.info(&topicState{meta: meta})
	ti.ID = TopicID{}
	return ti, meta
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

func (m *manager) handleDeleteTopics(ctx actor.Context, d *DeleteTopics) {
	out := &Deleted{}
	if m.notWriter() {
		for _, name := range d.Names {
			out.Topics = append(out.Topics, failed(name, kerr.NotController.Code, notControllerMsg))
		}
		for _, id := range d.IDs {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.NotController.Code, ErrorMessage: notControllerMsg})
		}
		d.Reply.Resolve(out)
		return
	}
	seen := map[*topicState]int{}
	type entry struct {
		t   *topicState
		out int
	}
	var doomed []entry
	unknown := func(t *topicState) bool { return t == nil || t.deleting }
	for _, name := range d.Names {
		t := m.topics[name]
		if unknown(t) {
			out.Topics = append(out.Topics, failed(name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition."))
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: name, ID: t.id})
	}
	for _, id := range d.IDs {
		t := m.byID[id]
		if unknown(t) {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code, ErrorMessage: "This server does not host this topic ID."})
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: t.meta.Name, ID: t.id})
	}
	var deleted []string
	w := newWaitAll(func() {
		if len(deleted) > 0 {
			m.log.Info().Strs("topics", deleted).Msg("topics_deleted")
			if m.cfg.TopicsDeleted != nil {
				m.cfg.TopicsDeleted(deleted)
			}
		}
		d.Reply.Resolve(out)
	})
	for _, e := range doomed {
		if seen[e.t] > 1 {
			// Apache: a topic named twice (or by name and id) is INVALID_REQUEST.
			out.Topics[e.out].ErrorCode = kerr.InvalidRequest.Code
			out.Topics[e.out].ErrorMessage = "Duplicate topic in request."
			continue
		}
		e := e
		w.add()
		m.remove(ctx, e.t, func(err error) {
			if err != nil {
				m.log.Error().Err(err).Str("topic", e.t.meta.Name).Msg("topic_delete_failed")
				out.Topics[e.out].ErrorCode = kerr.KafkaStorageError.Code
			} else {
				deleted = append(deleted, e.t.meta.Name)
			}
			w.done()
		})
	}
	w.done()
}

// filesRemoved is a deleted topic's files gone from disk (nothing waits for it).
type filesRemoved struct{}

// remove deletes a topic: it leaves the published catalogue at once (new requests get
// UNKNOWN_TOPIC_OR_PARTITION, as for a topic Apache marked for deletion), its partitions
// stop (after what their mailboxes hold), and only once every one has stopped is the
// directory moved aside, a queued catalogue write; the files are then removed in the
// background. No partition ever reads or writes a directory that was moved, and a topic
// of the same name is refused until the move is written.
func (m *manager) remove(ctx actor.Context, t *topicState, answer func(error)) {
	t.deleting = true
	m.publish()
	root, name, fsys := m.root, t.meta.Name, m.cfg.FS
	t.afterStop = func(ctx actor.Context, err error) {
		if err != nil { // the manager is stopping
			answer(err)
			return
		}
		var aside string
		m.enqueue(ctx, func() (err error) {
			aside, err = deleteTopicDir(fsys, root, name)
			return err
		}, func(ctx actor.Context, err error) {
			if err != nil {
				// The files stay where they were: serve them again.
				t.deleting, t.pids = false, nil
				if !m.stopping {
					m.spawnPartitions(ctx, t)
				}
				m.publish()
				answer(err)
				return
			}
			delete(m.topics, name)
			delete(m.byID, t.id)
			log := m.log
			actor.Background(ctx, func() any {
				if err := fsys.RemoveAll(aside); err != nil {
					log.Warn().Err(err).Str("dir", aside).Msg("topic_files_remove_failed")
				}
				return &filesRemoved{}
			})
			answer(nil)
		})
	}
	t.stopping = map[string]bool{}
	for _, pid := range t.pids {
		if pid == nil {
			continue // led by another broker
		}
		t.stopping[pid.Id] = true
		ctx.Watch(pid)
		ctx.Poison(pid)
	}
	m.partitionsStopped(ctx, t)
}

// onTerminated: a partition of a topic being deleted stopped.
func (m *manager) onTerminated(ctx actor.Context, who *actor.PID) {
	kept := m.released[:0]
	for _, job := range m.released {
		delete(job.waiting, who.Id)
		if len(job.waiting) == 0 {
			job.reply.Resolve(nil)
			continue
		}
		kept = append(kept, job)
	}
	m.released = kept
	for _, t := range m.topics {
		if t.stopping[who.Id] {
			delete(t.stopping, who.Id)
			m.partitionsStopped(ctx, t)
			return
		}
	}
}

// partitionsStopped goes on with t's deletion once none of its partitions runs.
func (m *manager) partitionsStopped(ctx actor.Context, t *topicState) {
	if len(t.stopping) > 0 || t.afterStop == nil {
		return
	}
	next := t.afterStop
	t.afterStop, t.stopping = nil, nil
	next(ctx, nil)
}

func (m *manager) handleCreatePartitions(ctx actor.Context, c *CreatePartitions) {
	if m.notWriter() {
		out := &Created{}
		for _, t := range c.Topics {
			out.Topics = append(out.Topics, failed(t.Name, kerr.NotController.Code, notControllerMsg))
		}
		c.Reply.Resolve(out)
		return
	}
	count := map[string]int{}
	for _, t := range c.Topics {
		count[t.Name]++
	}
	out := &Created{Topics: make([]TopicInfo, len(c.Topics))}
	w := newWaitAll(func() { c.Reply.Resolve(out) })
	for i, inc := range c.Topics {
		t := m.topics[inc.Name]
		if t != nil && t.deleting {
			t = nil
		}
		cur := int32(0)
		if t != nil {
			cur = t.meta.Partitions
			if t.growTo > 0 {
				cur = t.growTo
			}
		}
		switch {
		case count[inc.Name] > 1:
			out.Topics[i] = failed(inc.Name, kerr.InvalidRequest.Code, "Duplicate topic in request.")
		case t == nil:
			out.Topics[i] = failed(inc.Name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition.")
		case inc.Count < cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code,
				fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", cur, inc.Count))
		case inc.Count == cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Topic already has %d partitions.", cur))
		case inc.Count > maxPartitionsPerTopic:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic))
		case inc.Assignment != nil && int32(len(inc.Assignment)) != inc.Count-cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidReplicaAssignment.Code,
				fmt.Sprintf("Increasing the number of partitions by %d but %d assignments provided.", inc.Count-cur, len(inc.Assignment)))
		default:
			if inc.Assignment != nil {
				if err := checkAssignment(inc.Assignment, m.brokers()); err != nil {
					out.Topics[i] = failed(inc.Name, kerr.InvalidReplicaAssignment.Code, err.Error())
					continue
				}
			}
			if c.ValidateOnly {
				out.Topics[i] = TopicInfo{Name: inc.Name, ID: t.id}
				continue
			}
			w.add()
			m.grow(ctx, t, inc.Count, func(ti TopicInfo) {
				out.Topics[i] = ti
				w.done()
			})
		}
	}
	w.done()
}

// grow queues the write of t's catalogue entry with count partitions (built on the
// last one queued, so increases queued together add up); once written, the new
// partitions start.
func (m *manager) grow(ctx actor.Context, t *topicState, count int32, answer func(TopicInfo)) {
	base := t.meta
	if t.growMeta != nil {
		base = t.growMeta
	}
	meta := *base
	meta.Partitions = count
	meta.LeaderEpochs = append(append([]int32(nil), base.LeaderEpochs...), make([]int32, count-base.Partitions)...)
	t.growTo, t.growMeta = count, &meta
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error { return saveMeta(fsys, root, &meta) }, func(ctx actor.Context, err error) {
		if t.growMeta == &meta {
			t.growTo, t.growMeta = 0, nil
		}
		if err != nil {
			m.log.Error().Err(err).Str("topic", meta.Name).Msg("partitions_create_failed")
			answer(failed(meta.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
			return
		}
		if meta.Partitions > t.meta.Partitions {
			t.meta = &meta
			if !m.stopping {
				m.spawnPartitions(ctx, t)
			}
			// Published once the new partitions run: connections route to their actors.
			m.publish()
		}
		m.log.Info().Str("topic", meta.Name).Int32("partitions", meta.Partitions).Msg("partitions_created")
		answer(TopicInfo{Name: meta.Name, ID: t.id})
	})
}

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
// When the block is used up, requests wait (in order) for the next one to be written.
func (m *manager) handleInitProducerID(ctx actor.Context, r *InitProducerID) {
	if len(m.idWaiters) == 0 && m.nextProducerID < m.producerIDLimit {
		r.Reply.Resolve(m.takeProducerID())
		return
	}
	m.idWaiters = append(m.idWaiters, r.Reply)
	m.reserveIDs(ctx)
}

func (m *manager) takeProducerID() *ProducerID {
	id := m.nextProducerID
	m.nextProducerID++
	if c := m.cfg.Cluster; c != nil && c.Size > 0 {
		// Each broker its own residue class, from its own block file.
		id = id*int64(c.Size) + int64(m.cfg.NodeID)
	}
	return &ProducerID{ID: id, Epoch: 0}
}

// reserveIDs queues the write of the next block of producer ids, unless one is queued.
func (m *manager) reserveIDs(ctx actor.Context) {
	if m.reserving {
		return
	}
	m.reserving = true
	root, fsys := m.root, m.cfg.FS
	var next int64
	name := producerIDFile
	if m.cfg.Cluster != nil {
		name = producerIDFileOf(m.cfg.NodeID)
	}
	m.enqueue(ctx, func() (err error) {
		next, err = reserveProducerIDs(fsys, root, name)
		return err
	}, func(ctx actor.Context, err error) {
		m.reserving = false
		waiters := m.idWaiters
		m.idWaiters = nil
		if err != nil {
			m.log.Error().Err(err).Msg("producer_id_reserve_failed")
			for _, w := range waiters {
				w.Resolve(&ProducerID{ErrorCode: kerr.CoordinatorNotAvailable.Code, ID: -1, Epoch: -1})
			}
			return
		}
		m.nextProducerID, m.producerIDLimit = next, next+producerIDBlock
		for i, w := range waiters {
			if m.nextProducerID >= m.producerIDLimit {
				m.idWaiters = waiters[i:]
				m.reserveIDs(ctx)
				return
			}
			w.Resolve(m.takeProducerID())
		}
	})
}
