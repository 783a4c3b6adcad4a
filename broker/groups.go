package broker

import (
	"fmt"

	"kaas/actors/actor"
	"kaas/actors/group"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/config"
	"kaas/storage"
)

// startGroups replays the offsets journal into the group files, starts the journal actor
// and the groups manager (actors/group), and sets Env.Groups. Replay runs before anything
// serves: a group must never be read from a file the journal is ahead of.
func (b *Broker) startGroups() error {
	om := offsets.NewMetrics(b.met.Registry)
	om.Offsets = b.met.Offsets
	jdir := offsets.JournalDir(b.cfg.DataDir, b.cfg.NodeID)
	// The groups whose file the start leaves to be written behind, listed meanwhile.
	b.pending = offsets.NewPending()
	// A group file replay cannot write (a full disk) does not stop the start: the journal
	// keeps its records and serves them through the group's actor (journal.Recovered).
	// A broker alone, the only reader of its journal, writes no file at start: every
	// group's replayed state goes to the journal, which writes the files behind
	// (SaveMany) while the groups are served. In a cluster a peer taking a group over
	// reads its file, so replay writes them all first.
	replayed, err := offsets.Replay(offsets.ReplayConfig{
		FS: storage.OSFS{}, OffsetsDir: offsets.Dir(b.cfg.DataDir), JournalDir: jdir, Log: b.log, Metrics: om,
		Behind: b.cluster == nil, Pending: b.pending,
	})
	if err != nil {
		return fmt.Errorf("replay offsets journal: %w", err)
	}
	// A broker alone knows which groups never had state (the directory after the
	// replay, what the replay left to the journal, and each group as it is first
	// spawned): their first touch loads nothing. Made before the journal, which takes
	// what the replay left (its adopt empties replayed) and writes files behind.
	var fresh *offsets.Fresh
	if b.cluster == nil {
		if fresh, err = offsets.NewFresh(storage.OSFS{}, offsets.Dir(b.cfg.DataDir), replayed); err != nil {
			return fmt.Errorf("list offsets directory: %w", err)
		}
	}
	b.journal, err = b.sys.SpawnNamed(journal.Props(journal.Config{
		Dir: jdir, Log: b.log, Metrics: om.Journal(), Recovered: replayed,
		Save:     offsets.GroupFileSaver(storage.OSFS{}, offsets.Dir(b.cfg.DataDir)),
		SaveMany: offsets.GroupFilesSaver(storage.OSFS{}, offsets.Dir(b.cfg.DataDir)),
		Saved:    b.pending.Forget,
	}), "offsets-journal")
	if err != nil {
		return fmt.Errorf("start offsets journal: %w", err)
	}
	pid, err := b.sys.SpawnNamed(group.ManagerProps(b.groupsConfig(om, fresh)), "groups")
	if err != nil {
		return fmt.Errorf("start groups manager: %w", err)
	}
	b.env.Groups = pid
	return nil
}

// groupSettings reads the group actors' Settings from the broker configuration.
func groupSettings(c *config.Config) group.Settings {
	return group.Settings{
		InitialRebalanceDelay: c.GroupInitialRebalanceDelay,
		MinSessionTimeout:     c.GroupMinSessionTimeout,
		MaxSessionTimeout:     c.GroupMaxSessionTimeout,
		MaxSize:               int(c.GroupMaxSize),
		MaxPendingMembers:     int(c.GroupMaxPendingMembers),
		Pending:               group.NewPendingBudget(int(c.GroupMaxPendingMembersTotal)),
		IdlePassivation:       c.GroupIdlePassivation,
		OffsetsRetention:      c.OffsetsRetention,
		RetentionCheck:        c.OffsetsRetentionCheck,
		Consumer: group.ConsumerSettings{
			Enabled:           c.ConsumerProtocol(),
			SessionTimeout:    c.GroupConsumerSessionTimeout,
			HeartbeatInterval: c.GroupConsumerHeartbeatInterval,
			MaxSize:           int(c.GroupConsumerMaxSize),
			Assignors:         c.GroupConsumerAssignors,
			Migration:         c.GroupConsumerMigrationPolicy,
		},
	}
}

// groupsConfig wires the groups manager to the broker's offsets: an offsets actor per
// group over the files under offsets.Dir(data.dir), sharing the metrics om, the
// broker's offsets journal and one set of checkpoint write slots. This is the one place
// the offsets side is put together.
//
// fresh, nil in a cluster, tells which groups never had state (ManagerConfig.New).
func (b *Broker) groupsConfig(om *offsets.Metrics, fresh *offsets.Fresh) group.ManagerConfig {
	cfg, log, jpid, pending := &b.cfg, b.log, b.journal, b.pending
	dir := offsets.Dir(cfg.DataDir)
	fsys := storage.OSFS{}
	slots := make(chan struct{}, offsets.DefaultWriteSlots)
	// A broker alone is the only reader of its journal: as it stops, its groups leave
	// their files to the replay at its next start. In a cluster a peer may take a group
	// over and read its file, which must then be complete.
	var leave func() bool
	if b.cluster == nil {
		leave = b.groupsLeaving.Load
	}
	settings := groupSettings(cfg)
	settings.Metrics = group.NewMetrics(b.met.Registry)
	if b.catalog != nil {
		settings.Consumer.Topics = b.catalog
		settings.Consumer.GroupConfigs = b.catalog
	}
	kind := offsets.NewKind(offsets.Config{
		Dir: dir, FS: fsys, Log: log, Metrics: om,
		MaxMetadataBytes: cfg.OffsetMetadataMaxBytes, MaxPendingOffsets: int(cfg.GroupMaxPendingTxnOffsets),
		Journal: jpid, CheckpointInterval: cfg.OffsetsCheckpointInterval, IdleAfter: cfg.OffsetsIdlePassivation,
		WriteSlots: slots, WriteQueue: actor.NewLimiter(offsets.DefaultWriteSlots), LeaveToJournal: leave,
		Written: pending.Forget,
	}, b.gate) // a gate per group, made as it is spawned: it holds the term it was loaded under
	var isNew func(string) bool
	if fresh != nil {
		isNew = fresh.Take
	}
	return group.ManagerConfig{
		Settings:     settings,
		Offsets:      kind.Props,
		New:          isNew,
		NewOffsets:   kind.FreshProps,
		ListGroupIDs: func() ([]string, error) { return pending.ListGroupIDs(fsys, dir) },
		ReadMeta: func(g string) (offsets.GroupMeta, bool, error) {
			return pending.ReadMeta(fsys, dir, g)
		},
		DropTombstones:  b.dropTombstones(fsys, dir),
		Log:             log,
		Owns:            b.owns(),
		Restarts:        b.met.ActorRestarts.WithLabelValues("group"),
		OffsetsRestarts: b.met.ActorRestarts.WithLabelValues("offsets"),
	}
}
