package conn

import (
	"regexp"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/txn"
	"kaas/auth"
)

// ListTransactions (key 66), v0–v2 (KIP-664): the coordinator's transactions, filtered
// by state names and producer ids; unknown state names come back in
// UnknownStateFilters. v1: DurationFilterMillis (KIP-994: running at least that long).
// v2: TransactionalIDPattern (KIP-1152, a regular expression; an invalid one is
// INVALID_REGULAR_EXPRESSION). Ids the principal may not Describe are left out.
func init() { register(66, 0, 2, handleListTransactions) }

func handleListTransactions(c *Call) {
	req := c.Req.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	var pattern *regexp.Regexp
	if req.Version >= 2 && req.TransactionalIDPattern != nil && *req.TransactionalIDPattern != "" {
		re, err := regexp.Compile(*req.TransactionalIDPattern)
		if err != nil {
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			c.Respond(resp)
			return
		}
		pattern = re
	}
	if c.Env.Txns == nil {
		c.Respond(resp)
		return
	}
	minDuration := int64(-1)
	if req.Version >= 1 {
		minDuration = req.DurationFilterMillis
	}
	reply := c.Await(func(v any) kmsg.Response {
		l := v.(*txn.Listed)
		resp.UnknownStateFilters = l.UnknownStates
		for _, t := range l.Txns {
			if pattern != nil && !pattern.MatchString(t.ID) {
				continue
			}
			if c.Env.Authorizer != nil && !c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.TransactionalID, t.ID) {
				continue
			}
			st := kmsg.NewListTransactionsResponseTransactionState()
			st.TransactionalID, st.ProducerID, st.TransactionState = t.ID, t.ProducerID, t.State.String()
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp
	})
	askTxns(c, &txn.List{States: req.StateFilters, ProducerIDs: req.ProducerIDFilters, MinDurationMs: minDuration, Reply: reply})
}
