package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
	"kaas/actors/offsets"
)

// TxnOffsetCommit (key 28), v0–v5, as Apache 4.0 and 4.1 offer it (kmsg knows v6,
// KIP-1319's topic ids, which Apache 4.2 adds; not offered here).
//
//	v1: same shape. v2: committed_leader_epoch. v3: flexible; generation_id, member_id,
//	group_instance_id (KIP-447): the group checks them as OffsetCommit's, so a zombie
//	consumer's producer is fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
//	FENCED_INSTANCE_ID). v4: TRANSACTION_ABORTABLE may be answered (KIP-890). v5: the
//	group is added to the transaction implicitly (KIP-890 part 2, TV2).
//
// The steps, in Apache's order (KafkaApis.handleTxnOffsetCommitRequest, then
// GroupCoordinatorService.commitTransactionalOffsets): authorization (authz.go),
// UNKNOWN_TOPIC_OR_PARTITION for partitions missing from the catalogue, the coordinator
// checks (NOT_COORDINATOR, INVALID_GROUP_ID for ""), then the transaction coordinator is
// asked whether the group is in the producer's transaction (v5: adds it), and only then
// does the group validate the commit and its offsets actor store the entries in the
// producer's pending layer: invisible to OffsetFetch until the commit marker
// (group.TxnOffsetMarker) applies them.
func init() { register(28, 0, 5, handleTxnOffsetCommit) }

// TxnGroup is what TxnOffsetCommit asks the transaction coordinator: is Group in the
// producer's ongoing transaction (Add: put it there, TxnOffsetCommit v5)? It is
// contract 3's txn.VerifyGroup, sent to Env.Txns and answered *txn.GroupVerified.
type TxnGroup struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Group           string
	Add             bool
}

// TxnGroupVerifier asks the transaction coordinator v and calls then with its answer's
// code inside the connection actor; then returns the response to send, or nil when it
// handed the call on. The verifier sends what then returns: as the value of its Await's
// convert (the coordinator's answer came back), or with c.Respond when it answers at
// once. Env.VerifyTxnGroup holds the broker's.
type TxnGroupVerifier func(c *Call, v TxnGroup, then func(code int16) kmsg.Response)

// codeNoTxnCoordinator answers a TxnOffsetCommit when the broker has no transaction
// coordinator (Env.VerifyTxnGroup nil): Apache's verification of a coordinator it cannot
// reach ends, through NOT_ENOUGH_REPLICAS, as COORDINATOR_NOT_AVAILABLE
// (GroupCoordinatorService.normalizeException). No producer of this broker can be in a
// transaction then: InitProducerId refuses a transactional id.
var codeNoTxnCoordinator = kerr.CoordinatorNotAvailable.Code

func handleTxnOffsetCommit(c *Call) {
	req := c.Req.(*kmsg.TxnOffsetCommitRequest)
	var tps []offsets.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	withExistence(c, tps, func(exists []bool) kmsg.Response { return txnCommitKnown(c, req, exists) })
}

// txnCommitKnown answers UNKNOWN_TOPIC_OR_PARTITION for the partitions the catalogue
// does not have, and sends the others on: coordinator checks, the transaction
// coordinator, the group.
func txnCommitKnown(c *Call, req *kmsg.TxnOffsetCommitRequest, exists []bool) kmsg.Response {
	const sent = -2
	codes := make([][]int16, len(req.Topics))
	msg := &group.TxnCommitOffsets{
		Group: req.Group, TransactionalID: req.TransactionalID,
		ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch, Generation: -1,
	}
	if c.Version >= 3 {
		msg.MemberID, msg.Generation = req.MemberID, req.Generation
		if req.InstanceID != nil {
			msg.InstanceID = *req.InstanceID
		}
	}
	k := 0
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			known := exists[k]
			k++
			if !known {
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			codes[i][j] = sent
			e := offsets.Entry{TopicPartition: offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition}}
			e.Offset = p.Offset
			e.LeaderEpoch = -1
			if c.Version >= 2 {
				e.LeaderEpoch = p.LeaderEpoch
			}
			if p.Metadata != nil {
				e.Metadata = *p.Metadata
			}
			msg.Entries = append(msg.Entries, e)
		}
	}
	version := c.Version
	// build lays the answers out: the group's codes, in order, for the partitions sent,
	// or one code (all) for every one of them.
	build := func(answers []int16, all int16) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		k := 0
		for i, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for j, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = codes[i][j]
				if rp.ErrorCode == sent {
					rp.ErrorCode = all
					if all == 0 {
						rp.ErrorCode = kerr.UnknownServerError.Code
						if k < len(answers) {
							rp.ErrorCode = answers[k]
						}
					}
					k++
				}
				rp.ErrorCode = txnOffsetCommitCode(version, rp.ErrorCode)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if len(msg.Entries) == 0 {
		return build(nil, 0)
	}
	if req.Group == "" {
		return build(nil, kerr.InvalidGroupID.Code)
	}
	if code := groupRoute(c, req.Group); code != 0 {
		return build(nil, code)
	}
	verify := c.Env.VerifyTxnGroup
	if verify == nil {
		return build(nil, codeNoTxnCoordinator)
	}
	v := TxnGroup{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
		ProducerEpoch: req.ProducerEpoch, Group: req.Group, Add: c.Version >= 5}
	verify(c, v, func(code int16) kmsg.Response {
		if code != 0 {
			return build(nil, verifiedCode(code))
		}
		msg.Reply = c.Await(func(v any) kmsg.Response {
			r, _ := v.(*offsets.CommitResult)
			if r == nil {
				return build(nil, kerr.UnknownServerError.Code)
			}
			return build(r.Codes, 0)
		})
		askGroups(c, msg)
		return nil
	})
	return nil
}

// verifiedCode is what a TxnOffsetCommit answers for the transaction coordinator's
// refusal. Apache's verification turns the coordinator's own unavailability into
// NOT_ENOUGH_REPLICAS (AddPartitionsToTxnManager), which the group coordinator answers
// as COORDINATOR_NOT_AVAILABLE: NOT_COORDINATOR would send the client looking for
// another group coordinator.
func verifiedCode(code int16) int16 {
	switch code {
	case kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code:
		return kerr.CoordinatorNotAvailable.Code
	}
	return code
}

// txnOffsetCommitCode gives a version the codes it knows: PRODUCER_FENCED is
// INVALID_PRODUCER_EPOCH on this API (AddPartitionsToTxnManager maps it for every
// verification), and TRANSACTION_ABORTABLE, new in v4, is INVALID_TXN_STATE below.
func txnOffsetCommitCode(version int16, code int16) int16 {
	switch {
	case code == kerr.ProducerFenced.Code:
		return kerr.InvalidProducerEpoch.Code
	case code == kerr.TransactionAbortable.Code && version < 4:
		return kerr.InvalidTxnState.Code
	}
	return code
}
