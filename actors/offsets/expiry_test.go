package offsets

import (
	"fmt"
	"testing"
	"time"
)

func TestExpiredOffsets(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	now := time.UnixMilli(100 * hour)
	week := 7 * 24 * time.Hour
	tp := func(topic string, p int32) TopicPartition { return TopicPartition{topic, p} }
	old := Committed{Offset: 1, CommitTime: now.UnixMilli() - 2*hour}
	fresh := Committed{Offset: 2, CommitTime: now.UnixMilli() - 1}
	offsets := map[TopicPartition]Committed{tp("a", 0): old, tp("a", 1): fresh, tp("b", 0): old}
	consumer := GroupMeta{ProtocolType: "consumer", Generation: 3}
	retention := time.Hour

	cases := []struct {
		name    string
		offsets map[TopicPartition]Committed
		meta    GroupMeta
		rule    ExpiryRule
		skip    map[TopicPartition]bool
		want    []TopicPartition
	}{
		{"empty consumer group, empty for longer than retention: all go together",
			offsets, GroupMeta{ProtocolType: "consumer", EmptySince: now.UnixMilli() - 2*hour},
			ExpiryRule{Empty: true, Retention: retention}, nil,
			[]TopicPartition{tp("a", 0), tp("a", 1), tp("b", 0)}},
		{"empty consumer group, empty for less than retention: none, even old commits",
			offsets, GroupMeta{ProtocolType: "consumer", EmptySince: now.UnixMilli() - 1},
			ExpiryRule{Empty: true, Retention: retention}, nil, nil},
		{"empty consumer group, exactly retention: expires (>=)",
			offsets, GroupMeta{ProtocolType: "consumer", EmptySince: now.UnixMilli() - hour},
			ExpiryRule{Empty: true, Retention: retention}, nil,
			[]TopicPartition{tp("a", 0), tp("a", 1), tp("b", 0)}},
		{"empty consumer group, empty time unknown: by commit time",
			offsets, consumer, ExpiryRule{Empty: true, Retention: retention}, nil,
			[]TopicPartition{tp("a", 0), tp("b", 0)}},
		{"stable consumer group: only unsubscribed topics, by commit time",
			offsets, consumer, ExpiryRule{StableConsumer: true, Subscribed: map[string]bool{"a": true}, Retention: retention}, nil,
			[]TopicPartition{tp("b", 0)}},
		{"rebalancing consumer group: nothing (KAFKA-13636)",
			offsets, consumer, ExpiryRule{Retention: retention}, nil, nil},
		{"simple group: by commit time whatever the state",
			offsets, GroupMeta{}, ExpiryRule{Retention: retention}, nil,
			[]TopicPartition{tp("a", 0), tp("b", 0)}},
		{"simple group, Empty: by commit time",
			offsets, GroupMeta{}, ExpiryRule{Empty: true, Retention: retention}, nil,
			[]TopicPartition{tp("a", 0), tp("b", 0)}},
		{"pending commits never expire",
			offsets, GroupMeta{}, ExpiryRule{Retention: retention}, map[TopicPartition]bool{tp("a", 0): true},
			[]TopicPartition{tp("b", 0)}},
		{"explicit expire time wins over retention, once expiry applies",
			map[TopicPartition]Committed{
				tp("x", 0): {CommitTime: now.UnixMilli() - 3*hour, ExpireTime: now.UnixMilli() + 1},
				tp("x", 1): {CommitTime: now.UnixMilli(), ExpireTime: now.UnixMilli()},
			}, GroupMeta{}, ExpiryRule{Retention: retention}, nil,
			[]TopicPartition{tp("x", 1)}},
		{"explicit expire time does not apply to an active group",
			map[TopicPartition]Committed{tp("x", 0): {ExpireTime: 1}}, consumer, ExpiryRule{Retention: retention}, nil, nil},
		{"the default week keeps a day-old offset",
			map[TopicPartition]Committed{tp("x", 0): {CommitTime: now.UnixMilli() - 24*hour}}, GroupMeta{}, ExpiryRule{Retention: week}, nil, nil},
		{"zero retention expires nothing by age",
			offsets, GroupMeta{}, ExpiryRule{}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := expiredOffsets(c.offsets, c.meta, c.rule, now, c.skip)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("expired %v, want %v", got, c.want)
			}
		})
	}
}
