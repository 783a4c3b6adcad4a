package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// DeleteTopics (key 20), v0–v6.
//
//	v1: throttle. v4: flexible. v5: error_message. v6: topics by name or by id (KIP-516).
//
// Deleting a topic also drops every group's committed offsets for it, as Apache does
// (GroupCoordinator.onPartitionsDeleted): the topics manager tells the groups side.
func init() { register(20, 0, 6, handleDeleteTopics) }

func handleDeleteTopics(c *Call) {
	req := c.Req.(*kmsg.DeleteTopicsRequest)
	type entry struct {
		name  *string
		id    [16]byte
		code  int16 // set when answered here
		byID  bool
		index int // into the manager's result
	}
	var entries []entry
	msg := &partition.DeleteTopics{}
	if req.Version < 6 {
		for _, n := range req.TopicNames {
			n := n
			entries = append(entries, entry{name: &n})
		}
	} else {
		for _, t := range req.Topics {
			e := entry{name: t.Topic, id: t.TopicID}
			switch {
			case t.Topic != nil && t.TopicID != [16]byte{}:
				e.code = kerr.InvalidRequest.Code // Apache: name and id both set
			case t.Topic == nil && t.TopicID == [16]byte{}:
				e.code = kerr.InvalidRequest.Code
			case t.Topic == nil:
				e.byID = true
			}
			entries = append(entries, e)
		}
	}
	for i := range entries {
		e := &entries[i]
		if e.code != 0 || e.byID {
			continue
		}
		e.index = len(msg.Names)
		msg.Names = append(msg.Names, *e.name)
	}
	for i := range entries {
		e := &entries[i]
		if e.code != 0 || !e.byID {
			continue
		}
		e.index = len(msg.Names) + len(msg.IDs)
		msg.IDs = append(msg.IDs, e.id)
	}
	build := func(res *partition.Deleted) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		for _, e := range entries {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.TopicID, rt.ErrorCode = e.name, e.id, e.code
			if e.code == 0 {
				if res == nil {
					rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else {
					r := res.Topics[e.index]
					rt.ErrorCode, rt.TopicID = r.ErrorCode, r.ID
					if r.Name != "" {
						name := r.Name
						rt.Topic = &name
					}
					if r.ErrorMessage != "" && req.Version >= 5 {
						msg := r.ErrorMessage
						rt.ErrorMessage = &msg
					}
				}
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if noTopics(c) || len(msg.Names)+len(msg.IDs) == 0 {
		c.Respond(build(nil))
		return
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return build(v.(*partition.Deleted)) })
	// Forwarded as v6 (topics by name or id, whichever version the client spoke), in
	// the manager's order: the names, then the ids.
	fwd := kmsg.NewPtrDeleteTopicsRequest()
	fwd.TimeoutMillis = req.TimeoutMillis
	for _, n := range msg.Names {
		n := n
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = &n
		fwd.Topics = append(fwd.Topics, t)
		fwd.TopicNames = append(fwd.TopicNames, n)
	}
	for _, id := range msg.IDs {
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.TopicID = id
		fwd.Topics = append(fwd.Topics, t)
	}
	askWriter(c, msg, msg.Reply, fwd, func(r kmsg.Response) any {
		w := r.(*kmsg.DeleteTopicsResponse)
		res := &partition.Deleted{Topics: make([]partition.TopicInfo, len(fwd.Topics))}
		for i := range fwd.Topics {
			ti := partition.TopicInfo{ErrorCode: kerr.UnknownServerError.Code}
			if i < len(w.Topics) {
				wt := w.Topics[i]
				ti = partition.TopicInfo{ID: wt.TopicID, ErrorCode: wt.ErrorCode}
				if wt.Topic != nil {
					ti.Name = *wt.Topic
				}
				if wt.ErrorMessage != nil {
					ti.ErrorMessage = *wt.ErrorMessage
				}
			}
			res.Topics[i] = ti
		}
		return res
	})
}
