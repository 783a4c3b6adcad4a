package offsets

import (
	"bytes"
	"fmt"
	"maps"
	"math"
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
	"kaas/actors/journal"
	"kaas/internal/testwait"
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

// harness is one actor system with one group's offsets actor on a FaultFS over a temp
// dir; journalHarness (journal_test.go) adds the journal actor it runs on.
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

// newHarness starts group's offsets actor on the broker's journal, with a checkpoint
// interval of an hour: the group file is written only when the actor stops or restarts,
// or is sent Flush.
func newHarness(t *testing.T, group string, tune ...func(*Config)) *journalHarness {
	t.Helper()
	return startHarness(t, group, ckptNever, nil, tune)
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

// TestWriteFaults fails each step of a journal append in turn (the segment's directory,
// its file, the directory entry, the write, the fdatasync): the commit must get a
// retriable error (never a false success), memory must stay as it was, a restart must
// not bring the failed commit back, and the next commit must succeed.
func TestWriteFaults(t *testing.T) {
	for _, op := range []storage.Op{storage.OpMkdir, storage.OpCreate, storage.OpSyncDir, storage.OpWrite, storage.OpSync} {
		t.Run(string(op), func(t *testing.T) {
			h := newHarness(t, "g")
			// The steps that make a segment fail the group's first commit; the write and
			// the fdatasync fail its second.
			opening := op == storage.OpMkdir || op == storage.OpCreate || op == storage.OpSyncDir
			before := map[TopicPartition]int64{}
			if !opening {
				if got := h.commit(entry("t", 0, 1)); !slices.Equal(got, []int16{0}) {
					t.Fatalf("first commit %v", got)
				}
				before[TopicPartition{"t", 0}] = 1
			}
			h.failOn(op, func(path string) bool {
				return strings.HasPrefix(path, filepath.Join(h.root, "__cluster")) && !strings.Contains(filepath.Base(path), journal.SpareMarker)
			})
			if got := h.commit(entry("t", 0, 2), entry("u", 0, 2)); !slices.Equal(got, codes(2, kerr.NotCoordinator.Code)) {
				t.Fatalf("commit with a failing %s answered %v, want NOT_COORDINATOR", op, got)
			}
			same := func(what string, got map[TopicPartition]Committed, want map[TopicPartition]int64) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %+v, want %v", what, got, want)
				}
				for tp, o := range want {
					if got[tp].Offset != o {
						t.Fatalf("%s: %v = %+v, want %d", what, tp, got[tp], o)
					}
				}
			}
			same("memory after the failed write", h.fetch().Offsets, before)
			if got := counterValue(h.metrics.journalWrites.WithLabelValues("error")); got != 1 {
				t.Errorf("journal writes error = %v, want 1", got)
			}
			if !strings.Contains(h.logs.String(), `"level":"error"`) || !strings.Contains(h.logs.String(), "offsets_journal_write_failed") {
				t.Errorf("no error logged: %s", h.logs)
			}
			h.restart()
			same("after a restart", h.fetch().Offsets, before)
			if s, ok := h.onDisk(); ok != !opening {
				t.Fatalf("group file exists %v after a restart (%+v)", ok, s.offsets)
			}
			// The next commit succeeds, and is what a crash would replay.
			if got := h.commit(entry("t", 0, 3)); !slices.Equal(got, []int16{0}) {
				t.Fatalf("commit after the fault %v", got)
			}
			img := h.crashImage()
			_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
			must(t, err)
			s, _ := groupFile(t, Dir(img), "g")
			same("replayed after the recovery", s.offsets, map[TopicPartition]int64{{"t", 0}: 3})
		})
	}
}

// TestCheckpointFaults fails each step of the group file's rewrite (a checkpoint, here
// made by Flush) in turn: the commits it holds stay acknowledged and served, the file is
// the old one whole (or, when only the directory sync failed, the whole new one), no
// tmp file is left, the journal keeps the group's records, and the next checkpoint
// writes everything.
func TestCheckpointFaults(t *testing.T) {
	for _, op := range []storage.Op{storage.OpMkdir, storage.OpCreate, storage.OpWrite, storage.OpSync, storage.OpClose, storage.OpRename, storage.OpSyncDir} {
		t.Run(string(op), func(t *testing.T) {
			h := newHarness(t, "g")
			first := op == storage.OpMkdir // made once, by the first checkpoint
			if !first {
				h.commit(entry("t", 0, 1))
				h.flushTo(h.pid)
			}
			if got := h.commit(entry("t", 0, 2), entry("u", 0, 2)); !codesOK(got) {
				t.Fatalf("commit %v", got)
			}
			h.failOn(op, func(path string) bool { return strings.HasPrefix(path, h.dir) })
			h.flushTo(h.pid)
			if !strings.Contains(h.logs.String(), "offsets_checkpoint_failed") {
				t.Fatalf("failed checkpoint not logged:\n%s", h.logs)
			}
			if got := counterValue(h.metrics.writes.WithLabelValues("error")); got != 1 {
				t.Errorf("file writes error = %v, want 1", got)
			}
			if f := h.fetch(); len(f.Offsets) != 2 || f.Offsets[TopicPartition{"t", 0}].Offset != 2 {
				t.Fatalf("served after the failed checkpoint: %+v", f.Offsets)
			}
			s, ok := h.onDisk()
			switch {
			case first:
				if ok {
					t.Fatal("file exists after a failed first checkpoint")
				}
			case op == storage.OpSyncDir:
				if len(s.offsets) != 2 || s.offsets[TopicPartition{"t", 0}].Offset != 2 {
					t.Fatalf("after a failed directory sync the file is %+v", s.offsets)
				}
			default:
				if len(s.offsets) != 1 || s.offsets[TopicPartition{"t", 0}].Offset != 1 {
					t.Fatalf("after a failed %s the file is %+v", op, s.offsets)
				}
			}
			if !first {
				if names := h.dirNames(); !slices.Equal(names, []string{"g.json"}) {
					t.Fatalf("directory holds %q", names)
				}
			}
			if st := h.jstat(); !pinned(st) {
				t.Fatalf("the journal let the group's records go after a failed checkpoint: %+v", st)
			}
			h.flushTo(h.pid)
			if s, _ := h.onDisk(); len(s.offsets) != 2 || s.offsets[TopicPartition{"u", 0}].Offset != 2 {
				t.Fatalf("file after the next checkpoint %+v", s.offsets)
			}
			if st := h.jstat(); pinned(st) {
				t.Fatalf("the journal still pins the group after its checkpoint: %+v", st)
			}
		})
	}
}

// TestLeftoverTmpCleanedAtLoad: a crash in the middle of a checkpoint leaves
// name.json.tmp beside the intact file; the next load removes it and reads the file.
func TestLeftoverTmpCleanedAtLoad(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("t", 0, 1))
	h.restart()
	must(t, os.WriteFile(filepath.Join(h.dir, "g.json"+tmpSuffix), []byte(`{"version":1,"gro`), 0o600))
	h.restart()
	if f := h.fetch(); f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("after reload %+v", f)
	}
	if names := h.dirNames(); !slices.Equal(names, []string{"g.json"}) {
		t.Fatalf("directory holds %q after load", names)
	}
}

// TestGroupCommit: commits that queue while the group's batch is in the journal's
// fsync are made durable by the next batches (at most two: one more may be in the
// journal's mailbox already), and each is answered only after the fsync that holds it.
func TestGroupCommit(t *testing.T) {
	h := newHarness(t, "g")
	hk, gates := h.hookSegments(nil, 1)
	first := h.commitW(entry("t", 0, 0))
	<-gates[0].entered
	const n = 50
	waiters := make([]*actor.Waiter, n)
	for i := range waiters {
		waiters[i] = h.commitW(entry("t", int32(i+1), int64(i+1)))
	}
	h.fetch() // the commits are in the journal's mailbox or queued in the actor
	for i, w := range append([]*actor.Waiter{first}, waiters...) {
		if v, done := answered(w); done {
			t.Fatalf("commit %d answered %+v before its fsync", i, v)
		}
	}
	gates[0].open()
	if got := wait[*CommitResult](t, first).Codes; got[0] != 0 {
		t.Fatalf("first %v", got)
	}
	for i, w := range waiters {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("commit %d: %v", i, got)
		}
	}
	if got := hk.syncs.Load(); got > 3 {
		t.Fatalf("%d segment fsyncs for 51 commits, want at most 3 (one in flight, two for the rest)", got)
	}
	if got := counterValue(h.metrics.journalWrites.WithLabelValues("ok")); got != float64(hk.syncs.Load()) {
		t.Fatalf("journal writes ok = %v, %d fsyncs", got, hk.syncs.Load())
	}
	// Answered means durable: a crash now replays every commit.
	img := h.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	s, _ := groupFile(t, Dir(img), "g")
	for i := range n + 1 {
		if s.offsets[TopicPartition{"t", int32(i)}].Offset != int64(i) {
			t.Fatalf("commit %d answered but not replayed after a crash: %+v", i, s.offsets)
		}
	}
}

// TestGroupCommitFailure: a failed journal write answers every waiter of its batches
// with the error and keeps memory as before them; a restart does not bring them back.
func TestGroupCommitFailure(t *testing.T) {
	h := newHarness(t, "g")
	var failing atomic.Bool
	_, gates := h.hookSegments(func(op storage.Op, path string) error {
		if op == storage.OpWrite && strings.HasSuffix(path, journal.SegmentSuffix) && failing.Load() {
			return storage.ErrInjected
		}
		return nil
	}, 1)
	first := h.commitW(entry("t", 0, 1))
	<-gates[0].entered
	var waiters []*actor.Waiter
	for i := range 10 {
		waiters = append(waiters, h.commitW(entry("t", int32(i), 100)))
	}
	h.fetch() // the commits are in the journal's mailbox or queued in the actor
	failing.Store(true)
	gates[0].open()
	if got := wait[*CommitResult](t, first).Codes; got[0] != 0 {
		t.Fatalf("first write %v", got)
	}
	for i, w := range waiters {
		if got := wait[*CommitResult](t, w).Codes; got[0] != kerr.NotCoordinator.Code {
			t.Fatalf("commit %d of the failed batches answered %v", i, got)
		}
	}
	failing.Store(false)
	f := h.fetch()
	if len(f.Offsets) != 1 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("memory after the failed batches %+v", f.Offsets)
	}
	h.restart()
	if s, _ := h.onDisk(); len(s.offsets) != 1 || s.offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("disk after the failed batches %+v", s.offsets)
	}
	if f := h.fetch(); len(f.Offsets) != 1 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Fatalf("served after a restart %+v", f.Offsets)
	}
}

func TestCorruptFile(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":       "not json at all",
		"truncated":     `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t",`,
		"another group": `{"version":1,"group":"other","meta":{},"offsets":[]}`,
		"newer version": `{"version":9,"group":"g"}`,
		"offset 2^63":   `{"version":1,"group":"g","meta":{},"offsets":[{"topic":"t","partition":0,"offset":9223372036854775808,"leader_epoch":-1,"commit_time":1}]}`,
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
	// A SaveMeta without a reply is journaled like any change: served once durable,
	// in the file at the next checkpoint.
	meta2 := GroupMeta{ProtocolType: "consumer", Generation: 6}
	h.sys.Send(h.pid, &SaveMeta{Meta: meta2})
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the reply-less SaveMeta served", func() bool { return reflect.DeepEqual(h.stat().Meta, meta2) }))
	h.commit(entry("a", 1, 2))
	h.flushTo(h.pid)
	if s, _ := h.onDisk(); !reflect.DeepEqual(s.meta, meta2) {
		t.Fatalf("meta on disk %+v", s.meta)
	}
	if c := h.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	h.flushTo(h.pid)
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
	// A DeleteAll the journal failed to write keeps the group, also across a restart.
	h.commit(entry("a", 0, 1))
	h.failOn(storage.OpWrite, func(path string) bool { return strings.HasSuffix(path, journal.SegmentSuffix) })
	if c := h.result(func(p actor.Promise) any { return &DeleteAll{Reply: p} }); c != kerr.NotCoordinator.Code {
		t.Fatalf("DeleteAll with a failing journal write: %d", c)
	}
	if s := h.stat(); !s.Exists || s.Count != 1 {
		t.Fatalf("stat after a failed DeleteAll %+v", s)
	}
	h.restart()
	if s := h.stat(); !s.Exists || s.Count != 1 {
		t.Fatalf("stat after a failed DeleteAll and a restart %+v", s)
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
	h.flushTo(h.pid)
	if s, _ := h.onDisk(); len(s.offsets) != 1 {
		t.Fatalf("on disk %+v", s.offsets)
	}
	h.advance(30 * time.Second)
	if s := expire(); s.Count != 0 || s.Exists {
		t.Fatalf("after the last offset's retention %+v", s)
	}
	h.flushTo(h.pid)
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

// TestPanicAnswersWaiters: a panic in the actor's Receive (here: as it takes a
// checkpoint tick) restarts it with one batch in the journal's fsync, one in the
// journal's mailbox and a commit behind them. The batches the journal makes durable are
// answered success, a commit still queued in the actor a retriable code, and the next
// incarnation serves what the journal holds.
func TestPanicAnswersWaiters(t *testing.T) {
	h := newHarness(t, "g")
	h.commit(entry("t", 0, 1))
	panicked := make(chan struct{})
	defer actor.SetFaults(&tickPanic{panicked: panicked})()
	_, gates := h.hookSegments(nil, 1)
	inSync := h.commitW(entry("t", 0, 2))
	<-gates[0].entered
	inMailbox := h.commitW(entry("t", 1, 2))
	// Two Fetches: by the second answer the second batch has gone to the journal.
	h.fetch()
	h.fetch()
	queued := h.commitW(entry("t", 2, 2))
	h.sys.Send(h.pid, &checkpointTick{})
	select {
	case <-panicked:
	case <-time.After(waitFor):
		t.Fatal("the checkpoint did not run")
	}
	gates[0].open()
	for _, w := range []*actor.Waiter{inSync, inMailbox} {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("commit the journal holds answered %v after the panic", got)
		}
	}
	// The third commit was queued in the actor, or (with up to maxInflight batches in
	// flight) already sent to the journal when the panic came: a retriable code that
	// changes nothing, or success and the offset served, never success and lost.
	want := 2
	switch got := wait[*CommitResult](t, queued).Codes; got[0] {
	case kerr.CoordinatorNotAvailable.Code:
	case 0:
		want = 3
	default:
		t.Fatalf("commit queued during the panic answered %v", got)
	}
	f := h.fetch()
	if len(f.Offsets) != want || f.Offsets[TopicPartition{"t", 0}].Offset != 2 || f.Offsets[TopicPartition{"t", 1}].Offset != 2 {
		t.Fatalf("after restart %+v, want %d partitions", f, want)
	}
	if want == 3 && f.Offsets[TopicPartition{"t", 2}].Offset != 2 {
		t.Fatalf("acknowledged commit lost after restart %+v", f)
	}
	if got := h.commit(entry("t", 0, 3)); got[0] != 0 {
		t.Fatalf("commit after restart %v", got)
	}

	// A panic in a request's own handler (here: the load, whose job's panic is raised
	// again in the turn that takes its outcome) answers that request.
	h2 := newHarness(t, "g2")
	var once2 sync.Once
	h2.fs.SetBefore(func(op storage.Op, _ string) error {
		if op == storage.OpRead {
			once2.Do(func() { panic("read bug") })
		}
		return nil
	})
	if f := h2.fetch(); f.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("fetch during a panicking load %+v", f)
	}
	if f := h2.fetch(); f.ErrorCode != 0 {
		t.Fatalf("fetch after restart %+v", f)
	}
}

// TestStopFlushesQueue: requests queued when the actor is stopped are journaled and
// answered by Stopping, not dropped, and the file holds them after the stop.
func TestStopFlushesQueue(t *testing.T) {
	h := newHarness(t, "g")
	hk, gates := h.hookSegments(nil, 1)
	first := h.commitW(entry("t", 0, 1))
	<-gates[0].entered
	second := h.commitW(entry("t", 1, 1))
	// Poison is behind the second commit, and the second commit's flushNow may be
	// behind the poison: the second commit is in flight or queued when Stopping runs.
	stopped := make(chan error, 1)
	go func() { stopped <- h.sys.Poison(h.pid, waitFor) }()
	gates[0].open()
	for _, w := range []*actor.Waiter{first, second} {
		if got := wait[*CommitResult](t, w).Codes; got[0] != 0 {
			t.Fatalf("codes %v", got)
		}
	}
	must(t, <-stopped)
	if s, _ := h.onDisk(); len(s.offsets) != 2 {
		t.Fatalf("on disk %+v", s.offsets)
	}
	if got := hk.syncs.Load(); got != 2 {
		t.Fatalf("%d segment fsyncs, want 2", got)
	}
}

// TestFlushWritesQueue: a Flush sent behind changes is answered only once they are in
// the journal and the file; a change queued behind a batch in flight is journaled by the
// Flush itself.
func TestFlushWritesQueue(t *testing.T) {
	h := newHarness(t, "g")
	_, gates := h.hookSegments(nil, 1)
	first := h.commitW(entry("t", 0, 1))
	<-gates[0].entered
	second := h.commitW(entry("t", 1, 1))
	meta := h.send(func(p actor.Promise) any { return &SaveMeta{Meta: GroupMeta{ProtocolType: "consumer"}, Reply: p} })
	flushed := h.send(func(p actor.Promise) any { return &Flush{Reply: p} })
	gates[0].open()
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
	h := newHarness(t, "g")
	sys, dir := h.sys, h.dir
	for round := range 2 {
		for i, id := range nameCases {
			cfg := h.cfg
			cfg.Group = id
			pid := sys.Spawn(Props(cfg))
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

// Every int64 offset and int32 leader epoch a client commits is kept as sent, as Apache
// keeps it (its OffsetCommit has no range check on either): kafkajs's resetOffsets
// commits -2, its "earliest", and its consumers resolve it on their next fetch. The
// values come back from a fetch, from the journal's replay after a crash, from the file
// a stop checkpoints, and from a fresh incarnation's load of that file.
func TestCommitKeepsEveryOffset(t *testing.T) {
	h := newHarness(t, "g")
	in := []Entry{
		entry("t", 0, -2),
		entry("t", 1, -1),
		entry("t", 2, math.MinInt64),
		entry("t", 3, math.MaxInt64),
		entry("t", 4, -1000),
		{TopicPartition{"t", 5}, Committed{Offset: 7, LeaderEpoch: -5}},
		{TopicPartition{"t", 6}, Committed{Offset: -2, LeaderEpoch: math.MinInt32}},
		{TopicPartition{"t", 7}, Committed{Offset: 0, LeaderEpoch: math.MaxInt32}},
	}
	if got := h.commit(in...); !slices.Equal(got, codes(len(in), 0)) {
		t.Fatalf("codes %v, want all 0", got)
	}
	want := map[TopicPartition]Committed{}
	for _, e := range in {
		e.CommitTime = h.nowMs.Load()
		want[e.TopicPartition] = e.Committed
	}
	check := func(what string, got map[TopicPartition]Committed) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Fatalf("%s: %+v\nwant %+v", what, got, want)
		}
	}
	f := h.fetch()
	if f.ErrorCode != 0 {
		t.Fatalf("fetch: error %d", f.ErrorCode)
	}
	check("fetch", f.Offsets)

	// A crash now: nothing but the journal holds the commit.
	img := h.crashImage()
	if _, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop()); err != nil {
		t.Fatalf("replay: %v", err)
	}
	s, exists := groupFile(t, Dir(img), "g")
	if !exists {
		t.Fatal("no group file after the replay")
	}
	check("replayed file", s.offsets)

	// A stop checkpoints the file; the next incarnation loads it.
	h.restart()
	s, exists = h.onDisk()
	if !exists {
		t.Fatal("no group file after the stop")
	}
	check("checkpointed file", s.offsets)
	f = h.fetch()
	if f.ErrorCode != 0 {
		t.Fatalf("fetch after reload: error %d", f.ErrorCode)
	}
	check("fetch after reload", f.Offsets)
}

// An offsets actor has no way to make a change durable but the journal: a Config
// without one is refused when the actor is made, not at its first commit.
func TestPropsWithoutJournalPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Journal") {
			t.Fatalf("Props without a journal: recovered %v, want a panic naming Config.Journal", r)
		}
	}()
	Props(Config{Group: "g", Dir: t.TempDir()})
}

// holdReads holds the first read of path from now on until release is closed, and
// reports it on held.
func holdReads(h *harness, path string) (held <-chan struct{}, release chan struct{}) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.fs.SetBefore(func(op storage.Op, p string) error {
		if op == storage.OpRead && p == path {
			first := false
			once.Do(func() { first = true })
			if first {
				close(in)
				<-out
			}
		}
		return nil
	})
	return in, out
}

// The group file is read by a load job, off the actor's turn: while a read hangs (a
// slow or stuck disk), the actor goes on taking messages, and the request waiting for
// the load is told to retry (COORDINATOR_LOAD_IN_PROGRESS) after ClaimWait instead of
// waiting for the disk. Once the read returns, the file is served. (The read was done in
// the actor's turn: nothing was answered until the disk came back.)
func TestHeldFileReadLeavesTheActorAnswering(t *testing.T) {
	h := newHarness(t, "g", func(c *Config) { c.ClaimWait = 20 * time.Millisecond })
	h.commit(entry("t", 0, 5))
	h.restart() // the next incarnation reads the file
	held, release := holdReads(h.harness, filepath.Join(h.dir, FileName("g")))
	w := h.send(func(p actor.Promise) any { return &Fetch{Reply: p} })
	<-held
	if f := wait[*FetchResult](t, w); f.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("fetch while the file read hangs: %+v, want COORDINATOR_LOAD_IN_PROGRESS", f)
	}
	close(release)
	if f := h.fetch(); f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 0}].Offset != 5 {
		t.Fatalf("fetch once the read returned: %+v", f)
	}
}

// In a cluster a checkpoint reads the file's epoch before it writes (another broker may
// have taken the group over). That read, too, is the checkpoint job's: while it hangs, a
// commit is journaled and answered. (The read was done in the actor's turn, so a Flush or
// a checkpoint tick held every commit of the group behind the disk.)
func TestHeldEpochReadLeavesCommitsAnswered(t *testing.T) {
	j := newJournalHarness(t, "x", ckptNever)
	pid, _ := gatedActor(j, "g")
	if got := j.commitTo(pid, entry("t", 0, 1)); !codesOK(got) {
		t.Fatalf("commit: %v", got)
	}
	held, release := holdReads(j.harness, filepath.Join(j.dir, FileName("g")))
	flushed := j.sendTo(pid, func(p actor.Promise) any { return &Flush{Reply: p} })
	<-held
	if got := j.commitTo(pid, entry("t", 1, 2)); !codesOK(got) {
		t.Fatalf("commit while the checkpoint's read hangs: %v", got)
	}
	close(release)
	if r := wait[*Result](t, flushed); r.ErrorCode != 0 {
		t.Fatalf("flush: %+v", r)
	}
	j.flushTo(pid)
	if s, ok := groupFile(t, j.dir, "g"); !ok || s.offsets[TopicPartition{"t", 1}].Offset != 2 {
		t.Fatalf("file %v with %+v, want both commits", ok, s.offsets)
	}
	_ = j.sys.Poison(pid, waitFor)
}

// tickPanic makes an offsets actor's Receive panic once, as it takes its first
// checkpoint tick, and closes panicked then (actor.Faults).
type tickPanic struct {
	once     sync.Once
	panicked chan struct{}
}

func (p *tickPanic) Receive(_ actor.Actor, msg any) bool {
	if _, ok := msg.(*checkpointTick); !ok {
		return false
	}
	fire := false
	p.once.Do(func() {
		close(p.panicked)
		fire = true
	})
	return fire
}

func (p *tickPanic) Timer(_ any, d time.Duration) (time.Duration, bool) { return d, false }

// TestFiredCheckpointTimerIsDropped: once the checkpoint timer has fired, the actor
// keeps nothing of it (its cancel held the timer and its message for as long as the
// group stayed idle: about 200 bytes per live group).
func TestFiredCheckpointTimerIsDropped(t *testing.T) {
	cfg := Config{}.withDefaults()
	a := newOffsetsActor(&cfg, "g", nil)
	a.ckptScheduled, a.ckptCancel = true, func() {}
	a.onCheckpointTick(nil) // nothing journaled past the file: no checkpoint to start
	if a.ckptScheduled || a.ckptCancel != nil {
		t.Fatalf("after the tick: scheduled %v, cancel kept %v", a.ckptScheduled, a.ckptCancel != nil)
	}
}
