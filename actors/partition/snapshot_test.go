package partition

import (
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

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
			Leader:    func(_ string, p int32) int32 { return p },
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
