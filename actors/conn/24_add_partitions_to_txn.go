package conn

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/actors/txn"
	"kaas/peer"
)

// AddPartitionsToTxn (key 24), v0–v5: partitions into a producer's transaction.
//
//	v1: same as v0. v2: PRODUCER_FENCED. v3: flexible (the last client version).
//	v4: batched across transactional ids, VerifyOnly (brokers' KIP-890 part 1
//	verification); a top-level error code. v5: TRANSACTION_ABORTABLE.
//
// The coordinator (Env.Txns) writes the Ongoing state before the answer.
//
// A v4+ request from a peer (its client id starts with peer.ClientIDPrefix) is another
// broker's verification of a transactional write to a partition or group it serves,
// whose producer's transaction this broker coordinates (conn.VerifyWithCoordinator,
// VerifyGroupWithCoordinator there). Each transaction is then what that broker would ask
// its own coordinator: txn.VerifyPartitions with Add = !VerifyOnly (VerifyOnly=false is
// Produce v12's implicit add, KIP-890 part 2: a TV2 transaction, kept waiting while the
// producer's previous one completes, where the explicit AddPartitions of a v3 client is
// not), and, for a topic in the reserved group form (peer.TxnGroupTopic, partition 0),
// txn.VerifyGroup with the same Add (TxnOffsetCommit's verification, its implicit add
// from v5), its code the partition's.
func init() { register(24, 0, 5, handleAddPartitionsToTxn) }

func handleAddPartitionsToTxn(c *Call) {
	req := c.Req.(*kmsg.AddPartitionsToTxnRequest)
	if req.Version <= 3 {
		addPartitionsV3(c, req)
		return
	}
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if c.Env.Txns == nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		c.Respond(resp)
		return
	}
	if strings.HasPrefix(c.ClientID, peer.ClientIDPrefix) {
		verifyForPeer(c, req)
		return
	}
	done := c.Await(func(v any) kmsg.Response {
		results, _ := v.([]any)
		for i, t := range req.Transactions {
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = t.TransactionalID
			var codes map[string]map[int32]int16
			if i < len(results) {
				if r, ok := results[i].(*txn.PartitionsVerified); ok {
					codes = r.Codes
				}
			}
			for _, tp := range t.Topics {
				rtp := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
				rtp.Topic = tp.Topic
				for _, p := range tp.Partitions {
					rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
					rp.Partition = p
					code, ok := codes[tp.Topic][p]
					if !ok {
						code = kerr.CoordinatorNotAvailable.Code
					}
					rp.ErrorCode = txnCodeFor(code, req.Version, 2, 5)
					rtp.Partitions = append(rtp.Partitions, rp)
				}
				rt.Topics = append(rt.Topics, rtp)
			}
			resp.Transactions = append(resp.Transactions, rt)
		}
		return resp
	})
	batch := &txn.AddPartitionsBatch{Reply: done}
	for _, t := range req.Transactions {
		batch.Requests = append(batch.Requests, &txn.AddPartitions{TransactionalID: t.TransactionalID,
			ProducerID: t.ProducerID, ProducerEpoch: t.ProducerEpoch, Partitions: topicsOfV4(t.Topics), VerifyOnly: t.VerifyOnly})
	}
	askTxns(c, batch)
}

func topicsOfV4(ts []kmsg.AddPartitionsToTxnRequestTransactionTopic) map[string][]int32 {
	out := make(map[string][]int32, len(ts))
	for _, t := range ts {
		out[t.Topic] = append(out[t.Topic], t.Partitions...)
	}
	return out
}

// addPartitionsV3 is the clients' form: one transaction, an error per partition.
func addPartitionsV3(c *Call, req *kmsg.AddPartitionsToTxnRequest) {
	tps := make(map[string][]int32, len(req.Topics))
	for _, t := range req.Topics {
		tps[t.Topic] = append(tps[t.Topic], t.Partitions...)
	}
	respond := func(codes map[string]map[int32]int16, all int16) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition = p
				code, ok := codes[t.Topic][p]
				if !ok {
					code = all
				}
				rp.ErrorCode = txnCodeFor(code, req.Version, 2, 5)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if c.Env.Txns == nil {
		c.Respond(respond(nil, kerr.CoordinatorNotAvailable.Code))
		return
	}
	// Partitions the catalogue does not hold fail the request before the coordinator
	// sees it: UNKNOWN_TOPIC_OR_PARTITION for them, OPERATION_NOT_ATTEMPTED for the
	// others, nothing added (Apache's KafkaApis, from its metadata cache).
	if c.Env.Catalog != nil {
		routes := c.Env.Catalog.Routes()
		unknown := map[string]map[int32]int16{}
		for t, ps := range tps {
			for _, p := range ps {
				// Only a partition the catalogue does not have: in a cluster one another
				// broker leads (NOT_LEADER_OR_FOLLOWER here) is the transaction's all the same.
				if code := routes.Find(t, partition.TopicID{}, p).Code; code == kerr.UnknownTopicOrPartition.Code {
					if unknown[t] == nil {
						unknown[t] = map[int32]int16{}
					}
					unknown[t][p] = kerr.UnknownTopicOrPartition.Code
				}
			}
		}
		if len(unknown) > 0 {
			c.Respond(respond(unknown, kerr.OperationNotAttempted.Code))
			return
		}
	}
	reply := c.Await(func(v any) kmsg.Response {
		return respond(v.(*txn.PartitionsVerified).Codes, kerr.CoordinatorNotAvailable.Code)
	})
	askTxns(c, &txn.AddPartitions{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
		ProducerEpoch: req.ProducerEpoch, Partitions: tps, Reply: reply})
}

// verifyForPeer answers a peer's v4+ request (see the top): per transaction, one
// txn.VerifyPartitions for its topics and one txn.VerifyGroup per reserved group topic,
// all gathered. A partition no answer names is COORDINATOR_NOT_AVAILABLE, as for a
// client; the reserved form at a partition other than 0 is UNKNOWN_TOPIC_OR_PARTITION.
func verifyForPeer(c *Call, req *kmsg.AddPartitionsToTxnRequest) {
	type ask struct {
		parts int // the gather's answer holding the transaction's partitions; -1: none
		group map[string]int
	}
	plan := make([]ask, len(req.Transactions))
	var msgs []func(actor.Promise) any
	for i, t := range req.Transactions {
		plan[i] = ask{parts: -1, group: map[string]int{}}
		tps := map[string][]int32{}
		for _, tp := range t.Topics {
			g, reserved := peer.TxnGroupOf(tp.Topic)
			if !reserved {
				tps[tp.Topic] = append(tps[tp.Topic], tp.Partitions...)
				continue
			}
			if _, ok := plan[i].group[g]; ok {
				continue
			}
			plan[i].group[g] = len(msgs)
			vg := &txn.VerifyGroup{TransactionalID: t.TransactionalID, ProducerID: t.ProducerID,
				ProducerEpoch: t.ProducerEpoch, Group: g, Add: !t.VerifyOnly}
			msgs = append(msgs, func(reply actor.Promise) any { vg.Reply = reply; return vg })
		}
		if len(tps) > 0 {
			plan[i].parts = len(msgs)
			vp := &txn.VerifyPartitions{TransactionalID: t.TransactionalID, ProducerID: t.ProducerID,
				ProducerEpoch: t.ProducerEpoch, Partitions: tps, Add: !t.VerifyOnly}
			msgs = append(msgs, func(reply actor.Promise) any { vp.Reply = reply; return vp })
		}
	}
	a := c.conn
	g := a.newGather(c, len(msgs), func(int) any { return nil }, func(results []any) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for i, t := range req.Transactions {
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = t.TransactionalID
			var codes map[string]map[int32]int16
			if j := plan[i].parts; j >= 0 {
				if r, ok := results[j].(*txn.PartitionsVerified); ok {
					codes = r.Codes
				}
			}
			for _, tp := range t.Topics {
				rtp := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
				rtp.Topic = tp.Topic
				gname, reserved := peer.TxnGroupOf(tp.Topic)
				for _, p := range tp.Partitions {
					rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
					rp.Partition = p
					code, ok := codes[tp.Topic][p]
					if reserved {
						code, ok = kerr.UnknownTopicOrPartition.Code, true
						if p == 0 {
							code, ok = 0, false
							if r, got := results[plan[i].group[gname]].(*txn.GroupVerified); got {
								code, ok = r.ErrorCode, true
							}
						}
					}
					if !ok {
						code = kerr.CoordinatorNotAvailable.Code
					}
					rp.ErrorCode = txnCodeFor(code, req.Version, 2, 5)
					rtp.Partitions = append(rtp.Partitions, rp)
				}
				rt.Topics = append(rt.Topics, rtp)
			}
			resp.Transactions = append(resp.Transactions, rt)
		}
		return resp
	})
	for i, m := range msgs {
		a.ask(g, i, c.Env.Txns, m)
	}
	a.start(g, partition.DefaultRequestTimeout)
}
