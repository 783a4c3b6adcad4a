package broker

import (
	"context"
	"fmt"
	"time"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/actors/group"
	"kaas/actors/journal"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/cluster"
	"kaas/storage"
)

// startTxns replays the transaction coordinator's state, starts its journal (a second
// instance of actors/journal) and the transactions manager, and sets Env.Txns. Runs
// after the topics manager, which hands out the producer ids.
//
// A broker alone keeps its journal under <data.dir>/transactions/journal and starts an
// actor for every id it replayed. A broker of a cluster keeps its own journal beside the
// offsets journals (txn.NodeJournalDir) and the id files with every broker's on the
// shared volume: its replay brings the files up to date with its own journal, and its
// ids start only when the ownership controller gives them to it (adoptTxns), as groups
// do.
func (b *Broker) startTxns() error {
	fsys := storage.OSFS{}
	c := &b.cfg
	jdir := txn.JournalDir(c.DataDir)
	if b.cluster != nil {
		jdir = txn.NodeJournalDir(c.DataDir, c.NodeID)
	}
	rep, err := txn.ReplayDirs(fsys, txn.IDsDir(c.DataDir), jdir, b.log)
	if err != nil {
		return fmt.Errorf("replay transactions: %w", err)
	}
	met := txn.NewMetrics(b.met.Registry)
	b.txnJournal, err = b.sys.SpawnNamed(journal.Props(journal.Config{
		Dir: jdir, Name: "transactions_journal", Log: b.log, FirstSeq: rep.Next, Metrics: met.Journal(),
	}), "transactions-journal")
	if err != nil {
		return fmt.Errorf("start transactions journal: %w", err)
	}
	mc := txn.ManagerConfig{
		Replayed: rep, Journal: b.txnJournal, FS: fsys, Dir: txn.IDsDir(c.DataDir), Topics: b.env.Topics, Log: b.log,
		Settings: txn.Settings{
			Expiration:    c.TransactionalIDExpiration,
			MaxPartitions: int(c.TransactionMaxPartitions), Open: txn.NewBudget(int(c.TransactionMaxOpen)),
		},
		// Markers go through the topics manager to each partition's actor, pending
		// offsets' ends through the groups manager to each group's offsets actor.
		Sides:   txnSides(b.env.Topics, b.env.Groups),
		Metrics: met,
		Resumes: b.met.ActorRestarts.WithLabelValues("transaction"),
	}
	if b.cluster != nil {
		// The ids start when the controller gives them (Load, adoptTxns).
		mc.Replayed = &txn.Replayed{Next: rep.Next}
		mc.Owns = func(id string) bool {
			if b.cluster.ctl == nil {
				return false
			}
			return b.cluster.ctl.State().OwnsTxn(id)
		}
		mc.Gate = b.gate
		// Markers and pending offsets' ends for partitions and groups other brokers
		// serve go to them over the inter-broker client (txnpeers.go).
		mc.Sides = b.clusterTxnSides()
	}
	pid, err := b.sys.SpawnNamed(txn.ManagerProps(mc), "transactions")
	if err != nil {
		return fmt.Errorf("start transactions manager: %w", err)
	}
	b.env.Txns = pid
	if b.cluster == nil {
		b.txns.Store(pid)
	} else {
		// A partition does not know which broker coordinates a producer id: its orphan
		// checks read the coordinators' durable state on the shared volume instead (the
		// manager here knows only the ids this broker coordinates: never asked).
		b.txnOrphans, err = b.sys.SpawnNamed(txn.OrphanCheckerProps(txn.OrphanCheckerConfig{
			FS: fsys, Data: c.DataDir, Log: b.log,
		}), "transactions-orphans")
		if err != nil {
			return fmt.Errorf("start transactions orphan checker: %w", err)
		}
		b.txns.Store(b.txnOrphans)
	}
	// The partitions' verification of a transactional batch (contract 2) and
	// TxnOffsetCommit's of its group (contract 3) ask this coordinator.
	if b.env.VerifyTxn == nil { // tests may stand in for it (WithTxnVerifier)
		b.env.VerifyTxn = conn.VerifyWithCoordinator
	}
	b.env.VerifyTxnGroup = conn.VerifyGroupWithCoordinator
	return nil
}

// adoptTxns, in a cluster, brings the files of the transactional ids st gives this
// broker up to date with the brokers' journals (txn.Adopt), then has the manager start
// them (txn.Load) and waits until they run: only then does the controller let clients
// reach them.
func (b *Broker) adoptTxns(st *cluster.State) error {
	if b.env.Txns == nil {
		return nil
	}
	// Every broker's journal on the volume, this one's too (after its own lease lapsed
	// and was taken again, the ids it held come back with what its journal holds past
	// their files), and those of brokers beyond the cluster's size now (a shrunk
	// cluster's: stopped, their ids' newest records are in their journals).
	dirs, err := txn.NodeJournalDirs(storage.OSFS{}, b.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("adopt transactional ids: %w", err)
	}
	if _, err := txn.Adopt(txn.AdoptConfig{FS: storage.OSFS{}, IDsDir: txn.IDsDir(b.cfg.DataDir),
		JournalDirs: dirs, Owns: st.OwnsTxn, Log: b.log}); err != nil {
		return fmt.Errorf("adopt transactional ids: %w", err)
	}
	done := make(chan error, 1)
	p := actor.PromiseFunc(func(v any) { err, _ := v.(error); done <- err })
	b.sys.Send(b.env.Txns, &txn.Load{Owns: st.OwnsTxn, Reply: p})
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("load transactional ids: %w", err)
		}
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("load transactional ids: no answer in 10s")
	}
}

// releaseTxns stops the transactional ids keep does not keep (nil: every one) and waits
// for their files to be saved.
func (b *Broker) releaseTxns(ctx context.Context, keep *cluster.State) error {
	if b.env.Txns == nil {
		return nil
	}
	done := make(chan struct{})
	p := actor.PromiseFunc(func(any) { close(done) })
	keepFn := func(string) bool { return false }
	if keep != nil {
		keepFn = keep.OwnsTxn
	}
	b.sys.Send(b.env.Txns, &txn.Release{Keep: keepFn, Reply: p})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("release transactional ids: %w", ctx.Err())
	}
}

// txnSides reaches the partitions (contract 1: partition.WriteTxnMarker, routed by the
// topics manager) and the groups (contract 3: group.TxnOffsetMarker, routed by the
// groups manager to the group's offsets actor).
func txnSides(topics, groups *actor.PID) txn.Sides {
	return txn.Sides{
		WriteMarker: func(ctx actor.Context, m txn.Marker, reply actor.Promise) {
			ctx.Send(topics, &partition.WriteTxnMarker{Topic: m.Topic, Partition: m.Partition,
				ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit,
				CoordinatorEpoch: m.CoordinatorEpoch, Reply: reply})
		},
		EndOffsets: func(ctx actor.Context, g txn.GroupMarker, reply actor.Promise) {
			ctx.Send(groups, &group.TxnOffsetMarker{Group: g.Group, ProducerID: g.ProducerID,
				ProducerEpoch: g.ProducerEpoch, Commit: g.Commit, Reply: reply})
		},
		Code: func(v any) (int16, bool) {
			switch r := v.(type) {
			case *partition.TxnMarkerWritten:
				return r.ErrorCode, true
			case *group.TxnOffsetMarked:
				return r.ErrorCode, true
			}
			return 0, false
		},
	}
}

// stopTxns stops the transactions manager, then its journal (every answer a transition
// waits for comes from it).
func (b *Broker) stopTxns(timeout time.Duration) {
	if b.txnOrphans != nil {
		if err := b.sys.Poison(b.txnOrphans, timeout); err != nil {
			b.log.Error().Err(err).Msg("transactions_orphan_checker_stop_timed_out")
		}
	}
	if b.env.Txns != nil {
		if err := b.sys.Poison(b.env.Txns, timeout); err != nil {
			b.log.Error().Err(err).Msg("transactions_manager_stop_timed_out")
		}
	}
	if b.txnJournal != nil {
		if err := b.sys.Poison(b.txnJournal, timeout); err != nil {
			b.log.Error().Err(err).Msg("transactions_journal_stop_timed_out")
		}
	}
}

// txnChecker is the partitions' orphan check (partition.TxnChecker): a recovered open
// transaction is asked (txn.CheckTxn) of the coordinator on a broker alone, and in a
// cluster, where a partition does not know which broker coordinates a producer id, of
// the orphan checker, which reads every coordinator's durable state on the shared
// volume (txn.CheckVolume) and answers nothing (ask again) when it cannot read it all.
// The topics manager starts before either, so a partition that opens first gets no
// answer and asks again. Nil with a test's stand-in verifier (WithTxnVerifier), whose
// transactions the coordinator never holds.
func (b *Broker) txnChecker() *partition.TxnChecker {
	if b.env.VerifyTxn != nil {
		return nil
	}
	return &partition.TxnChecker{
		Ask: func(ctx actor.Context, q partition.OpenTxn, reply actor.Promise) bool {
			pid := b.txns.Load()
			if pid == nil {
				return false
			}
			ctx.Send(pid, &txn.CheckTxn{Topic: q.Topic, Partition: q.Partition, ProducerID: q.ProducerID,
				ProducerEpoch: q.ProducerEpoch, Reply: reply})
			return true
		},
		Held: func(v any) (held, known bool) {
			r, ok := v.(*txn.TxnChecked)
			if !ok || r == nil {
				return false, false
			}
			return r.Held, true
		},
	}
}
