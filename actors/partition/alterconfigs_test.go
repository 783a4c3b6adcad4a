package partition

import (
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/storage"
)

func (h *harness) alter(name string, ops ...ConfigOp) TopicInfo {
	h.t.Helper()
	r := request[*Created](h, func(p actor.Promise) any {
		return &AlterTopicConfigs{Topics: []TopicConfigChange{{Name: name, Ops: ops}}, Reply: p}
	})
	return r.Topics[0]
}

func setOp(name, value string) ConfigOp {
	return ConfigOp{Name: name, Op: int8(kmsg.IncrementalAlterConfigOpSet), Value: value}
}

// A config change whose catalogue write fails is answered KAFKA_STORAGE_ERROR and
// changes nothing, on disk or shown; the same change succeeds once the volume does.
func TestAlterConfigsWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	h := newHarness(t, dir, func(c *Config) { c.FS = fsys })
	h.create("t", 1)
	fsys.FailNext(storage.OpSync, nil)
	if ti := h.alter("t", setOp("retention.ms", "1000")); ti.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("alter under a failed fsync: %+v", ti)
	}
	if c := h.describe("t").Configs; len(c) != 0 {
		t.Fatalf("configs after the failed write: %v", c)
	}
	if ti := h.alter("t", setOp("retention.ms", "1000")); ti.ErrorCode != 0 {
		t.Fatalf("alter after the failure: %+v", ti)
	}
	h.stop()
	h = newHarness(t, dir, nil)
	defer h.stop()
	if c := h.describe("t").Configs; c["retention.ms"] != "1000" || len(c) != 1 {
		t.Fatalf("configs after a restart: %v", c)
	}
}

// A config change queued behind a CreatePartitions of the same topic is built on it:
// both are kept, in memory and on disk.
func TestAlterConfigsQueuedBehindGrow(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	held := make(chan struct{}, 4)
	var hold atomic.Bool
	h := newHarness(t, dir, func(c *Config) {
		c.BeforeCatalogWrite = func() {
			if hold.Load() {
				held <- struct{}{}
				<-release
			}
		}
	})
	h.create("g", 1)
	hold.Store(true)
	grow := h.sys.NewWaiter()
	h.sys.Send(h.pid, &CreatePartitions{Topics: []PartitionsIncrease{{Name: "g", Count: 3}}, Reply: grow.Promise})
	<-held // the grow's write is running: the change below is queued behind it
	alter := h.sys.NewWaiter()
	h.sys.Send(h.pid, &AlterTopicConfigs{Topics: []TopicConfigChange{{Name: "g", Ops: []ConfigOp{setOp("segment.bytes", "4096")}}}, Reply: alter.Promise})
	close(release)
	for what, w := range map[string]*actor.Waiter{"grow": grow, "alter": alter} {
		v, ok := w.Wait(5 * time.Second)
		if !ok || v.(*Created).Topics[0].ErrorCode != 0 {
			t.Fatalf("%s: %+v", what, v)
		}
	}
	check := func(when string) {
		ti := h.describe("g")
		if len(ti.Partitions) != 3 || ti.Configs["segment.bytes"] != "4096" {
			t.Fatalf("%s: %d partitions, configs %v", when, len(ti.Partitions), ti.Configs)
		}
	}
	check("after both writes")
	h.stop()
	h = newHarness(t, dir, nil)
	defer h.stop()
	check("after a restart")
}

func TestEditList(t *testing.T) {
	for _, tc := range []struct {
		cur, value string
		add        bool
		want       string
	}{
		{"", "a,b", true, "a,b"},
		{"a,b", "b,c", true, "a,b,c"},
		{"a,b,c", "b", false, "a,c"},
		{"a", "x", false, "a"},
		{"a,,b", "a", false, "b"},
	} {
		if got := editList(tc.cur, tc.value, tc.add); got != tc.want {
			t.Errorf("editList(%q, %q, %v) = %q, want %q", tc.cur, tc.value, tc.add, got, tc.want)
		}
	}
}

// A partition restarted after a panic keeps the configs it was last given, not those it
// was started with: a segment.bytes made small still rolls segments after the crash.
func TestReconfiguredPartitionKeepsItsConfigsAcrossACrash(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, nil)
	defer h.stop()
	h.create("c", 1)
	one := len(testBatch(-1, -1, -1, 1, 0, []byte("value")))
	if r := h.produce("c", 0, testBatch(-1, -1, -1, 1, 0, []byte("value"))); r.ErrorCode != 0 {
		t.Fatalf("produce: %+v", r)
	}
	if ti := h.alter("c", setOp("segment.bytes", strconv.Itoa(2*one))); ti.ErrorCode != 0 {
		t.Fatalf("alter: %+v", ti)
	}
	// A nil batch makes the partition panic; the answer is the crash's.
	pid := h.cfg.Catalog.Routes().Find("c", TopicID{}, 0).PID
	w := h.sys.NewWaiter()
	h.sys.Send(pid, &appendBatch{reply: w.Promise})
	if v, ok := w.Wait(5 * time.Second); !ok || v.(*Produced).ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("crash answer: %+v %v", v, ok)
	}
	for i := 1; i < 7; i++ {
		if r := h.produce("c", 0, testBatch(-1, -1, -1, 1, int64(i), []byte("value"))); r.ErrorCode != 0 {
			t.Fatalf("produce %d after the crash: %+v", i, r)
		}
	}
	segs, err := filepath.Glob(filepath.Join(partitionDir(topicsDir(dir), "c", 0), "*.log"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments after the crash: %v %v, want 3 or more (segment.bytes=%d)", segs, err, 2*one)
	}
}
