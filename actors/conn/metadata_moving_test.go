package conn

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/partition"
)

// A partition no broker serves yet (moving, or just created and not opened by its
// leader) answers LEADER_NOT_AVAILABLE with no leader and no in-sync replica, and still
// lists the broker taking it as its replica, as Apache lists the assigned replicas during
// an election: a topic's replication factor reads the same throughout. Before, the
// replica list was empty, and kaas-admin's topics list, a replication factor read from
// Metadata, showed 0 for a topic created a moment before.
func TestMetadataOfAMovingPartition(t *testing.T) {
	ti := &partition.TopicInfo{Name: "t", Partitions: []partition.PartitionInfo{
		{Partition: 0, Leader: 1, Replica: 1, LeaderEpoch: 3},
		{Partition: 1, Leader: -1, Replica: 2, LeaderEpoch: -1},
		{Partition: 2, Leader: -1, Replica: -1, LeaderEpoch: -1},
	}}
	mt := metadataTopic(nil, 12, ti)
	want := []struct {
		code          int16
		leader        int32
		replicas, isr string
	}{
		{0, 1, "[1]", "[1]"},
		{kerr.LeaderNotAvailable.Code, -1, "[2]", "[]"},
		{kerr.LeaderNotAvailable.Code, -1, "[]", "[]"},
	}
	for i, p := range mt.Partitions {
		w := want[i]
		if p.ErrorCode != w.code || p.Leader != w.leader || fmt.Sprint(p.Replicas) != w.replicas || fmt.Sprint(p.ISR) != w.isr {
			t.Errorf("partition %d: code %d leader %d replicas %v isr %v, want %+v", i, p.ErrorCode, p.Leader, p.Replicas, p.ISR, w)
		}
		if p.Replicas == nil || p.ISR == nil {
			t.Errorf("partition %d: nil list (encoded as null on flexible versions)", i)
		}
	}
}
