package conn

import (
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// CreateTopics (key 19), v0–v7.
//
//	v1: validate_only, error_message. v2: same. v3: same. v4: policy violations.
//	v5: flexible; partitions, replication factor and configs in the response (KIP-525).
//	v6: quota errors (KIP-599). v7: topic id in the response (KIP-516).
//
// The replication factor (-1 or 1..brokers) is checked and recorded, not used to copy
// data: every broker reads the same partition files on the shared volume.
func init() { register(19, 0, 7, handleCreateTopics) }

func handleCreateTopics(c *Call) {
	req := c.Req.(*kmsg.CreateTopicsRequest)
	// Entries the handler itself rejects keep their code; the rest go to the manager.
	pre := make([]*partition.TopicInfo, len(req.Topics))
	msg := &partition.CreateTopics{ValidateOnly: req.ValidateOnly}
	for i, t := range req.Topics {
		nt, err := newTopic(t)
		if err != nil {
			pre[i] = err
			continue
		}
		msg.Topics = append(msg.Topics, nt)
	}
	build := func(res *partition.Created) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		k := 0
		for i, t := range req.Topics {
			ti := pre[i]
			if ti == nil {
				if res == nil {
					ti = &partition.TopicInfo{Name: t.Topic, ErrorCode: kerr.UnknownServerError.Code}
				} else {
					ti = &res.Topics[k]
					k++
				}
			}
			resp.Topics = append(resp.Topics, createdTopic(c, req.Version, t.Topic, ti))
		}
		return resp
	}
	if noTopics(c) || len(msg.Topics) == 0 {
		c.Respond(build(nil))
		return
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		if w, ok := v.(*kmsg.CreateTopicsResponse); ok {
			return mergeCreated(req, pre, w)
		}
		return build(v.(*partition.Created))
	})
	// The writer gets the topics not answered here, and answers each.
	fwd := *req
	fwd.Topics = nil
	for i, t := range req.Topics {
		if pre[i] == nil {
			fwd.Topics = append(fwd.Topics, t)
		}
	}
	askWriter(c, msg, msg.Reply, &fwd, func(r kmsg.Response) any { return r })
}

// mergeCreated is the answer to a forwarded CreateTopics: the entries answered here,
// the writer's for the rest, in request order.
func mergeCreated(req *kmsg.CreateTopicsRequest, pre []*partition.TopicInfo, w *kmsg.CreateTopicsResponse) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	resp.ThrottleMillis = w.ThrottleMillis
	k := 0
	for i, t := range req.Topics {
		if ti := pre[i]; ti != nil || k >= len(w.Topics) {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, -1, -1
			if ti != nil {
				rt.ErrorCode = ti.ErrorCode
				if ti.ErrorMessage != "" {
					m := ti.ErrorMessage
					rt.ErrorMessage = &m
				}
			} else {
				rt.ErrorCode = kerr.UnknownServerError.Code // the writer left one out
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		resp.Topics = append(resp.Topics, w.Topics[k])
		k++
	}
	return resp
}

// newTopic reads one requested topic; a malformed assignment or a null config value is
// answered here, as Apache's request validation does.
func newTopic(t kmsg.CreateTopicsRequestTopic) (partition.NewTopic, *partition.TopicInfo) {
	nt := partition.NewTopic{Name: t.Topic, Partitions: t.NumPartitions, ReplicationFactor: t.ReplicationFactor}
	if len(t.ReplicaAssignment) > 0 {
		as := append([]kmsg.CreateTopicsRequestTopicReplicaAssignment(nil), t.ReplicaAssignment...)
		sort.Slice(as, func(i, j int) bool { return as[i].Partition < as[j].Partition })
		for i, a := range as {
			if a.Partition != int32(i) {
				return nt, &partition.TopicInfo{Name: t.Topic, ErrorCode: kerr.InvalidReplicaAssignment.Code,
					ErrorMessage: "Partitions should be a consecutive 0-based integer sequence"}
			}
			nt.Assignment = append(nt.Assignment, a.Replicas)
		}
	}
	for _, cfg := range t.Configs {
		if cfg.Value == nil {
			return nt, &partition.TopicInfo{Name: t.Topic, ErrorCode: kerr.InvalidConfig.Code,
				ErrorMessage: fmt.Sprintf("Null value not supported for topic configs: %s", cfg.Name)}
		}
		if nt.Configs == nil {
			nt.Configs = map[string]string{}
		}
		nt.Configs[cfg.Name] = *cfg.Value
	}
	return nt, nil
}

func createdTopic(c *Call, version int16, name string, ti *partition.TopicInfo) kmsg.CreateTopicsResponseTopic {
	rt := kmsg.NewCreateTopicsResponseTopic()
	rt.Topic = name
	rt.ErrorCode = ti.ErrorCode
	if ti.ErrorMessage != "" {
		msg := ti.ErrorMessage
		rt.ErrorMessage = &msg
	}
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	if ti.ErrorCode != 0 {
		return rt
	}
	rt.TopicID = ti.ID
	rt.NumPartitions, rt.ReplicationFactor = int32(len(ti.Partitions)), ti.ReplicationFactor
	if version >= 5 {
		for _, e := range partition.TopicConfigs(c.Env.Config, brokerConfigsOf(c), c.Env.NodeID, ti.Configs) {
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			rc.Name = e.Name
			v := e.Value
			rc.Value = &v
			rc.Source = int8(e.Source)
			rt.Configs = append(rt.Configs, rc)
		}
	}
	return rt
}
