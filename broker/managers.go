package broker

import (
	"context"
	"time"

	"kaas/actors/actor"
	"kaas/actors/group"
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

// stopManagers stops the managers gracefully: groups first, then the offsets journal,
// then topics. The transaction coordinator and its journal stop before all of them.
//
// In a cluster the groups are released (parked joins are answered, offsets actors flush
// and write their files, which a peer adopting a group reads; protoactor's own stop of the
// manager would stop them with a system message that drops what their mailboxes hold),
// and the manager stops. A broker alone halts them instead (haltGroups): its journal,
// which holds every acknowledged change the group files lack, stops after the
// connections (stopAlone), and the group and offsets actors are left where they stand.
func (b *Broker) stopManagers(timeout time.Duration) {
	// The transaction coordinator first: its markers go to the partitions and groups.
	b.stopTxns(timeout)
	if b.env.Groups != nil {
		if b.cluster == nil {
			b.haltGroups(timeout)
		} else {
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
	}
	if b.cluster != nil {
		b.stopJournal(timeout)
	}
	if b.env.Topics != nil {
		if err := b.sys.Poison(b.env.Topics, timeout); err != nil {
			b.log.Error().Err(err).Msg("topics_manager_stop_timed_out")
		}
	}
}

// haltGroups prepares a broker alone's stop of its groups (group.Halt): the groups that
// have had members answer their waiters, every request from now on is answered
// NOT_COORDINATOR, and the commits in flight go on to the journal, which stays until
// the connections are done (stopAlone). No group is released or stopped one by one:
// their files are left to the replay at the next start, as a stopping offsets actor of
// a broker alone leaves them anyway (offsets.Config.LeaveToJournal).
func (b *Broker) haltGroups(timeout time.Duration) {
	done := make(chan struct{})
	b.sys.Send(b.env.Groups, &group.Halt{Reply: actor.PromiseFunc(func(any) { close(done) })})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		b.log.Error().Dur("timeout_ms", timeout).Msg("groups_halt_timed_out")
	}
}

// stopAlone ends a broker alone's groups once its connections are done: the offsets
// journal stops (it answers every append it holds, each once durable), then the actors
// left (the groups manager, the group and offsets actors) are halted where they stand
// (actor.System.Halt): none runs again, so none writes a file once the data dir is
// unlocked. A checkpoint already writing a group file is waited for by the system's
// Shutdown; it writes only what the journal holds.
func (b *Broker) stopAlone(timeout time.Duration) {
	if b.cluster != nil {
		return
	}
	b.stopJournal(timeout)
	if !b.sys.Halt(timeout) {
		b.log.Error().Dur("timeout_ms", timeout).Msg("actors_halt_timed_out")
	}
}

// stopJournal stops the offsets journal after everything already sent to it.
func (b *Broker) stopJournal(timeout time.Duration) {
	if b.journal == nil {
		return
	}
	if err := b.sys.Poison(b.journal, timeout); err != nil {
		b.log.Error().Err(err).Msg("offsets_journal_stop_timed_out")
	}
}
