package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
)

// ListOffsets (key 2), v1–v10.
//
//	v1: one offset per partition, by timestamp (-1 latest, -2 earliest). v2: isolation.
//	v4: current_leader_epoch, leader_epoch in the response (KIP-320). v6: flexible.
//	v7: -3 max timestamp (KIP-734). v8: -4 earliest local (KIP-405).
//	v9: -5 latest tiered (KIP-1005; nothing is tiered, so -1). v10: timeout_ms (KIP-1075).
func init() { register(2, 1, 10, handleListOffsets) }

func handleListOffsets(c *Call) {
	req := c.Req.(*kmsg.ListOffsetsRequest)
	msg := &partition.ListOffsets{Topics: offsetTopics(req)}
	if noTopics(c) {
		c.Respond(listOffsetsResponse(req, nil))
		return
	}
	if c.Env.Catalog != nil && c.Env.Catalog.IsLoaded() {
		listOffsetsDirect(c, req, msg.Topics)
		return
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return listOffsetsResponse(req, v.(*partition.ListOffsetsResult)) })
	askTopics(c, msg)
}

// listOffsetsDirect asks each partition from the connection (route.go), with the topics
// manager's codes: UNKNOWN_TOPIC_OR_PARTITION for what the catalogue does not name (in
// a cluster, once the manager has read the catalogue again: unknownHere),
// REQUEST_TIMED_OUT for a partition that does not answer or stops first.
func listOffsetsDirect(c *Call, req *kmsg.ListOffsetsRequest, topics []partition.OffsetTopic) {
	routes := c.Env.Catalog.Routes()
	none := func(code int16) *partition.Listed {
		return &partition.Listed{ErrorCode: code, Timestamp: -1, Offset: -1, LeaderEpoch: -1}
	}
	n := 0
	for _, t := range topics {
		n += len(t.Partitions)
	}
	a := c.conn
	g := a.newGather(c, n, func(int) any { return none(kerr.RequestTimedOut.Code) }, func(flat []any) kmsg.Response {
		res := &partition.ListOffsetsResult{Topics: make([][]*partition.Listed, len(topics))}
		k := 0
		for i, t := range topics {
			res.Topics[i] = make([]*partition.Listed, len(t.Partitions))
			for j := range t.Partitions {
				res.Topics[i][j] = flat[k].(*partition.Listed)
				k++
			}
		}
		return listOffsetsResponse(req, res)
	})
	i := 0
	for _, t := range topics {
		for _, q := range t.Partitions {
			r := routes.Find(t.Name, partition.TopicID{}, q.Partition)
			switch {
			case r.PID == nil && unknownHere(c, r.Code):
				ref := []partition.PartitionRef{{Topic: t.Name, Partition: q.Partition}}
				a.ask(g, i, c.Env.Topics, func(reply actor.Promise) any {
					return partition.ResolveMessage(ref, func(codes []int16) any { return none(codes[0]) }, reply)
				})
			case r.PID == nil:
				g.results[i] = none(r.Code)
			default:
				q := q
				a.ask(g, i, r.PID, func(reply actor.Promise) any { return partition.ListOffsetMessage(q, reply) })
			}
			i++
		}
	}
	a.start(g, partition.DefaultRequestTimeout)
}

func offsetTopics(req *kmsg.ListOffsetsRequest) []partition.OffsetTopic {
	var out []partition.OffsetTopic
	for _, t := range req.Topics {
		ot := partition.OffsetTopic{Name: t.Topic}
		for _, p := range t.Partitions {
			ot.Partitions = append(ot.Partitions, partition.OffsetQuery{Partition: p.Partition, CurrentLeaderEpoch: p.CurrentLeaderEpoch, Timestamp: p.Timestamp})
		}
		out = append(out, ot)
	}
	return out
}

func listOffsetsResponse(req *kmsg.ListOffsetsRequest, res *partition.ListOffsetsResult) *kmsg.ListOffsetsResponse {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for i, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			if res == nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				r := res.Topics[i][j]
				rp.ErrorCode, rp.Timestamp, rp.Offset, rp.LeaderEpoch = r.ErrorCode, r.Timestamp, r.Offset, r.LeaderEpoch
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
