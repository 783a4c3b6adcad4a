package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// Produce (key 0), v3–v13. RecordBatch v2 only (v3+), one batch per partition.
//
//	v3: transactional_id, record batches. v5: log_start_offset in the response.
//	v7: ZStandard. v8: per-record errors and error_message (KIP-467). v9: flexible.
//	v10/v11: KIP-951 leader hints (no leader moves here, so none are sent).
//	v12: KIP-890 part 2 (a transactional batch's partition is added to its transaction
//	implicitly). v13: topics by id (KIP-516).
//
// A transactional batch is appended once the transaction coordinator verified its
// partition (txnproduce.go); without a coordinator (Env.VerifyTxn nil) it is refused
// with INVALID_TXN_STATE.
//
// acks=0 gets no response at all; acks=1 and -1 are answered once the batch is durable
// (log.flush.interval.messages=1, the default) — with one copy of the log on the shared
// volume, "all in-sync replicas" and "the leader" are the same disk.
func init() { register(0, 3, 13, handleProduce) }

func handleProduce(c *Call) {
	req := c.Req.(*kmsg.ProduceRequest)
	code := int16(0)
	switch {
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		code = kerr.InvalidRequiredAcks.Code
	case noTopics(c):
		code = kerr.UnknownTopicOrPartition.Code
	}
	if code != 0 {
		if req.Acks == 0 {
			c.NoResponse()
			return
		}
		c.Respond(produceResponse(req, nil, code))
		return
	}
	producePartitions(c, req)
}

// producePartitions validates each partition's batch and sends it to its partition, in
// request order, from the connection (route.go), with the catalogue's codes for
// partitions it does not name: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION (in a cluster,
// once the topics manager has read the catalogue again: unknownHere),
// NOT_LEADER_OR_FOLLOWER for a partition led elsewhere; REQUEST_TIMED_OUT for a
// partition that does not answer within the request's timeout or stops first.
func producePartitions(c *Call, req *kmsg.ProduceRequest) {
	routes := c.Env.Catalog.Routes()
	if req.Acks == 0 {
		c.NoResponse()
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				if r := routes.Find(t.Topic, t.TopicID, p.Partition); r.PID != nil {
					if batch, _ := r.ValidateBatch(p.Records); batch != nil {
						c.conn.ctx.Send(r.PID, partition.AppendMessage(batch, actor.Promise{}))
					}
				}
			}
		}
		return
	}
	n := 0
	for _, t := range req.Topics {
		n += len(t.Partitions)
	}
	a := c.conn
	var txn *txnProduce // set once a transactional batch is sent (txnproduce.go)
	tp := &txnParts{batches: make([]*partition.Batch, n), topics: make([]string, n), parts: make([]int32, n), pids: make([]*actor.PID, n)}
	g := a.newGather(c, n, func(int) any {
		return &partition.Produced{ErrorCode: kerr.RequestTimedOut.Code, BaseOffset: -1, LogStartOffset: -1}
	}, func(results []any) kmsg.Response {
		if txn == nil {
			return produceResponse(req, results, 0)
		}
		var need []int
		for i, r := range results {
			if p := r.(*partition.Produced); p.NeedsVerify {
				need = append(need, i)
			} else if p.ErrorCode != 0 && tp.batches[i] != nil && tp.batches[i].Transactional() {
				results[i] = &partition.Produced{ErrorCode: produceTxnCode(p.ErrorCode, req.Version), ErrorMessage: p.ErrorMessage,
					BaseOffset: -1, LogStartOffset: -1}
			}
		}
		if len(need) == 0 {
			a.txnReady(txn, nil)
			return produceResponse(req, results, 0)
		}
		a.verifyProduce(c, req, txn, tp, results, need)
		return nil
	})
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			r := routes.Find(t.Topic, t.TopicID, p.Partition)
			switch {
			case r.PID == nil && unknownHere(c, r.Code):
				ref := []partition.PartitionRef{{Topic: t.Topic, ID: t.TopicID, Partition: p.Partition}}
				a.ask(g, i, c.Env.Topics, func(reply actor.Promise) any {
					return partition.ResolveMessage(ref, func(codes []int16) any {
						return &partition.Produced{ErrorCode: codes[0], BaseOffset: -1, LogStartOffset: -1}
					}, reply)
				})
			case r.PID == nil:
				g.results[i] = &partition.Produced{ErrorCode: r.Code, BaseOffset: -1, LogStartOffset: -1}
			default:
				// Validated here, in the connection's turn, so that the partition's
				// turn holds only the append.
				batch, refused := r.ValidateBatch(p.Records)
				if refused != nil {
					g.results[i] = refused
					break
				}
				if batch.Transactional() {
					if c.Env.VerifyTxn == nil || req.TransactionID == nil {
						// No coordinator to verify it with (a cluster, this round).
						g.results[i] = &partition.Produced{ErrorCode: kerr.InvalidTxnState.Code,
							ErrorMessage: "transactions are not supported", BaseOffset: -1, LogStartOffset: -1}
						break
					}
					if txn == nil {
						txn = &txnProduce{}
						a.txnOrder = append(a.txnOrder, txn)
					}
					tp.batches[i], tp.topics[i], tp.parts[i], tp.pids[i] = batch, r.Topic, p.Partition, r.PID
				}
				a.ask(g, i, r.PID, func(reply actor.Promise) any { return partition.AppendMessage(batch, reply) })
			}
			i++
		}
	}
	a.start(g, partition.ProduceTimeout(msDuration(req.TimeoutMillis)))
}

// produceResponse builds the response from one *partition.Produced per partition, in
// request order, or with code for every partition when flat is nil.
func produceResponse(req *kmsg.ProduceRequest, flat []any, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	k := 0
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			rp.ErrorCode = code
			if flat != nil {
				r := flat[k].(*partition.Produced)
				k++
				rp.ErrorCode, rp.BaseOffset, rp.LogStartOffset = r.ErrorCode, r.BaseOffset, r.LogStartOffset
				if r.LogAppendTime > 0 {
					rp.LogAppendTime = r.LogAppendTime // a LogAppendTime topic's stamp
				}
				if r.ErrorMessage != "" && req.Version >= 8 {
					msg := r.ErrorMessage
					rp.ErrorMessage = &msg
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
