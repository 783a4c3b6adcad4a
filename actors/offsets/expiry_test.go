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

// Idle.NoExpiryBefore is a bound for every rule: a millisecond before it no offset
// expires, whatever the group's state, and at it one does (by the rule it came from).
func TestIdleNoExpiryBefore(t *testing.T) {
	const retention = time.Hour
	rules := []ExpiryRule{
		{Empty: true, Retention: retention},
		{StableConsumer: true, Retention: retention},
	}
	tp := func(p int32) TopicPartition { return TopicPartition{Topic: "t", Partition: p} }
	cases := []struct {
		name    string
		offsets map[TopicPartition]Committed
		meta    GroupMeta
	}{
		{"commit times", map[TopicPartition]Committed{tp(0): {CommitTime: 5_000}, tp(1): {CommitTime: 2_000}}, GroupMeta{}},
		{"explicit first", map[TopicPartition]Committed{tp(0): {CommitTime: 5_000}, tp(1): {CommitTime: 9_000, ExpireTime: 7_000}}, GroupMeta{}},
		{"explicit later", map[TopicPartition]Committed{tp(0): {CommitTime: 5_000, ExpireTime: 1_000_000_000}}, GroupMeta{ProtocolType: "consumer"}},
		{"empty since first", map[TopicPartition]Committed{tp(0): {CommitTime: 5_000}}, GroupMeta{ProtocolType: "consumer", EmptySince: 3_000}},
		{"empty since later", map[TopicPartition]Committed{tp(0): {CommitTime: 5_000}}, GroupMeta{ProtocolType: "consumer", EmptySince: 8_000}},
	}
	for _, c := range cases {
		a := newOffsetsActor(&Config{}, "g", nil)
		a.st.offsets, a.st.meta = c.offsets, c.meta
		var m Idle
		a.idleExpiry(&m)
		at := m.NoExpiryBefore(retention)
		expiredAt := func(now time.Time) bool {
			for _, r := range rules {
				for _, pt := range []string{"", "consumer"} {
					meta := c.meta
					meta.ProtocolType = pt
					if len(expiredOffsets(c.offsets, meta, r, now, nil)) > 0 {
						return true
					}
				}
			}
			return false
		}
		if expiredAt(at.Add(-time.Millisecond)) {
			t.Errorf("%s: an offset expires before %v", c.name, at.UnixMilli())
		}
		if !expiredAt(at) {
			t.Errorf("%s: nothing expires at %v: the bound is late", c.name, at.UnixMilli())
		}
	}
	var none Idle
	newOffsetsActor(&Config{}, "g", nil).idleExpiry(&none)
	if !none.NoExpiryBefore(retention).IsZero() {
		t.Error("a group with no offset: the tick must ask (it may remove the group)")
	}
}
