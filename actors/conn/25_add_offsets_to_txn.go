package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/txn"
)

// AddOffsetsToTxn (key 25), v0–v4: a group's offsets into a producer's transaction
// (Apache adds the group's __consumer_offsets partition; here the group itself, whose
// pending offsets the coordinator ends with the transaction).
//
//	v1: same as v0. v2: PRODUCER_FENCED. v3: flexible. v4: TRANSACTION_ABORTABLE.
func init() { register(25, 0, 4, handleAddOffsetsToTxn) }

func handleAddOffsetsToTxn(c *Call) {
	req := c.Req.(*kmsg.AddOffsetsToTxnRequest)
	if c.Env.Txns == nil {
		resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		c.Respond(resp)
		return
	}
	reply := c.Await(func(v any) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = txnCodeFor(v.(*txn.GroupVerified).ErrorCode, req.Version, 2, 4)
		return resp
	})
	askTxns(c, &txn.AddOffsets{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
		ProducerEpoch: req.ProducerEpoch, Group: req.Group, Reply: reply})
}
