package broker

import (
	"fmt"

	"kaas/actors/group"
	"kaas/actors/offsets"
	"kaas/storage"
)

// startGroups replays the offsets journal into the group files, starts the journal actor
// and the groups manager (actors/group), and sets Env.Groups. Replay runs before anything
// serves: a group must never be read from a file the journal is ahead of.
func (b *Broker) startGroups() error {
	om := offsets.NewMetrics(b.met.Registry)
	jdir := offsets.JournalDir(b.cfg.DataDir, b.cfg.NodeID)
	// A group file replay cannot write (a full disk) does not stop the start: the journal
	// keeps its records and serves them through the group's actor (offsets.Replayed).
	replayed, err := offsets.Replay(offsets.ReplayConfig{
		FS: storage.OSFS{}, OffsetsDir: offsets.Dir(b.cfg.DataDir), JournalDir: jdir, Log: b.log, Metrics: om,
	})
	if err != nil {
		return fmt.Errorf("replay offsets journal: %w", err)
	}
	b.journal, err = b.sys.SpawnNamed(offsets.JournalProps(offsets.JournalConfig{
		Dir: jdir, Log: b.log, Metrics: om, Replayed: replayed,
		Save: offsets.GroupFileSaver(storage.OSFS{}, offsets.Dir(b.cfg.DataDir)),
	}), "offsets-journal")
	if err != nil {
		return fmt.Errorf("start offsets journal: %w", err)
	}
	pid, err := group.NewManager(b.sys, &b.cfg, b.log, om, b.journal)
	if err != nil {
		return fmt.Errorf("start groups manager: %w", err)
	}
	b.env.Groups = pid
	return nil
}
