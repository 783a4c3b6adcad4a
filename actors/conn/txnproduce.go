package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// A transactional batch (KIP-98) is appended only inside a transaction its coordinator
// knows of. The partition answers the first batch of a producer's transaction on it
// with NeedsVerify and a token (the count of the producer's markers it took); the
// Produce handler then asks the coordinator, once per producer and request, whether the
// partitions are in the producer's ongoing transaction (KIP-890 part 1) or, from Produce
// v12, to add them (part 2), and sends the verified batches again with their token. A
// marker written in between changes the token, and the partition refuses the batch
// (KAFKA-14884). Verified batches are sent again in request order across the
// connection's Produces, so a pipelining producer's sequence holds on every partition.

// TxnVerify is what the Produce handler asks the transaction coordinator (the
// coordinator's VerifyPartitions, without its reply).
type TxnVerify struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partitions      map[string][]int32 // topic → partitions
	Add             bool               // Produce v12+: add them; else verify only
}

// TxnVerified answers TxnVerify: a code per partition, 0 = may append.
type TxnVerified struct{ Codes map[string]map[int32]int16 }

// TxnVerifier sends v to the transaction coordinator; reply gets *TxnVerified.
type TxnVerifier func(c *Call, v *TxnVerify, reply actor.Promise)

// txnProduce is a Produce holding transactional batches, in the connection's order:
// ready once it knows what it sends again (send; nil: nothing).
type txnProduce struct {
	ready bool
	send  func()
}

// txnReady marks t ready and sends, in request order, what the Produces at the head of
// the order send again.
func (a *connActor) txnReady(t *txnProduce, send func()) {
	t.ready, t.send = true, send
	for len(a.txnOrder) > 0 && a.txnOrder[0].ready {
		head := a.txnOrder[0]
		a.txnOrder[0] = nil
		a.txnOrder = a.txnOrder[1:]
		if head.send != nil {
			head.send()
		}
	}
}

// produceTxnCode is the code a Produce of version v answers for a transactional
// batch the coordinator or the partition refused: TRANSACTION_ABORTABLE only to v11+
// (INVALID_TXN_STATE before), INVALID_PRODUCER_EPOCH for PRODUCER_FENCED, which Produce
// does not know, and NOT_ENOUGH_REPLICAS, retriable for every version, for a
// coordinator that is busy or elsewhere.
func produceTxnCode(code, v int16) int16 {
	switch code {
	case kerr.InvalidTxnState.Code, kerr.TransactionAbortable.Code:
		if v >= 11 {
			return kerr.TransactionAbortable.Code
		}
		return kerr.InvalidTxnState.Code
	case kerr.ProducerFenced.Code:
		return kerr.InvalidProducerEpoch.Code
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code,
		kerr.ConcurrentTransactions.Code:
		return kerr.NotEnoughReplicas.Code
	}
	return code
}

// txnParts is what a Produce's verification needs of its partitions: the batch and
// route of each, by request index.
type txnParts struct {
	batches []*partition.Batch
	topics  []string
	parts   []int32
	pids    []*actor.PID
}

// verifyProduce asks the coordinator about the partitions of c that answered
// NeedsVerify (need: their indexes), sends the verified ones again, in the
// connection's order, and completes c.
func (a *connActor) verifyProduce(c *Call, req *kmsg.ProduceRequest, t *txnProduce, tp *txnParts, results []any, need []int) {
	type key struct {
		id    int64
		epoch int16
	}
	group := map[key]int{}
	asks := []*TxnVerify{}
	groupOf := make([]int, len(results))
	for _, i := range need {
		id, epoch := tp.batches[i].Producer()
		k := key{id, epoch}
		g, ok := group[k]
		if !ok {
			g = len(asks)
			group[k] = g
			asks = append(asks, &TxnVerify{TransactionalID: *req.TransactionID, ProducerID: id, ProducerEpoch: epoch,
				Partitions: map[string][]int32{}, Add: req.Version >= 12})
		}
		groupOf[i] = g
		asks[g].Partitions[tp.topics[i]] = append(asks[g].Partitions[tp.topics[i]], tp.parts[i])
	}
	timeout := partition.ProduceTimeout(msDuration(req.TimeoutMillis))
	vg := a.newGather(c, len(asks), func(int) any { return &TxnVerified{} }, func(verified []any) kmsg.Response {
		type resend struct {
			i     int
			token uint32
		}
		var again []resend
		for _, i := range need {
			r := results[i].(*partition.Produced)
			codes := txnVerifiedCodes(verified[groupOf[i]])
			code, ok := codes[tp.topics[i]][tp.parts[i]]
			switch {
			case codes == nil:
				code = kerr.RequestTimedOut.Code // the coordinator did not answer in time
			case !ok:
				code = kerr.InvalidTxnState.Code
			}
			if code == 0 {
				again = append(again, resend{i, r.VerifyToken})
				continue
			}
			results[i] = &partition.Produced{ErrorCode: produceTxnCode(code, req.Version), BaseOffset: -1, LogStartOffset: -1}
		}
		if len(again) == 0 {
			a.txnReady(t, nil)
			return produceResponse(req, results, 0)
		}
		a.txnReady(t, func() {
			rg := a.newGather(c, len(again), func(int) any {
				return &partition.Produced{ErrorCode: kerr.RequestTimedOut.Code, BaseOffset: -1, LogStartOffset: -1}
			}, func(sent []any) kmsg.Response {
				for j, s := range again {
					r := sent[j].(*partition.Produced)
					if r.ErrorCode != 0 {
						r = &partition.Produced{ErrorCode: produceTxnCode(r.ErrorCode, req.Version), ErrorMessage: r.ErrorMessage,
							BaseOffset: -1, LogStartOffset: -1}
					}
					results[s.i] = r
				}
				return produceResponse(req, results, 0)
			})
			for j, s := range again {
				b, tok := tp.batches[s.i], s.token
				a.ask(rg, j, tp.pids[s.i], func(reply actor.Promise) any {
					return partition.VerifiedAppendMessage(b, tok, req.Version >= 12, reply)
				})
			}
			a.start(rg, timeout)
		})
		return nil
	})
	for g, v := range asks {
		pr := a.awaiting.Await(a.ctx, pending{g: vg, i: g})
		vg.to[g], vg.ids[g] = a.ctx.Self(), pr.ID()
		vg.left++
		a.env.VerifyTxn(c, v, pr)
	}
	a.start(vg, timeout)
}
