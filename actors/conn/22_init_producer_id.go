package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
	"kaas/actors/txn"
)

// InitProducerID (key 22), v0–v5, for idempotent (non-transactional) producers.
//
//	v1: same as v0. v2: flexible. v3: producer_id and epoch in the request (KIP-360:
//	an idempotent producer may bump its epoch itself). v4: PRODUCER_FENCED.
//	v5: KIP-890 (transactions only).
//
// Without a transactional id, each call hands out a fresh id at epoch 0. With one, the
// transaction coordinator (Env.Txns, actors/txn) answers: an epoch bump, the producer id
// rotated when the epoch is exhausted, the KIP-360 checks, and an Ongoing transaction
// fenced (aborted at a bumped epoch; the caller gets CONCURRENT_TRANSACTIONS and
// retries). Without a coordinator (a test's broker that starts none) a transactional id gets
// UNSUPPORTED_VERSION, a fatal error, rather than a retriable one a client would loop on
// (librdkafka still retries it until its own timeout), and the first such request on a
// connection is logged with the client and transactional ids.
func init() { register(22, 0, 5, handleInitProducerID) }

func handleInitProducerID(c *Call) {
	req := c.Req.(*kmsg.InitProducerIDRequest)
	fail := func(code int16) {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
		c.Respond(resp)
	}
	switch {
	case req.TransactionalID != nil && c.Env.Txns != nil:
		initTransactional(c, req)
		return
	case req.TransactionalID != nil:
		if !c.conn.txnWarned {
			c.conn.txnWarned = true
			id := *req.TransactionalID
			if len(id) > 256 {
				id = id[:256]
			}
			c.Log().Warn().Str("transactional_id", id).Int16("error_code", kerr.UnsupportedVersion.Code).
				Msg("transactions_not_supported_yet_transactional_producer_refused")
		}
		fail(kerr.UnsupportedVersion.Code)
		return
	case noTopics(c):
		fail(kerr.CoordinatorNotAvailable.Code)
		return
	}
	reply := c.Await(func(v any) kmsg.Response {
		r := v.(*partition.ProducerID)
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = r.ErrorCode, r.ID, r.Epoch
		return resp
	})
	askTopics(c, &partition.InitProducerID{Reply: reply})
}

// initTransactional is InitProducerId with a transactional id (§1.3): "" is
// INVALID_REQUEST, a timeout out of (0, transaction.max.timeout.ms] is
// INVALID_TRANSACTION_TIMEOUT, the rest is the coordinator's.
func initTransactional(c *Call, req *kmsg.InitProducerIDRequest) {
	fail := func(code int16) {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = txnCodeFor(code, req.Version, 4, 5), -1, -1
		c.Respond(resp)
	}
	switch {
	case *req.TransactionalID == "":
		fail(kerr.InvalidRequest.Code)
		return
	case req.TransactionTimeoutMillis <= 0 || int64(req.TransactionTimeoutMillis) > c.Env.Config.TransactionMaxTimeout.Milliseconds():
		fail(kerr.InvalidTransactionTimeout.Code)
		return
	}
	pid, epoch := int64(-1), int16(-1)
	if req.Version >= 3 {
		pid, epoch = req.ProducerID, req.ProducerEpoch
	}
	reply := c.Await(func(v any) kmsg.Response {
		r := v.(*txn.ProducerIDInitialized)
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = txnCodeFor(r.ErrorCode, req.Version, 4, 5), r.ProducerID, r.ProducerEpoch
		return resp
	})
	askTxns(c, &txn.InitProducerID{TransactionalID: *req.TransactionalID, TimeoutMs: req.TransactionTimeoutMillis,
		ProducerID: pid, ProducerEpoch: epoch, Reply: reply})
}
