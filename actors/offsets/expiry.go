package offsets

import (
	"sort"
	"time"
)

// expiredOffsets returns the partitions whose offsets expire at now, by Apache's rules
// (GroupMetadata.removeExpiredOffsets in 3.7, OffsetMetadataManager.cleanupExpiredOffsets
// in 4.0; §5.3 of the reference), in the order they are tried:
//
//  1. An Empty group that has a protocol type (a former consumer group): every offset
//     expires retention after the group became Empty (meta.EmptySince), or after its own
//     commit time when that moment is unknown. All of its offsets go together.
//  2. A Stable consumer group that knows its subscriptions: offsets of topics it is not
//     subscribed to expire retention after their commit time (KAFKA-13636: only Stable).
//  3. A group without a protocol type (a simple group that only commits): each offset
//     expires retention after its commit time, whatever the state.
//  4. Any other group (rebalancing, or Stable with another protocol): nothing expires.
//
// Where a case applies, an offset committed with an explicit retention (OffsetCommit v2-4
// retention_time_ms, stored as ExpireTime) expires at that time instead. Partitions in
// skip (offsets with a pending commit) never expire. A Retention of zero or less expires
// nothing by age. The result is sorted.
func expiredOffsets(offsets map[TopicPartition]Committed, meta GroupMeta, rule ExpiryRule, now time.Time, skip map[TopicPartition]bool) []TopicPartition {
	nowMs := now.UnixMilli()
	retention := rule.Retention.Milliseconds()
	var base func(Committed) int64
	var subscribed map[string]bool
	switch {
	case rule.Empty && meta.ProtocolType != "":
		base = func(c Committed) int64 {
			if meta.EmptySince > 0 {
				return meta.EmptySince
			}
			return c.CommitTime
		}
	case rule.StableConsumer:
		base = func(c Committed) int64 { return c.CommitTime }
		subscribed = rule.Subscribed
	case meta.ProtocolType == "":
		base = func(c Committed) int64 { return c.CommitTime }
	default:
		return nil
	}
	var out []TopicPartition
	for tp, c := range offsets {
		if subscribed[tp.Topic] || skip[tp] {
			continue
		}
		var expired bool
		if c.ExpireTime > 0 {
			expired = nowMs >= c.ExpireTime
		} else {
			expired = retention > 0 && nowMs-base(c) >= retention
		}
		if expired {
			out = append(out, tp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}
