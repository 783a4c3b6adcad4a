package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/txn"
	"kaas/cluster"
	"kaas/peer"
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
// reads either answer). In a cluster, when another broker coordinates the transactional
// id, the question goes to it instead (remoteCoordinator).
func VerifyWithCoordinator(c *Call, v *TxnVerify, reply actor.Promise) {
	if owner, code, remote := remoteCoordinator(c, v.TransactionalID); remote {
		if code != 0 {
			reply.Resolve(&txn.PartitionsVerified{Codes: codesFor(v.Partitions, code)})
			return
		}
		parts := v.Partitions
		askPeerCoordinator(c, owner, v.TransactionalID, v.ProducerID, v.ProducerEpoch, parts, !v.Add,
			func(codes map[string]map[int32]int16, code int16) {
				out := make(map[string]map[int32]int16, len(parts))
				for t, ps := range parts {
					out[t] = make(map[int32]int16, len(ps))
					for _, p := range ps {
						pc, ok := codes[t][p]
						if !ok {
							pc = code
						}
						out[t][p] = pc
					}
				}
				reply.Resolve(&txn.PartitionsVerified{Codes: out})
			})
		return
	}
	askTxns(c, &txn.VerifyPartitions{TransactionalID: v.TransactionalID, ProducerID: v.ProducerID,
		ProducerEpoch: v.ProducerEpoch, Partitions: v.Partitions, Add: v.Add, Reply: reply})
}

// VerifyGroupWithCoordinator is Env.VerifyTxnGroup over the transactions manager:
// contract 3's txn.VerifyGroup. In a cluster, when another broker coordinates the
// transactional id, the question goes to it (remoteCoordinator), the group as the
// reserved topic peer.TxnGroupTopic, partition 0.
func VerifyGroupWithCoordinator(c *Call, v TxnGroup, then func(code int16) kmsg.Response) {
	reply := c.Await(func(r any) kmsg.Response {
		g, _ := r.(*txn.GroupVerified)
		if g == nil {
			return then(kerr.CoordinatorNotAvailable.Code)
		}
		return then(g.ErrorCode)
	})
	if owner, code, remote := remoteCoordinator(c, v.TransactionalID); remote {
		if code != 0 {
			reply.Resolve(&txn.GroupVerified{ErrorCode: code})
			return
		}
		topic := peer.TxnGroupTopic(v.Group)
		askPeerCoordinator(c, owner, v.TransactionalID, v.ProducerID, v.ProducerEpoch,
			map[string][]int32{topic: {0}}, !v.Add, func(codes map[string]map[int32]int16, code int16) {
				if gc, ok := codes[topic][0]; ok {
					code = gc
				}
				reply.Resolve(&txn.GroupVerified{ErrorCode: code})
			})
		return
	}
	askTxns(c, &txn.VerifyGroup{TransactionalID: v.TransactionalID, ProducerID: v.ProducerID,
		ProducerEpoch: v.ProducerEpoch, Group: v.Group, Add: v.Add, Reply: reply})
}

// remoteCoordinator says whether transactional id's coordinator is not this broker's
// manager (remote): in a cluster with an inter-broker client, another broker owns it
// (owner, code 0), or no broker serves it now: COORDINATOR_NOT_AVAILABLE without a view
// or owner, COORDINATOR_LOAD_IN_PROGRESS while this broker waits for a peer to release
// it. The Produce handler turns both into a retriable NOT_ENOUGH_REPLICAS, and
// TxnOffsetCommit into COORDINATOR_NOT_AVAILABLE, which clients retry. A broker alone
// (or one without an inter-broker client) asks its own manager.
func remoteCoordinator(c *Call, id string) (int32, int16, bool) {
	if c.Env.Ownership == nil || c.Env.Peers == nil {
		return 0, 0, false
	}
	owner, st := c.Env.Ownership().Txn(id)
	switch st {
	case cluster.Elsewhere:
		return owner, 0, true
	case cluster.Unavailable:
		return 0, kerr.CoordinatorNotAvailable.Code, true
	case cluster.Waiting:
		return 0, kerr.CoordinatorLoadInProgress.Code, true
	}
	return 0, 0, false
}

// askPeerCoordinator sends broker owner an AddPartitionsToTxn v4+ (batched, one
// transaction; VerifyOnly as given) and calls done, on the inter-broker client's
// goroutine, with the codes its answer names and the code for everything it does not,
// COORDINATOR_NOT_AVAILABLE (the peer could not be reached, did not answer in time, or
// answered a top-level error).
func askPeerCoordinator(c *Call, owner int32, id string, pid int64, epoch int16, tps map[string][]int32, verifyOnly bool,
	done func(codes map[string]map[int32]int16, code int16)) {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = id, pid, epoch, verifyOnly
	for topic, ps := range tps {
		rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		rt.Topic, rt.Partitions = topic, ps
		t.Topics = append(t.Topics, rt)
	}
	req.Transactions = append(req.Transactions, t)
	c.Env.Peers.Send(owner, req, func(r kmsg.Response, err error) {
		resp, _ := r.(*kmsg.AddPartitionsToTxnResponse)
		if err != nil || resp == nil {
			// The client logged why (inter_broker_request_failed).
			done(nil, kerr.CoordinatorNotAvailable.Code)
			return
		}
		// A top-level error (the peer has no coordinator, or refused this broker
		// CLUSTER_ACTION) names no partition: everything is COORDINATOR_NOT_AVAILABLE,
		// which the client retries.
		code := kerr.CoordinatorNotAvailable.Code
		codes := map[string]map[int32]int16{}
		for _, rt := range resp.Transactions {
			if rt.TransactionalID != id {
				continue
			}
			for _, tp := range rt.Topics {
				if codes[tp.Topic] == nil {
					codes[tp.Topic] = map[int32]int16{}
				}
				for _, p := range tp.Partitions {
					codes[tp.Topic][p.Partition] = p.ErrorCode
				}
			}
		}
		done(codes, code)
	})
}

func codesFor(tps map[string][]int32, code int16) map[string]map[int32]int16 {
	out := make(map[string]map[int32]int16, len(tps))
	for t, ps := range tps {
		out[t] = make(map[int32]int16, len(ps))
		for _, p := range ps {
			out[t][p] = code
		}
	}
	return out
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
