package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// Fetch (key 1), v4–v18.
//
//	v4: isolation_level, last_stable_offset, aborted transactions. v5: log_start_offset.
//	v7: fetch sessions (KIP-227). v9: current_leader_epoch (KIP-320). v11: rack,
//	preferred read replica (KIP-392). v12: flexible, last_fetched_epoch.
//	v13: topic ids instead of names (KIP-516). v15: replica_state. v16: node endpoints.
//	v17: replica directory id (KIP-853). v18: high watermark tag (KIP-1166); both are
//	for follower brokers and ignored here.
//
// Fetch sessions are not kept: every response carries session id 0, which tells the
// client to send full fetches (KIP-227 allows a broker to decline sessions). An
// incremental fetch (epoch > 0) therefore gets FETCH_SESSION_ID_NOT_FOUND and the client
// starts over with a full one. read_committed (isolation_level 1) reads each partition
// up to its last stable offset and returns the aborted transactions of the range, sorted
// by first offset; every answer carries the last stable offset.
func init() { register(1, 4, 18, handleFetch) }

func handleFetch(c *Call) {
	req := c.Req.(*kmsg.FetchRequest)
	if req.SessionEpoch > 0 || req.SessionID != 0 && req.SessionEpoch != -1 && req.SessionEpoch != 0 {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		c.Respond(resp)
		return
	}
	if noTopics(c) {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		c.Respond(resp)
		return
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 1
	}
	// A connection that is not reading its responses, or a broker holding many unwritten
	// ones, gets smaller answers; the first batch still comes whole.
	maxBytes = c.ResponseBudget(maxBytes)
	msg := &partition.Fetch{MaxWait: msDuration(req.MaxWaitMillis), MinBytes: req.MinBytes, MaxBytes: maxBytes,
		ReadCommitted: req.IsolationLevel == 1}
	for _, t := range req.Topics {
		ft := partition.FetchTopic{Name: t.Topic, ID: t.TopicID}
		if req.Version >= 13 {
			ft.Name = ""
		}
		for _, p := range t.Partitions {
			ft.Partitions = append(ft.Partitions, partition.FetchPartition{
				Partition: p.Partition, Offset: p.FetchOffset, MaxBytes: p.PartitionMaxBytes, CurrentLeaderEpoch: p.CurrentLeaderEpoch,
			})
		}
		msg.Topics = append(msg.Topics, ft)
	}
	version := req.Version
	convert := func(v any) kmsg.Response {
		res := v.(*partition.FetchResult)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		// The records' pooled buffers go back once the response is encoded (complete
		// copies them into its frame); not when an interceptor (tests) may keep the
		// response.
		recycle := c.slot != nil && intercept.Load() == nil
		for i, t := range res.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Name, t.ID
			if version >= 13 {
				rt.TopicID = req.Topics[i].TopicID
			}
			for j, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = req.Topics[i].Partitions[j].Partition
				rp.ErrorCode = p.ErrorCode
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.HighWatermark, p.LastStableOffset, p.LogStartOffset
				if p.HighWatermark < 0 {
					rp.LastStableOffset = -1
				}
				for _, a := range p.Aborted {
					at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
					rp.AbortedTransactions = append(rp.AbortedTransactions, at)
				}
				rp.PreferredReadReplica = -1
				rp.RecordBatches = p.Records
				if recycle && p.Buffer != nil {
					c.slot.bufs = append(c.slot.bufs, p.Buffer)
				}
				if rp.RecordBatches == nil {
					// Apache always answers MemoryRecords.EMPTY (size 0), never null (-1):
					// librdkafka rejects -1 ("invalid MessageSetSize -1") and drops the
					// rest of the response.
					rp.RecordBatches = []byte{}
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	// Served in the connection actor itself, from the published catalogue: no topics
	// manager hop and no actor spawned per fetch (route.go).
	a := c.conn
	msg.Reply = actor.PromiseFunc(func(v any) { a.convertAndComplete(c, convert, v) })
	if unknown := unknownFetched(c, msg); len(unknown) > 0 {
		// Started once the manager has read the catalogue again, by the catalogue it
		// publishes then (a fetch, unlike a produce, has no order to keep).
		askTopics(c, partition.ResolveMessage(unknown, func([]int16) any { return nil },
			c.Await(func(any) kmsg.Response { a.startFetch(msg); return nil })))
		return
	}
	a.startFetch(msg)
}

// unknownFetched are the partitions of f that the published catalogue does not name and
// that may exist all the same (unknownHere).
func unknownFetched(c *Call, f *partition.Fetch) []partition.PartitionRef {
	var out []partition.PartitionRef
	routes := c.Env.Catalog.Routes()
	for _, t := range f.Topics {
		for _, p := range t.Partitions {
			if r := routes.Find(t.Name, t.ID, p.Partition); r.PID == nil && unknownHere(c, r.Code) {
				out = append(out, partition.PartitionRef{Topic: t.Name, ID: t.ID, Partition: p.Partition})
			}
		}
	}
	return out
}
