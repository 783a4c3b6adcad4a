package conn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
	"kaas/actors/offsets"
	"kaas/auth"
)

// OffsetCommit (key 8), v2–v9 (v0-1 were removed in Apache 4.0, KIP-896).
//
//	v2: retention_time_ms (-1: the broker's retention), until v4.
//	v3: throttle. v4: same shape. v5: retention_time_ms removed.
//	v6: committed_leader_epoch. v7: group_instance_id (KIP-345). v8: flexible.
//	v9: an unknown group with a generation is GROUP_ID_NOT_FOUND, not ILLEGAL_GENERATION;
//	    generation_id_or_member_epoch carries a consumer-protocol member's epoch (KIP-848:
//	    STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID; KIP-1251's older epochs for partitions the
//	    member still holds). A consumer-protocol member committing below v9 gets
//	    UNSUPPORTED_VERSION.
//	v10: topic ids instead of names (Apache 4.1): an id the catalogue does not have is
//	    UNKNOWN_TOPIC_ID for each of its partitions; the answer names topics by id.
//
// Partitions missing from the topic catalogue get UNKNOWN_TOPIC_OR_PARTITION first (as
// KafkaApis does); the group validates generation, member and instance for the rest
// (§4.7); its offsets actor answers only after the write holding the commit is on disk.
func init() { register(8, 2, 10, handleOffsetCommit) }

func handleOffsetCommit(c *Call) {
	req := c.Req.(*kmsg.OffsetCommitRequest)
	if c.Version < 10 {
		commitNamed(c, req, nil)
		return
	}
	ids := make([][16]byte, len(req.Topics))
	for i, t := range req.Topics {
		ids[i] = t.TopicID
	}
	resp := namesOfIDs(c, ids, func(names map[[16]byte]string) kmsg.Response {
		// A topic the catalogue named only now was let through authorization by id:
		// its READ is checked here.
		denied := make([]bool, len(req.Topics))
		for i := range req.Topics {
			t := &req.Topics[i]
			t.Topic = names[t.TopicID] // "": unknown
			if t.Topic != "" && c.Env.Authorizer != nil && c.topicName("", t.TopicID) == "" {
				denied[i] = !c.allowed(auth.Read, auth.Topic, t.Topic)
			}
		}
		commitNamed(c, req, denied)
		return nil
	})
	if resp != nil {
		c.Respond(resp)
	}
}

// commitNamed is OffsetCommit once every topic has its name ("" in v10: an unknown id);
// denied marks the v10 topics whose READ was refused after their id was resolved.
func commitNamed(c *Call, req *kmsg.OffsetCommitRequest, denied []bool) {
	var tps []offsets.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	var expireAt int64
	if c.Version <= 4 && req.RetentionTimeMillis != -1 {
		expireAt = time.Now().UnixMilli() + req.RetentionTimeMillis
	}
	withExistence(c, tps, func(exists []bool) kmsg.Response { return commitKnown(c, req, exists, expireAt, denied) })
}

// commitKnown sends the partitions that exist to the group (§4.7 step 4) and merges its
// codes with UNKNOWN_TOPIC_OR_PARTITION for the others. With no partition left it answers
// at once, without the coordinator checks (step 3): no NOT_COORDINATOR then.
func commitKnown(c *Call, req *kmsg.OffsetCommitRequest, exists []bool, expireAt int64, denied []bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	// codes[i][j] is the answer for req.Topics[i].Partitions[j]; -2 marks the partitions
	// sent to the group, whose codes come back in order.
	const sent = -2
	codes := make([][]int16, len(req.Topics))
	msg := &group.CommitOffsets{
		Group: req.Group, MemberID: req.MemberID, Generation: req.Generation,
		UnknownGroupIsNotFound: c.Version >= 9,
		Version:                c.Version,
	}
	if req.InstanceID != nil {
		msg.InstanceID = *req.InstanceID
	}
	route := groupRoute(c, req.Group)
	k := 0
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			known := exists[k]
			k++
			if c.Version >= 10 && t.Topic == "" {
				codes[i][j] = kerr.UnknownTopicID.Code
				continue
			}
			if denied != nil && denied[i] {
				codes[i][j] = topicDenied
				continue
			}
			if !known {
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			if route != 0 {
				codes[i][j] = route
				continue
			}
			codes[i][j] = sent
			e := offsets.Entry{TopicPartition: offsets.TopicPartition{Topic: t.Topic, Partition: p.Partition}}
			e.Offset = p.Offset
			e.LeaderEpoch = -1
			if c.Version >= 6 {
				e.LeaderEpoch = p.LeaderEpoch
			}
			if p.Metadata != nil {
				e.Metadata = *p.Metadata
			}
			e.ExpireTime = expireAt
			msg.Entries = append(msg.Entries, e)
		}
	}
	build := func(answers []int16) kmsg.Response {
		k := 0
		for i, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for j, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = codes[i][j]
				if rp.ErrorCode == sent {
					rp.ErrorCode = kerr.UnknownServerError.Code
					if k < len(answers) {
						rp.ErrorCode = answers[k]
					}
					k++
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if len(msg.Entries) == 0 {
		return build(nil)
	}
	msg.Reply = c.Await(func(v any) kmsg.Response { return build(v.(*offsets.CommitResult).Codes) })
	askGroups(c, msg)
	return nil
}
