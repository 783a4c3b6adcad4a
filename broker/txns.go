package broker

import (
	"fmt"
	"time"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/actors/group"
	"kaas/actors/journal"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/storage"
)

// startTxns replays the transaction coordinator's state, starts its journal (a second
// instance of actors/journal, under <data.dir>/transactions/journal) and the
// transactions manager, and sets Env.Txns. Only a broker alone coordinates transactions
// this round: in a cluster (a registry other than dev) Env.Txns stays nil and a
// transactional InitProducerId gets UNSUPPORTED_VERSION, as before. Runs after the
// topics manager, which hands out the producer ids.
func (b *Broker) startTxns() error {
	if b.cluster != nil {
		return nil
	}
	fsys := storage.OSFS{}
	rep, err := txn.Replay(fsys, b.cfg.DataDir, b.log)
	if err != nil {
		return fmt.Errorf("replay transactions: %w", err)
	}
	b.txnJournal, err = b.sys.SpawnNamed(journal.Props(journal.Config{
		Dir: txn.JournalDir(b.cfg.DataDir), Name: "transactions_journal", Log: b.log, FirstSeq: rep.Next,
	}), "transactions-journal")
	if err != nil {
		return fmt.Errorf("start transactions journal: %w", err)
	}
	c := &b.cfg
	pid, err := b.sys.SpawnNamed(txn.ManagerProps(txn.ManagerConfig{
		Replayed: rep, Journal: b.txnJournal, FS: fsys, Dir: txn.IDsDir(c.DataDir), Topics: b.env.Topics, Log: b.log,
		Settings: txn.Settings{
			Expiration:    c.TransactionalIDExpiration,
			MaxPartitions: int(c.TransactionMaxPartitions), Open: txn.NewBudget(int(c.TransactionMaxOpen)),
		},
		// Markers go through the topics manager to each partition's actor, pending
		// offsets' ends through the groups manager to each group's offsets actor.
		Sides:   txnSides(b.env.Topics, b.env.Groups),
		Metrics: txn.NewMetrics(b.met.Registry),
		Resumes: b.met.ActorRestarts.WithLabelValues("transaction"),
	}), "transactions")
	if err != nil {
		return fmt.Errorf("start transactions manager: %w", err)
	}
	b.env.Txns = pid
	b.txns.Store(pid)
	// The partitions' verification of a transactional batch (contract 2) and
	// TxnOffsetCommit's of its group (contract 3) ask this coordinator.
	if b.env.VerifyTxn == nil { // tests may stand in for it (WithTxnVerifier)
		b.env.VerifyTxn = conn.VerifyWithCoordinator
	}
	b.env.VerifyTxnGroup = conn.VerifyGroupWithCoordinator
	return nil
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
// transaction is asked of the coordinator (txn.CheckTxn). The topics manager starts
// before the coordinator, so a partition that opens first gets no answer and asks again.
// Nil in a cluster, which has no coordinator yet, and with a test's stand-in verifier
// (WithTxnVerifier), whose transactions the coordinator never holds.
func (b *Broker) txnChecker() *partition.TxnChecker {
	if b.cluster != nil || b.env.VerifyTxn != nil {
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
