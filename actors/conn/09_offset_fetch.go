package conn

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
	"kaas/actors/offsets"
)

// OffsetFetch (key 9), v1–v9 (v0 read ZooKeeper and was removed in Apache 4.0).
//
//	v2: null topics means every committed partition; top-level error_code.
//	v3: throttle. v4: same shape. v5: committed_leader_epoch. v6: flexible.
//	v7: require_stable: a partition with a pending transactional offset (KIP-447) is
//	    answered UNSTABLE_OFFSET_COMMIT with offset -1, each such partition on its own
//	    (Apache OffsetMetadataManager.fetchOffsets); the client retries it.
//	v8: batched groups, each with its own error and topics (KIP-709).
//	v9: member_id / member_epoch, checked for consumer-protocol groups (KIP-848): no
//	    member id with a negative epoch is an admin fetch; otherwise UNKNOWN_MEMBER_ID or
//	    STALE_MEMBER_EPOCH as the group's error. Classic groups ignore them (Apache).
//	v10: topic ids instead of names (Apache 4.1): an asked id the catalogue does not have
//	    is answered -1 with UNKNOWN_TOPIC_ID in each partition; every committed partition
//	    (null topics) is answered for the topics that still exist, by id.
//
// An unknown group has every asked partition at -1 with no error; a group-level error
// goes into every partition at v1, into error_code at v2-7 and into the group at v8+.
func init() { register(9, 1, 10, handleOffsetFetch) }

func handleOffsetFetch(c *Call) {
	req := c.Req.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if c.Version >= 8 {
		fetchGroups(c, req, resp)
		return
	}
	var asked []kmsg.OffsetFetchRequestGroupTopic
	all := req.Topics == nil && c.Version >= 2
	for _, t := range req.Topics {
		asked = append(asked, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
	}
	version := c.Version
	answer := func(r *offsets.FetchResult) kmsg.Response {
		topics := fetchedTopics(asked, all, r)
		if version >= 2 {
			resp.ErrorCode = r.ErrorCode
		}
		for _, t := range topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode =
					p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				if version >= 2 && rp.ErrorCode != kerr.UnstableOffsetCommit.Code {
					rp.ErrorCode = 0 // the group's error is top-level
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if code := groupRoute(c, req.Group); code != 0 {
		c.Respond(answer(&offsets.FetchResult{ErrorCode: code}))
		return
	}
	msg := &group.FetchOffsets{Group: req.Group, RequireStable: req.RequireStable}
	if !all {
		msg.Partitions = askedPartitions(asked)
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return answer(v.(*offsets.FetchResult)) })
	askGroups(c, msg)
}

// fetchGroups is OffsetFetch v8+: one FetchOffsets per group, answered together.
func fetchGroups(c *Call, req *kmsg.OffsetFetchRequest, resp *kmsg.OffsetFetchResponse) {
	resp.Groups = make([]kmsg.OffsetFetchResponseGroup, len(req.Groups))
	if c.Version < 10 {
		fetchNamed(c, req, resp)
		return
	}
	var ids [][16]byte
	for _, g := range req.Groups {
		for _, t := range g.Topics {
			ids = append(ids, t.TopicID)
		}
	}
	r := namesOfIDs(c, ids, func(names map[[16]byte]string) kmsg.Response {
		// Authorization reads the answer's names (a DESCRIBE per topic, checkOffsetFetch).
		for _, g := range req.Groups {
			for i := range g.Topics {
				g.Topics[i].Topic = names[g.Topics[i].TopicID] // "": unknown
			}
		}
		fetchNamed(c, req, resp)
		return nil
	})
	if r != nil {
		c.Respond(r)
	}
}

// fetchNamed is OffsetFetch v8+ once every topic has its name ("" in v10: an unknown id).
func fetchNamed(c *Call, req *kmsg.OffsetFetchRequest, resp *kmsg.OffsetFetchResponse) {
	var batch group.Batch
	var at []int
	for i, g := range req.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = g.Group
		if code := groupRoute(c, g.Group); code != 0 {
			rg.ErrorCode = code
		} else {
			msg := &group.FetchOffsets{Group: g.Group, RequireStable: req.RequireStable}
			if c.Version >= 9 {
				msg.MemberChecked, msg.MemberID, msg.MemberEpoch = true, g.MemberID, g.MemberEpoch
			}
			if g.Topics != nil {
				msg.Partitions = askedPartitions(g.Topics)
			}
			batch.Requests = append(batch.Requests, msg)
			at = append(at, i)
		}
		resp.Groups[i] = rg
	}
	if len(batch.Requests) == 0 {
		c.Respond(resp)
		return
	}
	batch.Reply = c.Await(func(v any) kmsg.Response {
		for j, x := range v.(*group.BatchResult).Values {
			i := at[j]
			r := x.(*offsets.FetchResult)
			rg := &resp.Groups[i]
			rg.ErrorCode = r.ErrorCode
			if r.ErrorCode != 0 {
				continue
			}
			rg.Topics = fetchedTopics(req.Groups[i].Topics, req.Groups[i].Topics == nil, r)
			if c.Version >= 10 {
				rg.Topics = topicsByID(c, req.Groups[i].Topics, rg.Topics)
			}
		}
		return resp
	})
	askGroups(c, &batch)
}

func askedPartitions(topics []kmsg.OffsetFetchRequestGroupTopic) []offsets.TopicPartition {
	out := []offsets.TopicPartition{}
	for _, t := range topics {
		for _, p := range t.Partitions {
			out = append(out, offsets.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	return out
}

// fetchedTopics lays a FetchResult out as the response's topics: the asked partitions in
// request order (absent ones -1, "" metadata), or every committed partition sorted. A
// group-level error is copied into each asked partition (what v1 shows).
func fetchedTopics(asked []kmsg.OffsetFetchRequestGroupTopic, all bool, r *offsets.FetchResult) []kmsg.OffsetFetchResponseGroupTopic {
	var out []kmsg.OffsetFetchResponseGroupTopic
	part := func(tp offsets.TopicPartition) kmsg.OffsetFetchResponseGroupTopicPartition {
		p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		p.Partition = tp.Partition
		p.Offset, p.LeaderEpoch, p.Metadata = -1, -1, strPtr("")
		p.ErrorCode = r.ErrorCode
		if r.Unstable[tp] {
			p.ErrorCode = kerr.UnstableOffsetCommit.Code
			return p
		}
		if cm, ok := r.Offsets[tp]; ok && r.ErrorCode == 0 {
			p.Offset, p.LeaderEpoch, p.Metadata = cm.Offset, cm.LeaderEpoch, strPtr(cm.Metadata)
		}
		return p
	}
	if !all {
		for _, t := range asked {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, part(offsets.TopicPartition{Topic: t.Topic, Partition: p}))
			}
			out = append(out, rt)
		}
		return out
	}
	tps := make([]offsets.TopicPartition, 0, len(r.Offsets))
	for tp := range r.Offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	for _, tp := range tps {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = tp.Topic
			out = append(out, rt)
		}
		out[len(out)-1].Partitions = append(out[len(out)-1].Partitions, part(tp))
	}
	return out
}

// topicsByID names an OffsetFetch v10 group's answered topics by id: an asked topic
// keeps the id it was asked by (UNKNOWN_TOPIC_ID in each partition when the catalogue
// has no such id); of every committed partition, a topic no longer in the catalogue is
// left out, as Apache leaves out a topic without an id.
func topicsByID(c *Call, asked []kmsg.OffsetFetchRequestGroupTopic, topics []kmsg.OffsetFetchResponseGroupTopic) []kmsg.OffsetFetchResponseGroupTopic {
	if asked != nil {
		for i := range topics {
			t := &topics[i]
			t.TopicID = asked[i].TopicID
			if t.Topic != "" {
				continue
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode = -1, -1, strPtr(""), kerr.UnknownTopicID.Code
			}
		}
		return topics
	}
	if c.Env.Catalog == nil {
		return topics
	}
	out := topics[:0]
	for _, t := range topics {
		id, _, ok := c.Env.Catalog.Topic(t.Topic)
		if !ok {
			continue
		}
		t.TopicID = id
		out = append(out, t)
	}
	return out
}
