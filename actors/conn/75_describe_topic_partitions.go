package conn

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
	"kaas/auth"
)

// DescribeTopicPartitions (key 75), v0 (KIP-966): Metadata's topic part, paged.
//
// The topics are the ones named (an empty list: every topic), those at or after the
// cursor's topic, by name; partitions are Metadata's (partition.Describe, partitionNodes:
// the leader, its epoch, replicas and ISR the broker holding the one copy; no eligible
// leader replicas, nothing offline). Paging is Apache's
// (DescribeTopicPartitionsRequestHandler, KRaftMetadataCache.describeTopicResponse): at
// most min(response_partition_limit, 2000) partitions, at least 1; the cursor's topic
// starts at the cursor's partition, every other at 0; a topic cut short gives the next
// cursor at its next partition, and once the limit is reached exactly the next topic
// gives it at partition 0. A cursor with a negative partition, or whose topic is not
// among the topics described, is INVALID_REQUEST for every named topic.
//
// Authorization is per topic, DESCRIBE, and decided here rather than in authz.go, since
// the pages are counted over the topics a principal may see: a named topic it may not is
// answered TOPIC_AUTHORIZATION_FAILED (after the others, with no id), and left out when
// every topic is asked for. Each topic answered has its authorized operations (every
// TOPIC operation with authorization off), as Apache sets them whether asked or not.
// Unknown named topics are UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
// invalid name).
func init() { register(75, 0, 0, handleDescribeTopicPartitions) }

// maxRequestPartitionSizeLimit is Apache's max.request.partition.size.limit default:
// the most partitions one DescribeTopicPartitions answers.
const maxRequestPartitionSizeLimit = 2000

// topicAuthorizedOperations is Apache's answer with no authorizer: every TOPIC operation
// (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: bits
// 3-8, 10, 11).
const topicAuthorizedOperations = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<10 | 1<<11

func handleDescribeTopicPartitions(c *Call) {
	req := c.Req.(*kmsg.DescribeTopicPartitionsRequest)
	all := len(req.Topics) == 0
	cursorTopic, start := "", int32(0)
	if req.Cursor != nil {
		cursorTopic, start = req.Cursor.Topic, req.Cursor.Partition
	}
	// invalid is Apache's error response: each named topic with INVALID_REQUEST.
	invalid := func() kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = strPtr(t.Topic), kerr.InvalidRequest.Code
			rt.AuthorizedOperations = int32Min
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if req.Cursor != nil && start < 0 {
		c.Respond(invalid())
		return
	}
	limit := max(min(maxRequestPartitionSizeLimit, req.ResponsePartitionLimit), 1)

	// The named topics to describe: at or after the cursor's topic, once each, sorted;
	// those the principal may not describe are answered after the rest.
	var names, denied []string
	if !all {
		set := map[string]bool{}
		for _, t := range req.Topics {
			if t.Topic >= cursorTopic {
				set[t.Topic] = true
			}
		}
		if req.Cursor != nil && !set[cursorTopic] {
			c.Respond(invalid())
			return
		}
		for name := range set {
			names = append(names, name)
		}
		sort.Strings(names)
		allowed := names[:0]
		for _, name := range names {
			if c.mayDescribeTopic(name) {
				allowed = append(allowed, name)
			} else {
				denied = append(denied, name)
			}
		}
		names = allowed
	}

	build := func(res *partition.Described) kmsg.Response {
		var topics []partition.TopicInfo
		switch {
		case all:
			found := false
			for _, ti := range resOrNone(res) {
				if ti.Name < cursorTopic {
					continue
				}
				found = found || ti.Name == cursorTopic
				if c.mayDescribeTopic(ti.Name) {
					topics = append(topics, ti)
				}
			}
			if req.Cursor != nil && !found {
				return invalid()
			}
		case res != nil:
			topics = res.Topics
		default:
			for _, name := range names {
				topics = append(topics, partition.TopicInfo{Name: name, ErrorCode: kerr.UnknownTopicOrPartition.Code})
			}
		}
		resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
		resp.Topics, resp.NextCursor = pageTopics(topics, all, cursorTopic, start, limit)
		for i := range resp.Topics {
			resp.Topics[i].AuthorizedOperations = c.topicOperations(*resp.Topics[i].Topic)
		}
		for _, name := range denied {
			rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = strPtr(name), topicDenied
			rt.AuthorizedOperations = int32Min
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if noTopics(c) || !all && len(names) == 0 {
		c.Respond(build(nil))
		return
	}
	d := &partition.Describe{All: all, Names: names, WaitLeader: leaderWait(c)}
	d.Reply = c.Await(func(v any) kmsg.Response { return build(v.(*partition.Described)) })
	askTopics(c, d)
}

func resOrNone(res *partition.Described) []partition.TopicInfo {
	if res == nil {
		return nil
	}
	return res.Topics
}

// pageTopics answers topics (sorted by name) up to limit partitions, the cursor's topic
// from partition start: the topics answered and the next cursor, nil when all fit.
// Unknown topics are answered with their code unless every topic was asked for.
func pageTopics(topics []partition.TopicInfo, all bool, cursorTopic string, start, limit int32) (
	[]kmsg.DescribeTopicPartitionsResponseTopic, *kmsg.DescribeTopicPartitionsResponseNextCursor) {
	var out []kmsg.DescribeTopicPartitionsResponseTopic
	remaining := limit
	for _, ti := range topics {
		if remaining == 0 {
			next := kmsg.NewDescribeTopicPartitionsResponseNextCursor()
			next.Topic, next.Partition = ti.Name, 0
			return out, &next
		}
		rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
		rt.Topic, rt.ErrorCode = strPtr(ti.Name), ti.ErrorCode
		if ti.ErrorCode != 0 {
			if !all {
				out = append(out, rt)
			}
			continue
		}
		rt.TopicID = ti.ID
		first := int32(0)
		if ti.Name == cursorTopic {
			first = start
		}
		parts := append([]partition.PartitionInfo(nil), ti.Partitions...)
		sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
		for i, p := range parts {
			if p.Partition < first {
				continue
			}
			if remaining == 0 {
				out = append(out, rt)
				next := kmsg.NewDescribeTopicPartitionsResponseNextCursor()
				next.Topic, next.Partition = ti.Name, parts[i].Partition
				return out, &next
			}
			rp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
			rp.Partition, rp.LeaderID, rp.LeaderEpoch = p.Partition, p.Leader, p.LeaderEpoch
			rp.Replicas, rp.ISR, rp.ErrorCode = partitionNodes(p, 0)
			rp.EligibleLeaderReplicas, rp.LastKnownELR, rp.OfflineReplicas = []int32{}, []int32{}, []int32{}
			rt.Partitions = append(rt.Partitions, rp)
			remaining--
		}
		out = append(out, rt)
	}
	return out, nil
}

// mayDescribeTopic is DESCRIBE on the topic, counted and logged when denied; true with
// authorization off.
func (c *Call) mayDescribeTopic(name string) bool {
	return c.Env.Authorizer == nil || c.allowed(auth.Describe, auth.Topic, name)
}

// topicOperations is a topic's authorized operations (KIP-430).
func (c *Call) topicOperations(name string) int32 {
	if c.Env.Authorizer == nil {
		return topicAuthorizedOperations
	}
	return c.Env.Authorizer.AuthorizedOperations(c.Principal, c.Host, auth.Topic, name, topicOperations)
}
