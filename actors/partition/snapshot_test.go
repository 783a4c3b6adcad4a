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
