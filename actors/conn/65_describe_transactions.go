package conn

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/txn"
)

// DescribeTransactions (key 65), v0 (KIP-664): each named id's state, producer, epoch,
// timeout, start and partitions. "" is INVALID_REQUEST (Apache), an unknown or expired
// id TRANSACTIONAL_ID_NOT_FOUND, no coordinator COORDINATOR_NOT_AVAILABLE.
func init() { register(65, 0, 0, handleDescribeTransactions) }

func handleDescribeTransactions(c *Call) {
	req := c.Req.(*kmsg.DescribeTransactionsRequest)
	ids := make([]string, 0, len(req.TransactionalIDs))
	for _, id := range req.TransactionalIDs {
		if id != "" {
			ids = append(ids, id)
		}
	}
	build := func(got map[string]txn.Description, all int16) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
		for _, id := range req.TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ProducerID, st.ProducerEpoch, st.StartTimestamp = id, -1, -1, -1
			d, ok := got[id]
			switch {
			case id == "":
				st.ErrorCode = kerr.InvalidRequest.Code
			case !ok:
				st.ErrorCode = all
			case d.ErrorCode != 0:
				st.ErrorCode = d.ErrorCode
			default:
				st.State, st.ProducerID, st.ProducerEpoch = d.State.String(), d.ProducerID, d.Epoch
				st.TimeoutMillis, st.StartTimestamp = d.TimeoutMs, d.StartMs
				topics := make([]string, 0, len(d.Partitions))
				for t := range d.Partitions {
					topics = append(topics, t)
				}
				sort.Strings(topics)
				for _, t := range topics {
					tp := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
					tp.Topic, tp.Partitions = t, d.Partitions[t]
					st.Topics = append(st.Topics, tp)
				}
			}
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp
	}
	if c.Env.Txns == nil || len(ids) == 0 {
		c.Respond(build(nil, kerr.CoordinatorNotAvailable.Code))
		return
	}
	reply := c.Await(func(v any) kmsg.Response {
		got := map[string]txn.Description{}
		for _, d := range v.(*txn.Described).Txns {
			got[d.ID] = d
		}
		return build(got, kerr.CoordinatorNotAvailable.Code)
	})
	askTxns(c, &txn.Describe{IDs: ids, Reply: reply})
}
