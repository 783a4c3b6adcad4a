package broker

import (
	"context"
	"time"

	"kaas/actors/partition"
)

// startManagers starts the actors that own groups and topics and puts their PIDs in the
// connections' Env. Each manager's own file (groups.go, topics.go) does its part.
func (b *Broker) startManagers() error {
	b.catalog = partition.NewCatalog()
	if err := b.startGroups(); err != nil {
		return err
	}
	if err := b.startTopics(); err != nil {
		return err
	}
	return b.startTxns()
}

// stopManagers stops the managers gracefully: groups first (released: parked joins are
// answered, offsets actors flush and write their files; protoactor's own stop of the
// manager would stop them with a system message that drops what their mailboxes hold),
// then the offsets journal, then topics. The transaction coordinator and its journal stop
// before all of them.
func (b *Broker) stopManagers(timeout time.Duration) {
	// The transaction coordinator first: its markers go to the partitions and groups.
	b.stopTxns(timeout)
	if b.env.Groups != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := b.releaseGroups(ctx, nil)
		cancel()
		if err != nil {
			b.log.Error().Err(err).Msg("groups_release_timed_out")
		}
		if err := b.sys.Poison(b.env.Groups, timeout); err != nil {
			b.log.Error().Err(err).Msg("groups_manager_stop_timed_out")
		}
	}
	if b.journal != nil {
		if err := b.sys.Poison(b.journal, timeout); err != nil {
			b.log.Error().Err(err).Msg("offsets_journal_stop_timed_out")
		}
	}
	if b.env.Topics != nil {
		if err := b.sys.Poison(b.env.Topics, timeout); err != nil {
			b.log.Error().Err(err).Msg("topics_manager_stop_timed_out")
		}
	}
}
