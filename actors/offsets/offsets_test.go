package offsets

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

const waitFor = 5 * time.Second

// syncBuffer is a log sink the actor goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is one actor system with one group's offsets actor on a FaultFS over a temp dir.
type harness struct {
	t       *testing.T
	sys     *actor.System
	dir     string
	fs      *storage.FaultFS
	logs    *syncBuffer
	metrics *Metrics
	reg     *prometheus.Registry
	nowMs   atomic.Int64
	cfg     Config
	pid     *actor.PID
}

func newHarness(t *testing.T, group string, tune ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, dir: filepath.Join(t.TempDir(), "__cluster", "__consumer_offsets"), logs: &syncBuffer{}}
	h.fs = storage.NewFaultFS(nil)
	h.reg = prometheus.NewRegistry()
	h.metrics = NewMetrics(h.reg)
	h.nowMs.Store(1_700_000_000_000)
	log := zerolog.New(h.logs)
	h.sys = actor.NewSystem(log)
	h.cfg = Config{
		Group: group, Dir: h.dir, FS: h.fs, Log: log, Metrics: h.metrics,
		Now: func() time.Time { return time.UnixMilli(h.nowMs.Load()) },
	}
	for _, f := range tune {
		f(&h.cfg)
	}
	h.pid = h.sys.Spawn(Props(h.cfg))
	t.Cleanup(func() {
		h.fs.Before = nil
		_ = h.sys.Poison(h.pid, waitFor)
		h.sys.Shutdown()
	})
	return h
}

// restart replaces the actor with a fresh one (a new incarnation reading the file).
func (h *harness) restart() {
	h.t.Helper()
	if err := h.sys.Poison(h.pid, waitFor); err != nil {
		h.t.Fatal(err)
	}
	h.pid = h.sys.Spawn(Props(h.cfg))
}

func (h *harness) advance(d time.Duration) { h.nowMs.Add(d.Milliseconds()) }

// send delivers the message mk builds around a fresh promise and returns its waiter.
func (h *harness) send(mk func(actor.Promise) any) *actor.Waiter {
	w := h.sys.NewWaiter()
	h.sys.Send(h.pid, mk(w.Promise))
	return w
}

func wait[T any](t *testing.T, w *actor.Waiter) T {
	t.Helper()
	v, ok := w.Wait(waitFor)
	if !ok {
		t.Fatalf("no answer within %v", waitFor)
	}
	r, ok := v.(T)
	if !ok {
		t.Fatalf("answer %T %+v, want %T", v, v, *new(T))
	}
	return r
}

func entry(topic string, p int32, offset int64) Entry {
	return Entry{TopicPartition{topic, p}, Committed{Offset: offset, LeaderEpoch: -1}}
}

func (h *harness) commitW(entries ...Entry) *actor.Waiter {
	return h.send(func(p actor.Promise) any { return &Commit{Entries: entries, Reply: p} })
}

func (h *harness) commit(entries ...Entry) []int16 {
	h.t.Helper()
	return wait[*CommitResult](h.t, h.commitW(entries...)).Codes
}

func (h *harness) fetch(tps ...TopicPartition) *FetchResult {
	h.t.Helper()
	return wait[*FetchResult](h.t, h.send(func(p actor.Promise) any { return &Fetch{Partitions: tps, Reply: p} }))
}

func (h *harness) stat() *Status {
	h.t.Helper()
	return wait[*Status](h.t, h.send(func(p actor.Promise) any { return &Stat{Reply: p} }))
}

func (h *harness) result(mk func(actor.Promise) any) int16 {
	h.t.Helper()
	return wait[*Result](h.t, h.send(mk)).ErrorCode
}

// onDisk decodes the group's file as a fresh load would.
func (h *harness) onDisk() (state, bool) {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, FileName(h.cfg.Group)))
	if os.IsNotExist(err) {
		return state{}, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	id, s, err := decodeFile(b)
	if err != nil {
		h.t.Fatalf("file on disk does not decode: %v\n%s", err, b)
	}
	if id != h.cfg.Group {
		h.t.Fatalf("file on disk holds group %q", id)
	}
	return s, true
}

func (h *harness) dirNames() []string {
	h.t.Helper()
	names, err := storage.OSFS{}.ReadDirNames(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

func codes(n int, c int16) []int16 {
	out := make([]int16, n)
	for i := range out {
		out[i] = c
	}
	return out
}

func TestCommitFetchAndReload(t *testing.T) {
	h := newHarness(t, "g")
	if s := h.stat(); s.Exists || s.Count != 0 || s.ErrorCode != 0 {
		t.Fatalf("new group: %+v", s)
	}
	e0 := Entry{TopicPartition{"t", 0}, Committed{Offset: 10, LeaderEpoch: 4, Metadata: "meta"}}
	e1 := Entry{TopicPartition{"t", 1}, Committed{Offset: 11, LeaderEpoch: -1, CommitTime: 5, ExpireTime: 99}}
	if got := h.commit(e0, e1); !slices.Equal(got, []int16{0, 0}) {
		t.Fatalf("commit codes %v", got)
	}
	check := func() {
		t.Helper()
		all := h.fetch()
		if all.ErrorCode != 0 || len(all.Offsets) != 2 {
			t.Fatalf("fetch all: %+v", all)
		}
		got := all.Offsets[e0.TopicPartition]
		if got.Offset != 10 || got.LeaderEpoch != 4 || got.Metadata != "meta" || got.CommitTime != h.nowMs.Load() {
			t.Errorf("t-0 = %+v", got)
		}
		if got := all.Offsets[e1.TopicPartition]; got != e1.Committed {
			t.Errorf("t-1 = %+v, want %+v (a caller's commit and expire times are kept)", got, e1.Committed)
		}
		some := h.fetch(TopicPartition{"t", 1}, TopicPartition{"absent", 0})
		if len(some.Offsets) != 1 || some.Offsets[e1.TopicPartition].Offset != 11 {
			t.Errorf("fetch some: %+v", some)
		}
	}
	check()
	h.restart()
	check()
	if s := h.stat(); !s.Exists || s.Count != 2 {
		t.Fatalf("after reload: %+v", s)
	}
	if got := counterValue(h.metrics.writes.WithLabelValues("ok")); got != 1 {
		t.Errorf("writes ok = %v, want 1", got)
	}
}

func TestMetadataTooLarge(t *testing.T) {
	h := newHarness(t, "g", func(c *Config) { c.MaxMetadataBytes = 4 })
	tooLarge := kerr.OffsetMetadataTooLarge.Code
	// Apache counts UTF-16 units: "éééé" is 8 bytes but 4 units; "🎉🎉🎉" is 6 units.
	in := []Entry{
		{TopicPartition{"t", 0}, Committed{Offset: 1, Metadata: "abcd"}},
		{TopicPartition{"t", 1}, Committed{Offset: 1, Metadata: "abcde"}},
		{TopicPartition{"t", 2}, Committed{Offset: 1, Metadata: "éééé"}},
		{TopicPartition{"t", 3}, Committed{Offset: 1, Metadata: "🎉🎉"}},
		{TopicPartition{"t", 4}, Committed{Offset: 1, Metadata: "🎉🎉🎉"}},
	}
	if got := h.commit(in...); !slices.Equal(got, []int16{0, tooLarge, 0, 0, tooLarge}) {
		t.Fatalf("codes %v", got)
	}
	if f := h.fetch(); len(f.Offsets) != 3 || f.Offsets[TopicPartition{"t", 3}].Metadata != "🎉🎉" {
		t.Fatalf("stored %+v", f.Offsets)
	}

	// When every partition is too large nothing is written (Apache writes no record).
	h2 := newHarness(t, "g2", func(c *Config) { c.MaxMetadataBytes = 4 })
	if got := h2.commit(in[1], in[4]); !slices.Equal(got, []int16{tooLarge, tooLarge}) {
		t.Fatalf("codes %v", got)
	}
	if _, ok := h2.onDisk(); ok || h2.fs.Count(storage.OpCreate) != 0 {
		t.Fatal("a commit with nothing to store wrote a file")
	}
}

// TestWriteFaults fails each step of the durable write in turn: the commit must get a
// retriable error (never a false success), memory must stay as it was, no partial file
// may be visible, and the next commit must succeed.
func TestWriteFaults(t *testing.T) {
	for _, op := range []storage.Op{storage.OpMkdir, storage.OpCreate, storage.OpWrite, storage.OpSync, storage.OpClose, storage.OpRename, storage.OpSyncDir} {
		t.Run(string(op), func(t *testing.T) {
			h := newHarness(t, "g")
			if op != storage.OpMkdir {
				if got := h.commit(entry("t", 0, 1)); !slices.Equal(got, []int16{0}) {
					t.Fatalf("first commit %v", got)
				}
			}
			h.fs.FailNext(op, nil)
			if got := h.commit(entry("t", 0, 2), entry("u", 0, 2)); !slices.Equal(got, codes(2, kerr.NotCoordinator.Code)) {
				t.Fatalf("commit with a failing %s answered %v, want NOT_COORDINATOR", op, got)
			}
			f := h.fetch()
			if op == storage.OpMkdir {
				if len(f.Offsets) != 0 {
					t.Fatalf("memory changed by a failed write: %+v", f.Offsets)
				}
			} else if len(f.Offsets) != 1 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
				t.Fatalf("memory changed by a failed write: %+v", f.Offsets)
			}
			// The file is the old one, whole; or, when only the directory sync failed,
			// the whole new one. Never a mix, never a tmp file left behind.
			s, ok := h.onDisk()
			switch {
			case op == storage.OpMkdir:
				if ok {
					t.Fatal("file exists after a failed first write")
				}
			case op == storage.OpSyncDir:
				if s.offsets[TopicPartition{"t", 0}].Offset != 2 || len(s.offsets) != 2 {
					t.Fatalf("after a failed directory sync the file is %+v", s.offsets)
				}
			default:
				if s.offsets[TopicPartition{"t", 0}].Offset != 1 || len(s.offsets) != 1 {
					t.Fatalf("after a failed %s the file is %+v", op, s.offsets)
				}
			}
			if op != storage.OpMkdir {
				if names := h.dirNames(); !slices.Equal(names, []string{"g.json"}) {
					t.Fatalf("directory holds %q", names)
				}
			}
			if got := counterValue(h.metrics.writes.WithLabelValues("error")); got != 1 {
				t.Errorf("writes error = %v, want 1", got)
			}
			if !strings.Contains(h.logs.String(), `"level":"error"`) || !strings.Contains(h.logs.String(), "offsets_write_failed") {
				t.Errorf("no error logged: %s", h.logs)
			}
			// The next write succeeds and carries everything memory holds.
			if got := h.commit(entry("t", 0, 3)); !slices.Equal(got, []int16{0}) {
				t.Fatalf("commit after the fault %v", got)
			}
			s, _ = h.onDisk()
			if s.offsets[TopicPartition{"t", 0}].Offset != 3 {
				t.Fatalf("file after recovery %+v", s.offsets)
			}
			if op == storage.OpSyncDir {
				// Memory never had u-0 (its commit failed), and the rewrite follows memory.
				if _, ok := s.offsets[TopicPartition{"u", 0}]; ok {
					t.Fatal("a failed commit's partition came back")
				}
			}
		})
	}
}

// TestLeftoverTmpCleanedAtLoad: a write that failed and could not remove its tmp file
// (or a crash mid-write) leaves name.json.tmp; the next load removes it and reads the
// intact file.
func TestLeftoverTmpCleanedAtLoad(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("t", 0, 1))
	h.fs.FailNext(storage.OpSync, nil)
	h.fs.FailNext(storage.OpRemove, nil)
	if got := h.commit(entry("t", 0, 2)); got[0] != kerr.NotCoordinator.Code {
		t.Fatalf("codes %v", got)
	}
	if names := h.dirNames(); !slices.Equal(names, []string{"g.json", "g.json.tmp"}) {
		t.Fatalf("directory holds %q, want the leftover tmp", names)
	}
	h.restart()
	if f := h.fetch(); f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("after reload %+v", f)
	}
	if names := h.dirNames(); !slices.Equal(names, []string{"g.json"}) {
		t.Fatalf("directory holds %q after load", names)
	}
}

// blockFirst makes the first call of op block until release is closed; entered is
// closed when it has started.
func blockFirst(f *storage.FaultFS, op storage.Op) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.Before = func(o storage.Op, _ string) error {
		if o == op {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	}
	return entered, release
}

// TestGroupCommit: commits that queue while a write is in flight are made durable by
// the next single write, and each is answered only after that write.
func TestGroupCommit(t *testing.T) {
	h := newHarness(t, "g")
	entered, release := blockFirst(h.fs, storage.OpSync)
	first := h.commitW(entry("t", 0, 0))
	<-entered
	const n = 50
	waiters := make([]*actor.Waiter, n)
	for i := range waiters {
		waiters[i] = h.commitW(entry("t", int32(i+1), int64(i+1)))
	}
	for i, w := range append([]*actor.Waiter{first}, waiters...) {
		select {
		case v := <-w.C:
			t.Fatalf("commit %d answered %+v before its write", i, v)
		default:
		}
	}
	close(release)
	if got := wait[*CommitResult](t, first).Codes; got[0] != 0 {
		t.Fatalf("first %v", got)
	}
	for i, w := range waiters {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("commit %d: %v", i, got)
		}
		// Answered means on disk.
		s, _ := h.onDisk()
		if s.offsets[TopicPartition{"t", int32(i + 1)}].Offset != int64(i+1) {
			t.Fatalf("commit %d answered before it was on disk", i)
		}
	}
	if got := h.fs.Count(storage.OpSync); got != 2 {
		t.Fatalf("%d file syncs for 51 commits, want 2 (one write in flight, one for the rest)", got)
	}
	if got := counterValue(h.metrics.writes.WithLabelValues("ok")); got != 2 {
		t.Fatalf("writes ok = %v, want 2", got)
	}
}

// TestGroupCommitFailure: a failed batch answers every waiter with the error and keeps
// memory as before the batch.
func TestGroupCommitFailure(t *testing.T) {
	h := newHarness(t, "g")
	// The first write blocks after its fault check for the rename, so the fault armed
	// below hits the batch's rename, not this one's.
	entered, release := blockFirst(h.fs, storage.OpRename)
	first := h.commitW(entry("t", 0, 1))
	<-entered
	var waiters []*actor.Waiter
	for i := range 10 {
		waiters = append(waiters, h.commitW(entry("t", int32(i), 100)))
	}
	h.fs.FailNext(storage.OpRename, nil)
	close(release)
	if got := wait[*CommitResult](t, first).Codes; got[0] != 0 {
		t.Fatalf("first write %v", got)
	}
	for i, w := range waiters {
		if got := wait[*CommitResult](t, w).Codes; got[0] != kerr.NotCoordinator.Code {
			t.Fatalf("commit %d of the failed batch answered %v", i, got)
		}
	}
	f := h.fetch()
	if len(f.Offsets) != 1 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("memory after the failed batch %+v", f.Offsets)
	}
	if s, _ := h.onDisk(); len(s.offsets) != 1 || s.offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("disk after the failed batch %+v", s.offsets)
	}
}

func TestCorruptFile(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":       "not json at all",
		"truncated":     `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t",`,
		"another group": `{"version":1,"group":"other","meta":{},"offsets":[]}`,
		"newer version": `{"version":9,"group":"g"}`,
		"offset -5":     `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":-5,"leader_epoch":-1,"commit_time":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "g")
			path := filepath.Join(h.dir, "g.json")
			must(t, os.MkdirAll(h.dir, 0o755))
			must(t, os.WriteFile(path, []byte(content), 0o644))
			unavailable := kerr.CoordinatorNotAvailable.Code
			if got := h.commit(entry("t", 0, 1), entry("t", 1, 1)); !slices.Equal(got, codes(2, unavailable)) {
				t.Fatalf("commit %v", got)
			}
			if f := h.fetch(); f.ErrorCode != unavailable || len(f.Offsets) != 0 {
				t.Fatalf("fetch %+v", f)
			}
			if s := h.stat(); s.ErrorCode != unavailable {
				t.Fatalf("stat %+v", s)
			}
			for _, mk := range []func(actor.Promise) any{
				func(p actor.Promise) any { return &DeleteAll{Reply: p} },
				func(p actor.Promise) any { return &Delete{Partitions: []TopicPartition{{"t", 0}}, Reply: p} },
				func(p actor.Promise) any { return &DropTopics{Topics: []string{"t"}, Reply: p} },
				func(p actor.Promise) any { return &SaveMeta{Reply: p} },
			} {
				if got := h.result(mk); got != unavailable {
					t.Fatalf("%T answered %d", mk(actor.Promise{}), got)
				}
			}
			if s := wait[*Status](t, h.send(func(p actor.Promise) any {
				return &Expire{Now: time.Now(), Rule: ExpiryRule{Empty: true, Retention: time.Nanosecond}, Reply: p}
			})); s.ErrorCode != unavailable {
				t.Fatalf("expire %+v", s)
			}
			// The file is kept for the operator, untouched.
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Fatalf("file changed to %q", b)
			}
			if n := strings.Count(h.logs.String(), "offsets_file_unusable_group_unavailable_until_repaired"); n != 1 {
				t.Fatalf("logged %d times, want once:\n%s", n, h.logs)
			}
			if got := counterValue(h.metrics.loadFailures.WithLabelValues("corrupt")); got != 1 {
				t.Fatalf("load failures = %v", got)
			}
			// The operator repairs the file; the group serves again after RetryLoadAfter.
			good, _ := encodeFile("g", sampleState())
			must(t, os.WriteFile(path, good, 0o644))
			if f := h.fetch(); f.ErrorCode != unavailable {
				t.Fatalf("reloaded before RetryLoadAfter: %+v", f)
			}
			h.advance(5 * time.Second)
			if f := h.fetch(); f.ErrorCode != 0 || len(f.Offsets) != 4 {
				t.Fatalf("after repair %+v", f)
			}
			if !strings.Contains(h.logs.String(), "offsets_file_loaded_after_repair") {
				t.Fatal("repair not logged")
			}
		})
	}
}

func TestUnreadableFile(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("t", 0, 1))
	h.restart()
	h.fs.FailNext(storage.OpRead, nil)
	if f := h.fetch(); f.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("fetch with a failing read %+v", f)
	}
	if got := counterValue(h.metrics.loadFailures.WithLabelValues("unreadable")); got != 1 {
		t.Fatalf("load failures = %v", got)
	}
	h.advance(time.Minute)
	if f := h.fetch(); f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("after the read works again %+v", f)
	}
}

func TestDeleteDropMetaAndDeleteAll(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("a", 0, 1), entry("a", 1, 1), entry("b", 0, 1), entry("c", 0, 1))
	if c := h.result(func(p actor.Promise) any {
		return &Delete{Partitions: []TopicPartition{{"a", 0}, {"absent", 0}}, Reply: p}
	}); c != 0 {
		t.Fatal(c)
	}
	if c := h.result(func(p actor.Promise) any { return &DropTopics{Topics: []string{"b", "zz"}, Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	meta := GroupMeta{ProtocolType: "consumer", Generation: 5, EmptySince: 77}
	if c := h.result(func(p actor.Promise) any { return &SaveMeta{Meta: meta, Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	h.restart()
	f := h.fetch()
	if len(f.Offsets) != 2 || f.Offsets[TopicPartition{"a", 1}].Offset != 1 || f.Offsets[TopicPartition{"c", 0}].Offset != 1 {
		t.Fatalf("after delete and drop: %+v", f.Offsets)
	}
	if s := h.stat(); !s.Exists || !reflect.DeepEqual(s.Meta, meta) || s.Count != 2 {
		t.Fatalf("stat %+v", s)
	}
	// A SaveMeta without a reply rides on the next write.
	meta2 := GroupMeta{ProtocolType: "consumer", Generation: 6}
	h.sys.Send(h.pid, &SaveMeta{Meta: meta2})
	syncs := h.fs.Count(storage.OpSync)
	if s := h.stat(); !reflect.DeepEqual(s.Meta, meta2) || h.fs.Count(storage.OpSync) != syncs {
		t.Fatalf("SaveMeta without reply: %+v, wrote %d", s, h.fs.Count(storage.OpSync)-syncs)
	}
	h.commit(entry("a", 1, 2))
	if s, _ := h.onDisk(); !reflect.DeepEqual(s.meta, meta2) {
		t.Fatalf("meta on disk %+v", s.meta)
	}
	if c := h.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	if _, ok := h.onDisk(); ok {
		t.Fatal("file kept after DeleteAll")
	}
	if s := h.stat(); s.Exists || s.Count != 0 || !reflect.DeepEqual(s.Meta, GroupMeta{}) {
		t.Fatalf("stat after DeleteAll %+v", s)
	}
	h.restart()
	if s := h.stat(); s.Exists {
		t.Fatalf("stat after DeleteAll and reload %+v", s)
	}
	// A failed removal keeps the group.
	h.commit(entry("a", 0, 1))
	h.fs.FailNext(storage.OpRemove, nil)
	if c := h.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != kerr.NotCoordinator.Code {
		t.Fatalf("DeleteAll with a failing remove: %d", c)
	}
	if s := h.stat(); !s.Exists || s.Count != 1 {
		t.Fatalf("stat after a failed DeleteAll %+v", s)
	}
}

// TestExpiry runs retention end to end with a short retention: a simple group's offsets
// expire one by one by commit time, and the file goes with the last one.
func TestExpiry(t *testing.T) {
	h := newHarness(t, "g")
	retention := time.Minute
	expire := func() *Status {
		now := time.UnixMilli(h.nowMs.Load())
		return wait[*Status](t, h.send(func(p actor.Promise) any {
			return &Expire{Now: now, Rule: ExpiryRule{Empty: true, Retention: retention}, Reply: p}
		}))
	}
	h.commit(entry("t", 0, 1))
	h.advance(30 * time.Second)
	h.commit(entry("t", 1, 1))
	h.advance(29 * time.Second)
	if s := expire(); s.Count != 2 || !s.Exists {
		t.Fatalf("before retention %+v", s)
	}
	h.advance(time.Second)
	if s := expire(); s.Count != 1 {
		t.Fatalf("after the first offset's retention %+v", s)
	}
	if s, _ := h.onDisk(); len(s.offsets) != 1 {
		t.Fatalf("on disk %+v", s.offsets)
	}
	h.advance(30 * time.Second)
	if s := expire(); s.Count != 0 || s.Exists {
		t.Fatalf("after the last offset's retention %+v", s)
	}
	if _, ok := h.onDisk(); ok {
		t.Fatal("an empty group's file outlived its last offset")
	}
	if got := counterValue(h.metrics.expired); got != 2 {
		t.Fatalf("expired metric %v", got)
	}

	// A Stable consumer group keeps its subscribed topics and its file.
	h2 := newHarness(t, "c")
	h2.result(func(p actor.Promise) any {
		return &SaveMeta{Meta: GroupMeta{ProtocolType: "consumer", Generation: 1}, Reply: p}
	})
	h2.commit(entry("sub", 0, 1), entry("gone", 0, 1))
	h2.advance(time.Hour)
	s := wait[*Status](t, h2.send(func(p actor.Promise) any {
		return &Expire{Now: time.UnixMilli(h2.nowMs.Load()), Reply: p, Rule: ExpiryRule{
			StableConsumer: true, Subscribed: map[string]bool{"sub": true}, Retention: retention}}
	}))
	if s.Count != 1 || !s.Exists {
		t.Fatalf("stable consumer group after expiry %+v", s)
	}
}

// TestPanicAnswersWaiters: a panic during a write restarts the actor; every queued
// request is answered with a retriable code, and the next incarnation reloads the file.
func TestPanicAnswersWaiters(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("t", 0, 1))
	var once sync.Once
	h.fs.Before = func(op storage.Op, _ string) error {
		if op == storage.OpWrite {
			once.Do(func() { panic("disk driver bug") })
		}
		return nil
	}
	if got := h.commit(entry("t", 0, 2)); got[0] != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("commit during a panicking write %v", got)
	}
	if f := h.fetch(); f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("after restart %+v", f)
	}
	if got := h.commit(entry("t", 0, 3)); got[0] != 0 {
		t.Fatalf("commit after restart %v", got)
	}

	// A panic in a request's own handler (here: the load) answers that request.
	h2 := newHarness(t, "g2")
	var once2 sync.Once
	h2.fs.Before = func(op storage.Op, _ string) error {
		if op == storage.OpRead {
			once2.Do(func() { panic("read bug") })
		}
		return nil
	}
	if f := h2.fetch(); f.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("fetch during a panicking load %+v", f)
	}
	if f := h2.fetch(); f.ErrorCode != 0 {
		t.Fatalf("fetch after restart %+v", f)
	}
}

// TestStopFlushesQueue: requests queued when the actor is stopped are written and
// answered by Stopping, not dropped.
func TestStopFlushesQueue(t *testing.T) {
	h := newHarness(t, "g")
	entered, release := blockFirst(h.fs, storage.OpSync)
	first := h.commitW(entry("t", 0, 1))
	<-entered
	second := h.commitW(entry("t", 1, 1))
	// Poison is behind the second commit, and the second commit's flushNow will be
	// behind the poison: the second commit is queued when Stopping runs.
	stopped := make(chan error, 1)
	go func() { stopped <- h.sys.Poison(h.pid, waitFor) }()
	close(release)
	for _, w := range []*actor.Waiter{first, second} {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("codes %v", got)
		}
	}
	must(t, <-stopped)
	if s, _ := h.onDisk(); len(s.offsets) != 2 {
		t.Fatalf("on disk %+v", s.offsets)
	}
	if got := h.fs.Count(storage.OpSync); got != 2 {
		t.Fatalf("%d syncs, want 2", got)
	}
}

// TestFlushWritesQueue: a Flush sent behind changes is answered only once they are on
// disk; a change queued behind a write in flight is written by the Flush itself.
func TestFlushWritesQueue(t *testing.T) {
	h := newHarness(t, "g")
	entered, release := blockFirst(h.fs, storage.OpSync)
	first := h.commitW(entry("t", 0, 1))
	<-entered
	second := h.commitW(entry("t", 1, 1))
	meta := h.send(func(p actor.Promise) any { return &SaveMeta{Meta: GroupMeta{ProtocolType: "consumer"}, Reply: p} })
	flushed := h.send(func(p actor.Promise) any { return &Flush{Reply: p} })
	close(release)
	if r := wait[*Result](t, flushed); r.ErrorCode != 0 {
		t.Fatalf("flush %d", r.ErrorCode)
	}
	if s, _ := h.onDisk(); len(s.offsets) != 2 || s.meta.ProtocolType != "consumer" {
		t.Fatalf("on disk after the flush: %+v", s)
	}
	for _, w := range []*actor.Waiter{first, second} {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("codes %v", got)
		}
	}
	if r := wait[*Result](t, meta); r.ErrorCode != 0 {
		t.Fatalf("meta %d", r.ErrorCode)
	}
}

// TestEveryNameCaseThroughTheActor: each hard group id gets its own file, reloads, and is
// listed back by ListGroupIDs.
func TestEveryNameCaseThroughTheActor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "offsets")
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	for round := range 2 {
		for i, id := range nameCases {
			pid := sys.Spawn(Props(Config{Group: id, Dir: dir, Log: zerolog.Nop()}))
			w := sys.NewWaiter()
			if round == 0 {
				sys.Send(pid, &Commit{Entries: []Entry{entry("t", 0, int64(i))}, Reply: w.Promise})
				if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
					t.Fatalf("commit for %q: %v", id, got)
				}
			} else {
				sys.Send(pid, &Fetch{Reply: w.Promise})
				if f := wait[*FetchResult](t, w); f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 0}].Offset != int64(i) {
					t.Fatalf("group %q read back %+v", id, f)
				}
			}
			must(t, sys.Poison(pid, waitFor))
		}
	}
	ids, err := ListGroupIDs(storage.OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(nameCases)
	slices.Sort(want)
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("listed %q\nwant   %q", ids, want)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// An offset or leader epoch below -1 is refused per partition (OFFSET_OUT_OF_RANGE): the
// file reader treats such a value as damage, so it is never written. -1 ("none") is kept,
// as Apache keeps it.
func TestCommitRefusesOffsetsBelowMinusOne(t *testing.T) {
	h := newHarness(t, "g")
	bad := kerr.OffsetOutOfRange.Code
	in := []Entry{
		entry("t", 0, 5),
		entry("t", 1, -5),
		{TopicPartition{"t", 2}, Committed{Offset: 1, LeaderEpoch: -2}},
		entry("t", 3, -1),
	}
	if got := h.commit(in...); !slices.Equal(got, []int16{0, bad, bad, 0}) {
		t.Fatalf("codes %v", got)
	}
	h.restart()
	f := h.fetch()
	if len(f.Offsets) != 2 || f.Offsets[TopicPartition{"t", 0}].Offset != 5 || f.Offsets[TopicPartition{"t", 3}].Offset != -1 {
		t.Fatalf("reloaded %+v (error %d)", f.Offsets, f.ErrorCode)
	}
}
