package partition

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"golang.org/x/sys/unix"

	"kaas/actors/actor"
)

// The published catalogue routes every partition a CreateTopics or CreatePartitions
// answered for to its running actor, and a deleted topic to nothing.
func TestCatalogRoutesWhatTheManagerAnswered(t *testing.T) {
	dir, err := os.MkdirTemp("", "routes")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	catalog := NewCatalog()
	h := newHarness(t, dir, func(c *Config) { c.Catalog = catalog })
	defer h.stop()
	<-catalog.Loaded()
	ti := h.create("t", 1)
	if r := catalog.Routes().Find("t", TopicID{}, 0); r.PID == nil || r.ID != ti.ID {
		t.Fatalf("partition 0 after create: %+v", r)
	}
	request[*Created](h, func(p actor.Promise) any {
		return &CreatePartitions{Topics: []PartitionsIncrease{{Name: "t", Count: 3}}, Reply: p}
	})
	routes := catalog.Routes()
	for p := int32(0); p < 3; p++ {
		if r := routes.Find("", ti.ID, p); r.PID == nil || r.Topic != "t" {
			t.Fatalf("partition %d by id after CreatePartitions: %+v", p, r)
		}
	}
	if r := routes.Find("t", TopicID{}, 3); r.PID != nil || r.Code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("partition 3: %+v", r)
	}
	if r := routes.Find("", TopicID{1}, 0); r.Code != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown id: %+v", r)
	}
}

// In a cluster the catalogue names partitions led elsewhere with no actor: a request
// routed by it gets NOT_LEADER_OR_FOLLOWER there, never a success code with no write.
func TestCatalogRoutesPartitionsLedElsewhereToNotLeader(t *testing.T) {
	catalog := NewCatalog()
	h := newHarness(t, t.TempDir(), func(c *Config) {
		c.Catalog = catalog
		c.Cluster = &ClusterConfig{
			Owns:      func(_ string, p int32) bool { return p == 0 },
			Leader:    func(_ string, p int32) (int32, int32) { return p, p },
			Catalogue: func() bool { return true },
			Size:      2,
		}
	})
	defer h.stop()
	<-catalog.Loaded()
	h.create("t", 2)
	routes := catalog.Routes()
	if r := routes.Find("t", TopicID{}, 0); r.PID == nil || r.Code != 0 {
		t.Fatalf("partition 0, led here: %+v", r)
	}
	if r := routes.Find("t", TopicID{}, 1); r.PID != nil || r.Code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("partition 1, led elsewhere: %+v, want no actor and NOT_LEADER_OR_FOLLOWER", r)
	}
}

// A new leader whose partition lock another process still holds (the previous leader
// stopping, or paused and not yet lapsed) holds the produces sent to it and appends them
// once the lock is let go, without blocking (a fetch meanwhile answers
// NOT_LEADER_OR_FOLLOWER at once, and is retried at once). A produce held past parkFor
// is answered NOT_LEADER_OR_FOLLOWER. Before, every produce was answered
// NOT_LEADER_OR_FOLLOWER at once, and franz-go then waits its metadata age (5 s) before
// it asks again; earlier still, the actor waited 5 s inside its Receive and then
// answered KAFKA_STORAGE_ERROR for good.
func TestPartitionWaitsForLeaderLock(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cluster := func(c *Config) {
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c.Cluster = &ClusterConfig{
			Owns:      func(string, int32) bool { return true },
			Leader:    func(string, int32) (int32, int32) { return 0, 0 },
			Catalogue: func() bool { return true },
			Gate:      func() func() bool { return func() bool { return true } },
			Size:      1,
		}
	}
	h := newHarness(t, dir, cluster)
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, nil)); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	h.stop()

	// Another process leads the partition: its lock is held.
	f, err := os.OpenFile(filepath.Join(partitionDir(filepath.Join(dir, "topics"), "t", 0), "leader.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	h = newHarness(t, dir, cluster)
	defer h.stop()
	// Held past its wait: NOT_LEADER_OR_FOLLOWER. The clock moves only once the
	// produce has been answered or parked: a fetch sent after it is answered after it.
	expired := h.sendAppend("t", 0, testBatch(-1, -1, -1, 1, 0, nil))
	if r := h.fetch("t", 0, 0, 0, 1); r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch while the lock is held elsewhere: %+v, want NOT_LEADER_OR_FOLLOWER", r)
	}
	now.Add(int64(parkFor + time.Second))
	v, ok := expired.Wait(5 * time.Second)
	if !ok {
		t.Fatal("a produce held past its wait was not answered")
	}
	if r := v.(*Produced); r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce held past its wait: %+v, want NOT_LEADER_OR_FOLLOWER", r)
	}
	// Held, then appended once the lock is let go: the client sends it once.
	held := h.sendAppend("t", 0, testBatch(-1, -1, -1, 1, 0, nil))
	if r := h.fetch("t", 0, 0, 0, 1); r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch while the lock is held elsewhere: %+v, want NOT_LEADER_OR_FOLLOWER", r)
	}
	// The fetch was answered after the produce was handled: had the produce been
	// answered, its answer would be here.
	select {
	case v := <-held.C:
		t.Fatalf("a produce was answered while the lock was held elsewhere, within its wait: %+v", v)
	default:
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	v, ok = held.Wait(5 * time.Second)
	if !ok {
		t.Fatal("the held produce was not answered once the lock was let go")
	}
	if r := v.(*Produced); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("held produce once the lock was let go: %+v, want base offset 1", r)
	}
}
