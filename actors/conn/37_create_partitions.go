package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// CreatePartitions (key 37), v0–v3 (KIP-195).
//
//	v1: same as v0. v2: flexible. v3: same as v2.
func init() { register(37, 0, 3, handleCreatePartitions) }

func handleCreatePartitions(c *Call) {
	req := c.Req.(*kmsg.CreatePartitionsRequest)
	msg := &partition.CreatePartitions{ValidateOnly: req.ValidateOnly}
	for _, t := range req.Topics {
		inc := partition.PartitionsIncrease{Name: t.Topic, Count: t.Count}
		if t.Assignment != nil {
			inc.Assignment = [][]int32{}
			for _, a := range t.Assignment {
				inc.Assignment = append(inc.Assignment, a.Replicas)
			}
		}
		msg.Topics = append(msg.Topics, inc)
	}
	build := func(res *partition.Created) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for i, t := range req.Topics {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic = t.Topic
			if res == nil {
				rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else if r := res.Topics[i]; r.ErrorCode != 0 {
				rt.ErrorCode = r.ErrorCode
				msg := r.ErrorMessage
				rt.ErrorMessage = &msg
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if noTopics(c) || len(msg.Topics) == 0 {
		c.Respond(build(nil))
		return
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return build(v.(*partition.Created)) })
	fwd := *req
	askWriter(c, msg, msg.Reply, &fwd, func(r kmsg.Response) any {
		w := r.(*kmsg.CreatePartitionsResponse)
		res := &partition.Created{Topics: make([]partition.TopicInfo, len(req.Topics))}
		for i, t := range req.Topics {
			ti := partition.TopicInfo{Name: t.Topic, ErrorCode: kerr.UnknownServerError.Code}
			if i < len(w.Topics) {
				ti.ErrorCode = w.Topics[i].ErrorCode
				if m := w.Topics[i].ErrorMessage; m != nil {
					ti.ErrorMessage = *m
				}
			}
			res.Topics[i] = ti
		}
		return res
	})
}
