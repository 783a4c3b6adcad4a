package partition

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// A catalogue write that hangs (a CreateTopics, DeleteTopics, CreatePartitions or a new
// block of producer ids on a slow volume) holds back only the requests that need it:
// produce, fetch and metadata of other topics go on meanwhile, and the parked requests
// are answered, in order, once the write is done. Before, the manager made these writes
// in its Receive and every request of the broker waited behind them.
func TestCatalogWritesDoNotStallTheDataPath(t *testing.T) {
	var hold atomic.Bool
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	h := newHarness(t, t.TempDir(), func(c *Config) {
		c.BeforeCatalogWrite = func() {
			if hold.Load() {
				entered <- struct{}{}
				<-release
			}
		}
	})
	defer h.stop()
	if ti := h.create("orders", 2); ti.ErrorCode != 0 {
		t.Fatalf("create: %v", kerr.ErrorForCode(ti.ErrorCode))
	}
	hold.Store(true)

	created := h.sys.NewWaiter()
	h.sys.Send(h.pid, &CreateTopics{Topics: []NewTopic{{Name: "audit", Partitions: 1, ReplicationFactor: -1}}, Reply: created.Promise})
	<-entered // the write of audit's entry has begun and hangs

	// A second create of the same name, queued behind: refused at once.
	if ti := h.create("audit", 1); ti.ErrorCode != kerr.TopicAlreadyExists.Code {
		t.Fatalf("a second create while the first is written: %v", kerr.ErrorForCode(ti.ErrorCode))
	}
	// The data path of another topic is served while the write hangs.
	if r := h.produce("orders", 1, testBatch(-1, -1, -1, 3, 1000, []byte("x"))); r.ErrorCode != 0 {
		t.Fatalf("produce while a catalogue write hangs: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if f := h.fetch("orders", 1, 0, 0, 0); f.ErrorCode != 0 || f.HighWatermark != 3 {
		t.Fatalf("fetch while a catalogue write hangs: %+v", f)
	}
	d := request[*Described](h, func(p actor.Promise) any { return &Describe{Names: []string{"orders"}, Reply: p} })
	if len(d.Topics) != 1 || d.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata while a catalogue write hangs: %+v", d.Topics)
	}
	// Producing to the topic being created: not there yet (retriable).
	if r := h.produce("audit", 0, testBatch(-1, -1, -1, 1, 1000, nil)); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("produce to a topic being created: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	// A delete queued behind the create is answered after it, in order.
	deleted := h.sys.NewWaiter()
	h.sys.Send(h.pid, &DeleteTopics{Names: []string{"orders"}, Reply: deleted.Promise})
	// The manager handles its mailbox in order: once a request sent after the delete is
	// answered, the delete has been taken and queued.
	request[*Described](h, func(p actor.Promise) any { return &Describe{Names: []string{"orders"}, Reply: p} })
	select {
	case <-created.C:
		t.Fatal("the create was answered before its write finished")
	case <-deleted.C:
		t.Fatal("the delete was answered before the write ahead of it")
	default:
	}

	hold.Store(false)
	close(release)
	v, ok := created.Wait(10 * time.Second)
	if !ok || v.(*Created).Topics[0].ErrorCode != 0 {
		t.Fatalf("create after the write: %v %v", v, ok)
	}
	v, ok = deleted.Wait(10 * time.Second)
	if !ok || v.(*Deleted).Topics[0].ErrorCode != 0 {
		t.Fatalf("delete after the write: %v %v", v, ok)
	}
	if r := h.produce("audit", 0, testBatch(-1, -1, -1, 1, 1000, nil)); r.ErrorCode != 0 {
		t.Fatalf("produce to the created topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := h.produce("orders", 0, testBatch(-1, -1, -1, 1, 1000, nil)); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("produce to the deleted topic: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}

// Producer ids come from blocks reserved on disk; requests that arrive while a block is
// written wait for it and get consecutive ids in the order they came.
func TestProducerIDsWaitForTheirBlock(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first atomic.Bool
	first.Store(true)
	h := newHarness(t, t.TempDir(), func(c *Config) {
		c.BeforeCatalogWrite = func() {
			if first.CompareAndSwap(true, false) {
				entered <- struct{}{}
				<-release
			}
		}
	})
	defer h.stop()
	ws := make([]*actor.Waiter, 3)
	for i := range ws {
		ws[i] = h.sys.NewWaiter()
		h.sys.Send(h.pid, &InitProducerID{Reply: ws[i].Promise})
	}
	<-entered
	close(release)
	for i, w := range ws {
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatalf("InitProducerId %d unanswered", i)
		}
		if id := v.(*ProducerID); id.ErrorCode != 0 || id.ID != int64(i) {
			t.Fatalf("InitProducerId %d: %+v, want id %d", i, id, i)
		}
	}
}

// The published catalogue follows every create, growth and deletion once written, so a
// connection can answer "does this partition exist" without asking the manager.
func TestCatalogIsPublished(t *testing.T) {
	cat := NewCatalog()
	h := newHarness(t, t.TempDir(), func(c *Config) { c.Catalog = cat })
	defer h.stop()
	tps := []TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 2}, {Topic: "none", Partition: 0}}
	h.create("orders", 2)
	if got := cat.Exists(tps); !got[0] || got[1] || got[2] {
		t.Fatalf("after create: %v", got)
	}
	grown := request[*Created](h, func(p actor.Promise) any {
		return &CreatePartitions{Topics: []PartitionsIncrease{{Name: "orders", Count: 3}}, Reply: p}
	})
	if grown.Topics[0].ErrorCode != 0 {
		t.Fatalf("grow: %v", kerr.ErrorForCode(grown.Topics[0].ErrorCode))
	}
	if got := cat.Exists(tps); !got[0] || !got[1] || got[2] {
		t.Fatalf("after growing to 3: %v", got)
	}
	request[*Deleted](h, func(p actor.Promise) any { return &DeleteTopics{Names: []string{"orders"}, Reply: p} })
	if got := cat.Exists(tps); got[0] || got[1] {
		t.Fatalf("after delete: %v", got)
	}
}
