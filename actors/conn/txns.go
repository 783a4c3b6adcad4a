package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/txn"
)

// askTxns sends msg to the transactions manager (Env.Txns).
func askTxns(c *Call, msg any) { c.Env.System.Send(c.Env.Txns, msg) }

// txnCodeFor maps a coordinator's code (Apache 4.x's) to what a request version knows
// (§1.7): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below fencedSince, and
// TRANSACTION_ABORTABLE is INVALID_TXN_STATE below abortableSince.
func txnCodeFor(code, version, fencedSince, abortableSince int16) int16 {
	switch {
	case code == kerr.ProducerFenced.Code && version < fencedSince:
		return kerr.InvalidProducerEpoch.Code
	case code == kerr.TransactionAbortable.Code && version < abortableSince:
		return kerr.InvalidTxnState.Code
	}
	return code
}

// VerifyWithCoordinator is Env.VerifyTxn over the transactions manager (Env.Txns):
// contract 2's txn.VerifyPartitions, answered *txn.PartitionsVerified (txnVerifiedCodes
// reads either answer).
func VerifyWithCoordinator(c *Call, v *TxnVerify, reply actor.Promise) {
	askTxns(c, &txn.VerifyPartitions{TransactionalID: v.TransactionalID, ProducerID: v.ProducerID,
		ProducerEpoch: v.ProducerEpoch, Partitions: v.Partitions, Add: v.Add, Reply: reply})
}

// VerifyGroupWithCoordinator is Env.VerifyTxnGroup over the transactions manager:
// contract 3's txn.VerifyGroup.
func VerifyGroupWithCoordinator(c *Call, v TxnGroup, then func(code int16) kmsg.Response) {
	reply := c.Await(func(r any) kmsg.Response {
		g, _ := r.(*txn.GroupVerified)
		if g == nil {
			return then(kerr.CoordinatorNotAvailable.Code)
		}
		return then(g.ErrorCode)
	})
	askTxns(c, &txn.VerifyGroup{TransactionalID: v.TransactionalID, ProducerID: v.ProducerID,
		ProducerEpoch: v.ProducerEpoch, Group: v.Group, Add: v.Add, Reply: reply})
}

// txnVerifiedCodes reads a verification's answer: the coordinator's
// *txn.PartitionsVerified, or a *TxnVerified (tests' stand-ins); nil when neither.
func txnVerifiedCodes(v any) map[string]map[int32]int16 {
	switch r := v.(type) {
	case *txn.PartitionsVerified:
		return r.Codes
	case *TxnVerified:
		return r.Codes
	}
	return nil
}
