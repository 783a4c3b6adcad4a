package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/txn"
)

// EndTxn (key 26), v0–v5: commit or abort a producer's transaction. Answered once the
// PrepareCommit / PrepareAbort is durable (the commit point); the markers follow.
//
//	v1: same as v0. v2: PRODUCER_FENCED. v3: flexible. v4: TRANSACTION_ABORTABLE.
//	v5: KIP-890 part 2 (TV2): every transaction bumps the epoch, the answer carries the
//	producer's next id and epoch, an empty abort is legal, a retry is told by the
//	previous epoch (the table of §1.3).
func init() { register(26, 0, 5, handleEndTxn) }

func handleEndTxn(c *Call) {
	req := c.Req.(*kmsg.EndTxnRequest)
	fail := func(code int16) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
		return resp
	}
	if c.Env.Txns == nil {
		c.Respond(fail(kerr.CoordinatorNotAvailable.Code))
		return
	}
	reply := c.Await(func(v any) kmsg.Response {
		r := v.(*txn.TxnEnded)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = txnCodeFor(r.ErrorCode, req.Version, 2, 4)
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch
		return resp
	})
	askTxns(c, &txn.EndTxn{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
		ProducerEpoch: req.ProducerEpoch, Commit: req.Commit, TV2: req.Version >= 5, Reply: reply})
}
