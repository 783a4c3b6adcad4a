package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/goleak"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/config"
	"kaas/internal/testwait"
)

// harness is a topics manager (pid) with a client (client_test.go) that sends data
// requests to its partition actors by the catalogue it publishes, as a connection does.
type harness struct {
	t      *testing.T
	sys    *actor.System
	pid    *actor.PID
	client *actor.PID
	cfg    Config
}

func newHarness(t *testing.T, dir string, mutate func(*Config)) *harness {
	t.Helper()
	bc := config.Default()
	bc.DataDir = dir
	cfg := Config{Broker: &bc, Log: zerolog.Nop()}
	if mutate != nil {
		mutate(&cfg)
	}
	if cfg.Catalog == nil {
		cfg.Catalog = NewCatalog()
	}
	h := &harness{t: t, sys: actor.NewSystem(zerolog.Nop()), cfg: cfg}
	h.pid = h.sys.Spawn(ManagerProps(cfg))
	h.client = h.sys.Spawn(actor.PropsOf(newClient))
	// As the broker does before it accepts connections.
	select {
	case <-cfg.Catalog.Loaded():
	case <-time.After(5 * time.Second):
		t.Fatal("the catalogue was not loaded")
	}
	return h
}

func (h *harness) stop() {
	if err := h.sys.Poison(h.client, 5*time.Second); err != nil {
		h.t.Fatal(err)
	}
	if err := h.sys.Poison(h.pid, 5*time.Second); err != nil {
		h.t.Fatal(err)
	}
	h.sys.Shutdown()
}

// ask sends the message made around a waiter's promise and waits for the answer.
func request[T any](h *harness, build func(actor.Promise) any) T {
	h.t.Helper()
	w := h.sys.NewWaiter()
	h.sys.Send(h.pid, build(w.Promise))
	v, ok := w.Wait(5 * time.Second)
	if !ok {
		h.t.Fatal("no answer")
	}
	return v.(T)
}

func (h *harness) create(name string, partitions int32) TopicInfo {
	r := request[*Created](h, func(p actor.Promise) any {
		return &CreateTopics{Topics: []NewTopic{{Name: name, Partitions: partitions, ReplicationFactor: -1}}, Reply: p}
	})
	return r.Topics[0]
}

func TestManagerProduceFetchRestart(t *testing.T) {
	defer goleak.VerifyNone(t, actortest.LeakOptions(goleak.IgnoreCurrent())...)
	dir := t.TempDir()
	h := newHarness(t, dir, nil)
	if ti := h.create("orders", 3); ti.ErrorCode != 0 || len(ti.Partitions) != 3 {
		t.Fatalf("create: %+v", ti)
	}
	if ti := h.create("orders", 3); ti.ErrorCode != kerr.TopicAlreadyExists.Code {
		t.Fatalf("create twice: %+v", ti)
	}
	if ti := h.create("bad/name", 1); ti.ErrorCode != kerr.InvalidTopicException.Code {
		t.Fatalf("bad name: %+v", ti)
	}
	for seq := int32(0); seq < 5; seq++ {
		r := h.produce("orders", 1, testBatch(42, 0, seq*2, 2, 1000, []byte("x")))
		if r.ErrorCode != 0 || r.BaseOffset != int64(seq*2) {
			t.Fatalf("produce %d: %+v", seq, r)
		}
	}
	if r := h.produce("orders", 7, testBatch(-1, -1, -1, 1, 0, nil)); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition: %+v", r)
	}
	if r := h.produce("orders", 1, testBatch(42, 0, 20, 1, 0, nil)); r.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("out of order: %+v", r)
	}
	f := h.fetch("orders", 1, 3, 0, 1)
	if f.ErrorCode != 0 || f.HighWatermark != 10 || len(f.Records) == 0 || parseHeader(f.Records).BaseOffset != 2 {
		t.Fatalf("fetch: %+v", f)
	}
	if f := h.fetch("orders", 1, 11, 0, 1); f.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch beyond end: %+v", f)
	}
	h.stop()

	h = newHarness(t, dir, nil)
	defer h.stop()
	// Producer state came back from the log: the last batch is a duplicate.
	if r := h.produce("orders", 1, testBatch(42, 0, 8, 2, 1000, []byte("x"))); r.ErrorCode != 0 || r.BaseOffset != 8 {
		t.Fatalf("duplicate after restart: %+v", r)
	}
	if r := h.produce("orders", 1, testBatch(42, 0, 10, 1, 1000, []byte("x"))); r.ErrorCode != 0 || r.BaseOffset != 10 {
		t.Fatalf("next after restart: %+v", r)
	}
	d := request[*Described](h, func(p actor.Promise) any { return &Describe{All: true, Reply: p} })
	if len(d.Topics) != 1 || d.Topics[0].Name != "orders" || len(d.Topics[0].Partitions) != 3 {
		t.Fatalf("describe after restart: %+v", d)
	}
}

func TestManagerLongPoll(t *testing.T) {
	h := newHarness(t, t.TempDir(), nil)
	defer h.stop()
	h.create("t", 1)
	// Times out empty.
	start := time.Now()
	if f := h.fetch("t", 0, 0, 50*time.Millisecond, 1); f.ErrorCode != 0 || len(f.Records) != 0 {
		t.Fatalf("empty fetch: %+v", f)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("fetch did not wait for max_wait_ms")
	}
	// Answered as soon as data arrives.
	w := h.startFetch(oneFetch("t", 0, 0, 5*time.Second, 1, -1))
	h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("hello")))
	v, ok := w.Wait(2 * time.Second)
	if !ok {
		t.Fatal("parked fetch not woken by produce")
	}
	if f := v.(*FetchResult).Topics[0].Partitions[0]; len(f.Records) == 0 {
		t.Fatalf("woken fetch empty: %+v", f)
	}
}

func TestManagerDeleteAndExist(t *testing.T) {
	var deleted []string
	done := make(chan struct{}, 1)
	h := newHarness(t, t.TempDir(), func(c *Config) {
		c.TopicsDeleted = func(ts []string) { deleted = ts; done <- struct{}{} }
	})
	defer h.stop()
	ti := h.create("a", 2)
	h.create("b", 1)
	e := request[*Existence](h, func(p actor.Promise) any {
		return &PartitionsExist{Partitions: []TopicPartition{{Topic: "a", Partition: 1}, {Topic: "a", Partition: 2}, {Topic: "zz", Partition: 0}}, Reply: p}
	})
	if !e.Exists[0] || e.Exists[1] || e.Exists[2] {
		t.Fatalf("exists: %v", e.Exists)
	}
	r := request[*Deleted](h, func(p actor.Promise) any {
		return &DeleteTopics{Names: []string{"b", "nope"}, IDs: []TopicID{ti.ID}, Reply: p}
	})
	if r.Topics[0].ErrorCode != 0 || r.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code || r.Topics[2].ErrorCode != 0 || r.Topics[2].Name != "a" {
		t.Fatalf("delete: %+v", r)
	}
	<-done
	if len(deleted) != 2 {
		t.Fatalf("hook saw %v", deleted)
	}
	// A deleted name can be created again at once, empty.
	if ti := h.create("b", 1); ti.ErrorCode != 0 {
		t.Fatalf("recreate: %+v", ti)
	}
	if f := h.fetch("b", 0, 0, 0, 1); f.HighWatermark != 0 {
		t.Fatalf("recreated topic not empty: %+v", f)
	}
}

// Pipelined produce requests reach a partition in the order they were sent, so an
// idempotent producer's in-flight batches are never out of sequence: the partition
// appends one sender's batches in their order, each once durable.
func TestManagerPipelinedProduceInOrder(t *testing.T) {
	h := newHarness(t, t.TempDir(), nil)
	defer h.stop()
	h.create("p", 1)
	var waiters []*actor.Waiter
	for seq := int32(0); seq < 300; seq++ {
		waiters = append(waiters, h.sendAppend("p", 0, testBatch(9, 0, seq, 1, 0, []byte("v"))))
	}
	for i, w := range waiters {
		v, ok := w.Wait(5 * time.Second)
		if !ok {
			t.Fatalf("produce %d unanswered", i)
		}
		if r := v.(*Produced); r.ErrorCode != 0 || r.BaseOffset != int64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
}

// A fetch parked on a topic that is then deleted is answered at once, not at max_wait.
// The fetch is routed to the partition before the deletion; whether it has parked on the
// partition yet or reaches it stopped, the answer is the same.
func TestManagerParkedFetchOnDeletedTopic(t *testing.T) {
	h := newHarness(t, t.TempDir(), nil)
	defer h.stop()
	h.create("gone", 1)
	w := h.startFetch(oneFetch("gone", 0, 0, time.Minute, 1, -1))
	request[*Deleted](h, func(p actor.Promise) any { return &DeleteTopics{Names: []string{"gone"}, Reply: p} })
	v, ok := w.Wait(5 * time.Second)
	if !ok {
		t.Fatal("parked fetch not answered after delete")
	}
	if f := v.(*FetchResult).Topics[0].Partitions[0]; f.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch on deleted topic: %+v", f)
	}
}

// Retention runs on its timer: old segments go, the log start moves, reads from before it
// are OFFSET_OUT_OF_RANGE.
func TestManagerRetentionBytes(t *testing.T) {
	one := int64(len(testBatch(-1, -1, -1, 1, 0, []byte("value"))))
	h := newHarness(t, t.TempDir(), func(c *Config) {
		c.Broker.LogSegmentBytes = 2 * one
		c.Broker.LogRetentionBytes = 4 * one
		c.Broker.LogRetention = -1 // the records are stamped 1970: only size may delete
		c.Broker.LogRetentionCheck = 5 * time.Millisecond
	})
	defer h.stop()
	h.create("r", 1)
	for i := 0; i < 10; i++ {
		if r := h.produce("r", 0, testBatch(-1, -1, -1, 1, int64(i), []byte("value"))); r.ErrorCode != 0 {
			t.Fatalf("produce: %+v", r)
		}
	}
	testwait.For(t, 5*time.Second, 2*time.Millisecond, func() error {
		if l := h.listOffset("r", 0, earliestTimestamp); l.Offset != 6 {
			return fmt.Errorf("log start %d, want 6", l.Offset)
		}
		return nil
	})
	if f := h.fetch("r", 0, 0, 0, 1); f.ErrorCode != kerr.OffsetOutOfRange.Code || f.LogStartOffset != 6 {
		t.Fatalf("fetch below log start: %+v", f)
	}
}

// An idle partition closes its files and reopens them on the next request.
func TestManagerIdleCloseReopens(t *testing.T) {
	h := newHarness(t, t.TempDir(), func(c *Config) { c.IdleClose = 5 * time.Millisecond })
	defer h.stop()
	h.create("idle", 1)
	h.produce("idle", 0, testBatch(-1, -1, -1, 1, 0, []byte("a")))
	dir := filepath.Join(h.cfg.Broker.DataDir, "topics", "idle")
	waitClosed(t, dir, "idle partition kept its files open")
	if r := h.produce("idle", 0, testBatch(-1, -1, -1, 1, 0, []byte("b"))); r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("append after idle close: %+v", r)
	}
	// Idle again: the read reopens what the append left closed.
	waitClosed(t, dir, "idle partition kept its files open after the append")
	if f := h.fetch("idle", 0, 0, 0, 1); f.ErrorCode != 0 || f.HighWatermark != 2 || len(f.Records) == 0 {
		t.Fatalf("read after idle close: %+v", f)
	}
}

// waitClosed waits until this process has no file open under dir.
func waitClosed(t *testing.T, dir, failure string) {
	t.Helper()
	testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond(failure, func() bool { return openUnder(t, dir) == 0 }))
}

// openUnder counts this process's open files under dir (Linux /proc).
func openUnder(t *testing.T, dir string) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			n++
		}
	}
	return n
}
