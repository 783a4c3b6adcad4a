package partition

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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
	Now       func() time.Time
	// Metrics are shared by every partition; nil records nothing.
	Metrics *Metrics
	// FS does every file step of the catalogue and of the partitions (segments, recovery
	// point, leader-epoch file, leader.lock); nil is storage.OSFS. Tests inject failures
	// here (storage.FaultFS).
	FS storage.FS
	// Catalog, if set, is published with every change of the topics, for the
	// connections to read (see Catalog).
	Catalog *Catalog
	// BeforeCatalogWrite, if set, runs before each catalogue write, on the goroutine
	// that makes it (tests hold a write back with it).
	BeforeCatalogWrite func()
	// Cluster, when set, makes this manager one of several on a shared data dir.
	Cluster *ClusterConfig
	// Txns, when set, is the transaction coordinator every partition's orphan check asks
	// (orphans.go).
	Txns *TxnChecker
}

// ClusterConfig is what a topics manager of a cluster asks the ownership controller.
type ClusterConfig struct {
	// Owns reports whether this broker leads (topic, partition) now; only those get a
	// partition actor.
	Owns func(topic string, p int32) bool
	// Leader is the broker that leads (topic, partition) for Metadata (-1: none serves it
	// right now) and the broker that holds it (-1: none), which Metadata lists as its
	// replica while it moves.
	Leader func(topic string, p int32) (leader, replica int32)
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
	// Lapsed reports whether a broker's lease has lapsed (the fence's Lapsed): a new
	// leader breaks a partition lock such a broker still holds.
	Lapsed func(id int32) bool
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
	// none queued), and queued the catalogue entry the last queued write of this topic
	// (a CreatePartitions or a config change) writes: the next one is built on it.
	growTo int32
	queued *topicMeta
	// epochs is what is known of each partition's leader epoch (leaderepochs.go).
	epochs []knownEpoch
}

// manager is the topics manager: the catalogue under <data>/topics/ and the parent of
// one actor per partition. It publishes the catalogue (Catalog) by which the connections
// send data requests to the partition actors themselves; no data request passes through
// its mailbox.
type manager struct {
	cfg  Config
	log  zerolog.Logger
	root string
	// throttle bounds every partition's cleaning together (throttle.go).
	throttle *Throttle

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
	// readingEpochs: a read of other partitions' leader-epoch files is under way.
	readingEpochs bool
	// held are the Describes waiting for a partition's leader (Describe.WaitLeader).
	held []heldDescribe
	// dyn are the dynamic broker configs in force (never nil once started), dynTopic
	// the topic configs' defaults they give this broker, dynQueued the last queued write
	// of them (brokerconfigs.go).
	dyn       *BrokerConfigs
	dynTopic  map[string]string
	dynQueued *BrokerConfigs
	// dynReadErr is the last reason they could not be read again, logged once;
	// dynUnread: they could not be read at start and have not been read since.
	dynReadErr string
	dynUnread  bool
	// groupCfgs are the per-group configs as written (groupconfigs.go), and
	// groupCfgsQueued what they will be once the queued writes are made (nil: none).
	groupCfgs, groupCfgsQueued map[string]map[string]string
	// groupCfgsReadErr is the last reason they could not be read again, logged once.
	groupCfgsReadErr string
}

// ManagerProps makes the props of the topics manager (broker wiring: Env.Topics).
func ManagerProps(cfg Config) *actor.Props {
	if cfg.IdleClose == 0 {
		cfg.IdleClose = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	// One throttle for every incarnation's partitions: log.cleaner.io.max.bytes.per.second
	// bounds the broker's cleaning, not each pass.
	throttle := NewThrottle(cfg.Broker.LogCleanerIOMaxBytesPerSecond)
	return actor.PropsOf(func() actor.Actor { return &manager{cfg: cfg, throttle: throttle} },
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
		m.answerHeld()
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
	case *describeAgain:
		m.onDescribeAgain(ctx)
	case *CreateTopics:
		m.handleCreateTopics(ctx, msg)
	case *DeleteTopics:
		m.handleDeleteTopics(ctx, msg)
	case *CreatePartitions:
		m.handleCreatePartitions(ctx, msg)
	case *AlterTopicConfigs:
		m.handleAlterConfigs(ctx, msg)
	case *readBrokerConfigsAgain:
		m.onReadBrokerConfigs(ctx)
	case *PartitionsExist:
		msg.Reply.Resolve(m.handleExist(ctx, msg))
	case *resolveUnknown:
		m.handleResolve(ctx, msg)
	case *InitProducerID:
		m.handleInitProducerID(ctx, msg)
	case *WriteTxnMarker:
		m.handleTxnMarker(ctx, msg)
	case *filesRemoved:
	case *Rebalance:
		m.onRebalance(ctx, msg)
	case *catalogTick:
		m.onCatalogTick(ctx)
		m.readEpochsOfOthers(ctx)
	case *epochOpened:
		m.onEpochOpened(msg)
	case *epochsRead:
		m.onEpochsRead(msg)
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
	m.dyn, m.dynTopic, m.dynQueued = &BrokerConfigs{}, nil, nil
	m.dynUnread = false
	if dyn, err := loadBrokerConfigs(m.cfg.FS, m.root); err != nil {
		m.dynUnread = true // read again before any write, never overwritten unread
		m.log.Error().Err(err).Msg("dynamic_broker_configs_load_failed")
	} else {
		m.dyn, m.dynTopic = dyn, dyn.topicDefaults(m.cfg.NodeID)
	}
	metas, errs := load(m.cfg.FS, m.root)
	for _, err := range errs {
		m.log.Error().Err(err).Msg("topic_load_failed")
	}
	for _, meta := range metas {
		if err := validateTopicConfigs(meta.Configs); err != nil {
			// Written by a kaas that accepted what this one refuses (topicrules.go): it is
			// shown but not applied until an AlterConfigs replaces it.
			m.log.Warn().Str("topic", meta.Name).Str("reason", clip(err.Error(), 256)).Msg("topic_config_not_applied")
		}
		m.add(ctx, meta)
	}
	m.groupCfgs, m.groupCfgsQueued = nil, nil
	m.loadGroupConfigs() // published before the catalogue is loaded (Catalog.Loaded)
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
	m.readEpochsOf(t)
	m.spawnPartitions(ctx, t)
	return t
}

// spawnPartitions starts the partitions of t's catalogue entry that have no actor yet
// (in a cluster, those this broker leads).
func (m *manager) spawnPartitions(ctx actor.Context, t *topicState) {
	m.spawnOwned(ctx, t, m.owns)
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
	c, d := m.cfg.Broker, m.defaults()
	return PartitionConfig{
		Dir:            partitionDir(m.root, meta.Name, p),
		Topic:          meta.Name,
		Partition:      p,
		LeaderEpoch:    meta.LeaderEpochs[p],
		NodeID:         m.cfg.NodeID,
		Lapsed:         m.lapsed(),
		SegmentBytes:   effective(d, meta.Configs, "segment.bytes"),
		RetentionMS:    effective(d, meta.Configs, "retention.ms"),
		RetentionBytes: effective(d, meta.Configs, "retention.bytes"),
		FlushMessages:  max(1, effective(d, meta.Configs, "flush.messages")),
		RetentionCheck: c.LogRetentionCheck,
		Timing:         timingOf(d, meta.Configs),
		Cleaner:        m.cleanerConfig(meta.Configs),
		IdleClose:      m.cfg.IdleClose,
		Now:            m.cfg.Now,
		Log:            m.cfg.Log,
		Metrics:        m.cfg.Metrics,
		FS:             m.cfg.FS,
		Gate:           m.gate(),
		// producer.id.expiration.ms and the producer-state bound (producerstate.go).
		ProducerExpiration:  c.ProducerIDExpiration,
		ProducerExpiryCheck: c.ProducerIDExpirationCheck,
		MaxProducers:        int(c.ProducerStateMaxEntries),
		Txns:                m.cfg.Txns,
	}
}

// maxMessageBytes is the topic's max.message.bytes (the configured default unless it
// overrides it).
func (m *manager) maxMessageBytes(meta *topicMeta) int32 {
	return int32(effective(m.defaults(), meta.Configs, "max.message.bytes"))
}

// lapsed is a partition actor's Lapsed in a cluster (nil: a broker alone).
func (m *manager) lapsed() func(int32) bool {
	if c := m.cfg.Cluster; c != nil {
		return c.Lapsed
	}
	return nil
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
		leader, replica := m.cfg.NodeID, m.cfg.NodeID
		if c := m.cfg.Cluster; c != nil {
			leader, replica = c.Leader(t.meta.Name, p)
		}
		ti.Partitions = append(ti.Partitions, PartitionInfo{Partition: p, Leader: leader, Replica: replica, LeaderEpoch: m.leaderEpoch(t, p, leader)})
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
