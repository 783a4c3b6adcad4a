package broker_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// TestOffsetsByTopicID: OffsetCommit and OffsetFetch v10 name topics by id (Apache
// 4.1): a commit by id is read back by id and by name (v9), an id the catalogue does not
// have is UNKNOWN_TOPIC_ID in each of its partitions, and a fetch of every committed
// partition names the topics by id.
func TestOffsetsByTopicID(t *testing.T) {
	b := brokertest.Start(t, nil)
	td := createTopic(t, b.Addr(), "orders", 2)
	id := [16]byte(td.ID)
	unknown := [16]byte{1, 2, 3}

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "g10", -1
	for _, tid := range [][16]byte{id, unknown} {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.TopicID = tid
		for p := int32(0); p < 2; p++ {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition, cp.Offset = p, int64(10+p)
			ct.Partitions = append(ct.Partitions, cp)
		}
		commit.Topics = append(commit.Topics, ct)
	}
	cr := request[*kmsg.OffsetCommitResponse](t, b.Addr(), commit, 10)
	if len(cr.Topics) != 2 {
		t.Fatalf("commit answered %d topics", len(cr.Topics))
	}
	for i, want := range []int16{0, kerr.UnknownTopicID.Code} {
		rt := cr.Topics[i]
		if rt.TopicID != commit.Topics[i].TopicID {
			t.Fatalf("commit topic %d answered as id %x", i, rt.TopicID)
		}
		for _, p := range rt.Partitions {
			if p.ErrorCode != want {
				t.Fatalf("commit topic %d partition %d: code %d, want %d", i, p.Partition, p.ErrorCode, want)
			}
		}
	}

	fetch := func(v int16, topics []kmsg.OffsetFetchRequestGroupTopic) kmsg.OffsetFetchResponseGroup {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group, g.Topics, g.MemberEpoch = "g10", topics, -1
		req.Groups = append(req.Groups, g)
		r := request[*kmsg.OffsetFetchResponse](t, b.Addr(), req, v)
		if len(r.Groups) != 1 || r.Groups[0].ErrorCode != 0 {
			t.Fatalf("fetch v%d: %+v", v, r.Groups)
		}
		return r.Groups[0]
	}
	byID := fetch(10, []kmsg.OffsetFetchRequestGroupTopic{{TopicID: id, Partitions: []int32{0, 1}}, {TopicID: unknown, Partitions: []int32{0}}})
	if len(byID.Topics) != 2 || byID.Topics[0].TopicID != id || byID.Topics[1].TopicID != unknown {
		t.Fatalf("fetch by id answered %+v", byID.Topics)
	}
	for _, p := range byID.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.Offset != int64(10+p.Partition) {
			t.Fatalf("fetch by id, partition %d: %+v", p.Partition, p)
		}
	}
	if p := byID.Topics[1].Partitions[0]; p.ErrorCode != kerr.UnknownTopicID.Code || p.Offset != -1 {
		t.Fatalf("fetch of an unknown id: %+v", p)
	}
	byName := fetch(9, []kmsg.OffsetFetchRequestGroupTopic{{Topic: "orders", Partitions: []int32{1}}})
	if p := byName.Topics[0].Partitions[0]; p.Offset != 11 {
		t.Fatalf("fetch by name (v9) of a commit by id: %+v", p)
	}
	all := fetch(10, nil)
	if len(all.Topics) != 1 || all.Topics[0].TopicID != id || len(all.Topics[0].Partitions) != 2 {
		t.Fatalf("fetch of every committed partition by id: %+v", all.Topics)
	}
}
