package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/internal/testwait"
	"kaas/storage"
)

// asBroker makes a harness one broker of a three-broker cluster that leads every
// partition it is asked about (leader), writing the catalogue when it is broker 0.
func asBroker(id int32, leader *atomic.Int32, lapsed func(int32) bool) func(*Config) {
	return func(c *Config) {
		c.NodeID = id
		c.Cluster = &ClusterConfig{
			Owns:      func(string, int32) bool { return leader.Load() == id },
			Leader:    func(string, int32) (int32, int32) { return leader.Load(), leader.Load() },
			Catalogue: func() bool { return id == 0 },
			Gate:      func() func() bool { return func() bool { return true } },
			Lapsed:    lapsed,
			Reload:    10 * time.Millisecond,
			Size:      3,
		}
	}
}

// createWith creates a one-partition topic and produces n one-record batches of value.
func (h *harness) createWith(topic string, n int, value string) {
	h.t.Helper()
	if ti := h.create(topic, 1); ti.ErrorCode != 0 {
		h.t.Fatalf("create: %+v", ti)
	}
	for i := 0; i < n; i++ {
		if r := h.produce(topic, 0, testBatch(-1, -1, -1, 1, 0, []byte(value))); r.ErrorCode != 0 {
			h.t.Fatalf("produce: %+v", r)
		}
	}
}

// produceOnceLed produces one record of value, again while the partition answers
// NOT_LEADER_OR_FOLLOWER (its actor waits for the lock), and fails the test on any other
// error or after 10 s.
func (h *harness) produceOnceLed(topic string, part int32, value []byte) *Produced {
	h.t.Helper()
	var r *Produced
	testwait.For(h.t, 10*time.Second, 5*time.Millisecond, func() error {
		r = h.produce(topic, part, testBatch(-1, -1, -1, 1, 0, value))
		switch r.ErrorCode {
		case 0:
			return nil
		case kerr.NotLeaderForPartition.Code:
			return fmt.Errorf("produce: %+v", r)
		}
		h.t.Fatalf("produce: %+v", r)
		return nil
	})
	return r
}

func (h *harness) describe(topic string) TopicInfo {
	r := request[*Described](h, func(p actor.Promise) any { return &Describe{Names: []string{topic}, Reply: p} })
	return r.Topics[0]
}

// batchesFrom reads every batch from offset to the high watermark: base offset, leader
// epoch and first record's value of each.
func (h *harness) batchesFrom(topic string, part int32, offset int64) (bases []int64, epochs []int32, values []string) {
	h.t.Helper()
	for {
		f := h.fetch(topic, part, offset, 0, 0)
		if f.ErrorCode != 0 {
			h.t.Fatalf("fetch at %d: %s", offset, kerr.ErrorForCode(f.ErrorCode))
		}
		if len(f.Records) == 0 {
			return
		}
		for b := f.Records; len(b) > 0; {
			hd := parseHeader(b)
			bases, epochs = append(bases, hd.BaseOffset), append(epochs, hd.LeaderEpoch)
			values = append(values, string(firstValue(h.t, b[:hd.Size()])))
			offset = hd.LastOffset() + 1
			b = b[hd.Size():]
		}
	}
}

// waitEpoch polls Describe (with a deadline) until the partition's leader epoch is want:
// a broker that does not lead it reads the leader's file off its mailbox.
func (h *harness) waitEpoch(topic string, want int32) {
	h.t.Helper()
	testwait.For(h.t, 5*time.Second, 5*time.Millisecond, func() error {
		if got := h.describe(topic).Partitions[0].LeaderEpoch; got != want {
			return fmt.Errorf("Metadata leader epoch %d, want %d", got, want)
		}
		return nil
	})
}

// The leader epoch begins anew when the partition moves to another broker, is stamped on
// every batch the new leader writes, survives that leader's restart unchanged, and is the
// one Metadata answers on the leader and on the brokers that do not lead it (there, as
// the file says, or one more once their view moves the partition).
func TestLeaderEpochBeginsWhenPartitionMoves(t *testing.T) {
	dir := t.TempDir()
	var leader atomic.Int32
	h := newHarness(t, dir, asBroker(0, &leader, nil))
	h.createWith("t", 2, "a")
	h.waitEpoch("t", 1)
	h.stop()

	leader.Store(1)
	h = newHarness(t, dir, asBroker(1, &leader, nil))
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("b"))); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("produce on the new leader: %+v", r)
	}
	bases, epochs, _ := h.batchesFrom("t", 0, 0)
	if !slices.Equal(bases, []int64{0, 1, 2}) || !slices.Equal(epochs, []int32{1, 1, 2}) {
		t.Fatalf("batches %v with epochs %v, want [0 1 2] with [1 1 2]", bases, epochs)
	}
	h.waitEpoch("t", 2)
	if e := h.epochEnd("t", 0, 1); e.ErrorCode != 0 || e.LeaderEpoch != 1 || e.EndOffset != 2 {
		t.Fatalf("OffsetForLeaderEpoch(1) = %+v, want epoch 1 ending at 2", e)
	}
	if f := h.fetchEpoch("t", 0, 0, 1); f.ErrorCode != kerr.FencedLeaderEpoch.Code {
		t.Fatalf("fetch with the old epoch: %s, want FENCED_LEADER_EPOCH", kerr.ErrorForCode(f.ErrorCode))
	}
	h.stop()

	// Broker 1 restarts: it led the partition last, so the epoch stays.
	h = newHarness(t, dir, asBroker(1, &leader, nil))
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("c"))); r.ErrorCode != 0 {
		t.Fatalf("produce after the restart: %+v", r)
	}
	_, epochs, _ = h.batchesFrom("t", 0, 3)
	if !slices.Equal(epochs, []int32{2}) {
		t.Fatalf("epochs after the leader's restart %v, want [2]", epochs)
	}
	h.stop()
	entries, err := readEpochs(storage.OSFS{}, partitionDir(topicsDir(dir), "t", 0))
	if err != nil {
		t.Fatal(err)
	}
	want := []epochEntry{{Epoch: 1, StartOffset: 0, Broker: 0}, {Epoch: 2, StartOffset: 2, Broker: 1}}
	if !slices.Equal(entries, want) {
		t.Fatalf("leader-epoch file %+v, want %+v", entries, want)
	}

	// Broker 2 leads nothing: it answers the file's epoch while broker 1 leads, and the
	// next one as soon as its view moves the partition to broker 0.
	// It knows the epoch from its first answer on: a broker reads the files of a topic
	// it learns of before it answers for it.
	h = newHarness(t, dir, asBroker(2, &leader, nil))
	defer h.stop()
	if got := h.describe("t").Partitions[0].LeaderEpoch; got != 2 {
		t.Fatalf("first Metadata on a broker just started: leader epoch %d, want 2", got)
	}
	leader.Store(0)
	h.waitEpoch("t", 3)
}

// A new leader breaks the partition lock of a broker whose lease has lapsed (a paused
// process keeps its locks) instead of waiting for it, and what that broker writes once
// it resumes is never served: neither by the new leader nor after any later recovery.
func TestLapsedLeaderLockBrokenAndLateWriteRefused(t *testing.T) {
	dir := t.TempDir()
	var leader atomic.Int32
	old := newHarness(t, dir, asBroker(0, &leader, nil))
	old.createWith("t", 3, "a")
	// Broker 0 keeps running and holding the partition's lock: it is paused, as far as
	// the others can tell, until its lease lapses.
	var lapsed atomic.Bool
	leader.Store(1)
	met := NewMetrics(nil)
	h := newHarness(t, dir, func(c *Config) {
		asBroker(1, &leader, func(id int32) bool { return id == 0 && lapsed.Load() })(c)
		c.Metrics = met
	})
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("b"))); r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce while the holder's lease holds: %+v, want NOT_LEADER_OR_FOLLOWER", r)
	}
	lapsed.Store(true)
	if r := h.produceOnceLed("t", 0, []byte("b")); r.BaseOffset != 3 {
		t.Fatalf("first produce on the new leader at %d, want 3 (the lock broken)", r.BaseOffset)
	}
	// Broker 0 resumes and completes a write it had checked its lease for before the
	// pause: it lands in its own segment, past where its successor began.
	if r := old.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("late"))); r.ErrorCode != 0 {
		t.Fatalf("the former leader's late write: %+v", r)
	}
	check := func(who string, hh *harness) {
		t.Helper()
		bases, epochs, values := hh.batchesFrom("t", 0, 0)
		if !slices.Equal(bases, []int64{0, 1, 2, 3}) || !slices.Equal(epochs, []int32{1, 1, 1, 2}) ||
			!slices.Equal(values, []string{"a", "a", "a", "b"}) {
			t.Fatalf("%s serves offsets %v, epochs %v, values %v; want [0 1 2 3], [1 1 1 2], [a a a b]", who, bases, epochs, values)
		}
	}
	check("the new leader", h)
	if n := testutil.ToFloat64(met.locksBroken); n != 1 {
		t.Fatalf("kaas_log_leader_locks_broken_total = %v, want 1", n)
	}
	// The new leader holds the lock of a new leader.lock, which names it, so a later
	// leader waits for it as usual, before and after broker 0 lets its old lock go.
	old.stop()
	lockFile := filepath.Join(partitionDir(topicsDir(dir), "t", 0), "leader.lock")
	testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("the new leader never took the lock its former holder let go", func() bool {
		b, _ := os.ReadFile(lockFile)
		return string(b) == "1"
	}))
	h.stop()
	h = newHarness(t, dir, asBroker(1, &leader, nil))
	check("the new leader after a restart", h)
	h.stop()
	leader.Store(2)
	met = NewMetrics(nil)
	h = newHarness(t, dir, func(c *Config) { asBroker(2, &leader, nil)(c); c.Metrics = met })
	defer h.stop()
	check("the next leader", h)
	if n := testutil.ToFloat64(met.staleIgnored); n != 1 {
		t.Fatalf("kaas_log_stale_writes_ignored_total = %v at the next leader's recovery, want 1", n)
	}
}

// firstValue is the value of a stored batch's first record (uncompressed).
func firstValue(t *testing.T, b []byte) []byte {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	var r kmsg.Record
	if err := r.ReadFrom(rb.Records); err != nil {
		t.Fatal(err)
	}
	return r.Value
}

// A partition whose lease is lost while a produce waits for its fsync acknowledges
// nothing as it stops: its close still makes the batch durable, but the partition's new
// leader may have recovered the log before that and begun past it, so the record would
// never be served. Before, the stop answered the waiting produce with success.
func TestFencedPartitionAcknowledgesNothingAtStop(t *testing.T) {
	fsys := storage.NewFaultFS(nil)
	entered, hold := make(chan struct{}, 1), make(chan struct{})
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpSync && strings.HasSuffix(path, ".log") {
			entered <- struct{}{}
			<-hold
		}
		return nil
	})
	var open atomic.Bool
	open.Store(true)
	sys := actor.NewSystem(zerolog.Nop())
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: t.TempDir(), Topic: "t",
		SegmentBytes: 1 << 30, FlushMessages: 1, Log: zerolog.Nop(), FS: fsys, Gate: open.Load}))
	w := sys.NewWaiter()
	batch, perr := validateBatch(testBatch(-1, -1, -1, 1, 0, []byte("b")), 1<<20)
	if perr != nil {
		t.Fatal(perr.msg)
	}
	sys.Send(pid, AppendMessage(batch, w.Promise))
	<-entered         // written, its fsync in flight
	open.Store(false) // the lease is lost; the ownership controller stops the partition
	stopped := make(chan error, 1)
	go func() { stopped <- sys.Poison(pid, 5*time.Second) }()
	v, ok := w.Wait(5 * time.Second)
	close(hold)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	sys.Shutdown()
	if !ok {
		t.Fatal("the produce was never answered")
	}
	if r := v.(*Produced); r.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce answered %+v as its partition stopped fenced, want NOT_LEADER_OR_FOLLOWER", r)
	}
}
