package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
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
