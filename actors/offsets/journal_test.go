package offsets

import (
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
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/internal/diskimage"
	"kaas/internal/testwait"
	"kaas/storage"
)

// Checkpoint intervals of the journal tests: short, so a test polls for the background
// checkpoint instead of sleeping; long, so the group file is written only by a stop, a
// restart or a Flush.
const (
	ckptSoon  = 20 * time.Millisecond
	ckptNever = time.Hour
)

// journalHarness is the harness of the actor tests: offsets actors on the broker's
// journal actor, wired as the broker wires them, on one FaultFS and actor system over a
// temp data dir. h.pid is the group's actor; spawn adds more groups.
type journalHarness struct {
	*harness
	root string // data.dir
	jdir string
	jcfg journal.Config
	jpid *actor.PID

	mu     sync.Mutex
	groups []*actor.PID // actors spawned by spawn, stopped before the journal
}

// newJournalHarness starts a harness whose group files are checkpointed every interval
// (ckptSoon, ckptNever).
func newJournalHarness(t *testing.T, group string, interval time.Duration, tune ...func(*journal.Config)) *journalHarness {
	t.Helper()
	return startHarness(t, group, interval, tune, nil)
}

// startHarness starts the journal actor, tuned by jtune, and group's offsets actor on it,
// tuned by tune.
func startHarness(t *testing.T, group string, interval time.Duration, jtune []func(*journal.Config), tune []func(*Config)) *journalHarness {
	t.Helper()
	root := t.TempDir()
	h := &harness{t: t, dir: Dir(root), logs: &syncBuffer{}}
	h.fs = storage.NewFaultFS(nil)
	h.reg = prometheus.NewRegistry()
	h.metrics = NewMetrics(h.reg)
	h.nowMs.Store(1_700_000_000_000)
	log := zerolog.New(h.logs)
	h.sys = actor.NewSystem(log)
	j := &journalHarness{harness: h, root: root, jdir: JournalDir(root, 1)}
	// Segments small enough to make (and preallocate) quickly; no test but the rolling
	// one fills one.
	j.jcfg = journal.Config{Dir: j.jdir, FS: h.fs, Log: log, Metrics: h.metrics.Journal(), SegmentBytes: 64 << 10,
		Save: GroupFileSaver(h.fs, h.dir)}
	for _, f := range jtune {
		f(&j.jcfg)
	}
	j.jpid = h.sys.Spawn(journal.Props(j.jcfg))
	h.cfg = Config{
		Group: group, Dir: h.dir, FS: h.fs, Log: log, Metrics: h.metrics,
		Now:     func() time.Time { return time.UnixMilli(h.nowMs.Load()) },
		Journal: j.jpid, CheckpointInterval: interval,
	}
	for _, f := range tune {
		f(&h.cfg)
	}
	h.pid = h.sys.Spawn(Props(h.cfg))
	t.Cleanup(func() {
		h.fs.SetBefore(nil)
		// The offsets actors first: they journal and checkpoint what they hold.
		_ = h.sys.Poison(h.pid, waitFor)
		j.mu.Lock()
		groups := j.groups
		j.mu.Unlock()
		for _, pid := range groups {
			_ = h.sys.Poison(pid, waitFor)
		}
		_ = h.sys.Poison(j.jpid, waitFor)
		h.sys.Shutdown()
	})
	return j
}

// spawn starts the offsets actor of another group on the same journal.
func (j *journalHarness) spawn(group string) *actor.PID {
	cfg := j.cfg
	cfg.Group = group
	pid := j.sys.Spawn(Props(cfg))
	j.mu.Lock()
	j.groups = append(j.groups, pid)
	j.mu.Unlock()
	return pid
}

func (j *journalHarness) sendTo(pid *actor.PID, mk func(actor.Promise) any) *actor.Waiter {
	w := j.sys.NewWaiter()
	j.sys.Send(pid, mk(w.Promise))
	return w
}

func (j *journalHarness) commitToW(pid *actor.PID, entries ...Entry) *actor.Waiter {
	return j.sendTo(pid, func(p actor.Promise) any { return &Commit{Entries: entries, Reply: p} })
}

func (j *journalHarness) commitTo(pid *actor.PID, entries ...Entry) []int16 {
	j.t.Helper()
	return wait[*CommitResult](j.t, j.commitToW(pid, entries...)).Codes
}

func (j *journalHarness) fetchFrom(pid *actor.PID) *FetchResult {
	j.t.Helper()
	return wait[*FetchResult](j.t, j.sendTo(pid, func(p actor.Promise) any { return &Fetch{Reply: p} }))
}

// flushTo sends Flush: the group's file holds everything journaled when it is answered,
// and the journal has its Checkpointed (sent before the answer).
func (j *journalHarness) flushTo(pid *actor.PID) {
	j.t.Helper()
	if r := wait[*Result](j.t, j.sendTo(pid, func(p actor.Promise) any { return &Flush{Reply: p} })); r.ErrorCode != 0 {
		j.t.Fatalf("flush answered %d", r.ErrorCode)
	}
}

// jstat asks the journal actor for its segments.
func (j *journalHarness) jstat() *journal.Status {
	j.t.Helper()
	w := j.sys.NewWaiter()
	j.sys.Send(j.jpid, &journal.Stat{Reply: w.Promise})
	st := wait[*journal.Status](j.t, w)
	for _, groups := range st.Pinned {
		slices.Sort(groups)
	}
	return st
}

// segmentFiles lists the journal directory's segment files, sorted.
func (j *journalHarness) segmentFiles() []string {
	j.t.Helper()
	return segmentFilesIn(j.t, j.jdir)
}

func segmentFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	names, err := storage.OSFS{}.ReadDirNames(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if _, ok := journal.ParseSegmentName(n); ok {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	return segs
}

// groupFile decodes group's file under dir as a fresh load would; false when missing.
func groupFile(t *testing.T, dir, group string) (state, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName(group)))
	if os.IsNotExist(err) {
		return state{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	id, s, err := decodeFile(b)
	if err != nil {
		t.Fatalf("file of group %q does not decode: %v\n%s", group, err, b)
	}
	if id != group {
		t.Fatalf("file of group %q holds group %q", group, id)
	}
	return s, true
}

// crashImage copies the data dir as it is now, actors still running: what a power cut
// would leave (every acknowledged record is fsynced). It returns the copy's data dir.
//
// The journal is copied first, then the rest: a segment deleted meanwhile was deleted
// after the files that let it go were written, so the copy is one a crash could leave (the
// other order could pair a group file from before its checkpoint with a journal from
// after it). A file that vanishes during the copy was deleted before the "crash".
func (j *journalHarness) crashImage() string {
	j.t.Helper()
	return diskimage.Crash(j.t, j.root, filepath.Join(j.root, "__cluster", "__offsets_journal"))
}

// gate holds one FS step until opened.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// segmentHook is a FaultFS.Before for journal tests: it counts the fsyncs of journal
// segment files and holds the nth of them (1-based) until hold[n] opens; it fails the
// next steps armed with failNext on a segment file (FaultFS.FailNext would also hit the
// group files and any other file the journal writes); other, when set, runs before every
// step.
type segmentHook struct {
	syncs atomic.Int32
	hold  map[int32]*gate
	other func(op storage.Op, path string) error

	mu    sync.Mutex
	fails map[storage.Op]int
}

// failNext makes the next op on a journal segment fail with storage.ErrInjected (a failed write
// writes half its buffer first, as FaultFS does).
func (s *segmentHook) failNext(op storage.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails == nil {
		s.fails = map[storage.Op]int{}
	}
	s.fails[op]++
}

// hookSegments installs a segmentHook holding the segment fsyncs numbered in holds. Every
// gate is opened at cleanup, before the harness stops its actors.
func (j *journalHarness) hookSegments(other func(storage.Op, string) error, holds ...int32) (*segmentHook, []*gate) {
	hk := &segmentHook{hold: map[int32]*gate{}, other: other}
	var gates []*gate
	for _, n := range holds {
		g := newGate()
		hk.hold[n] = g
		gates = append(gates, g)
	}
	j.fs.SetBefore(hk.before)
	j.t.Cleanup(func() {
		for _, g := range gates {
			g.open()
		}
	})
	return hk, gates
}

func (s *segmentHook) before(op storage.Op, path string) error {
	segment := strings.HasSuffix(path, journal.SegmentSuffix)
	armed := false
	if segment {
		// Armed before a hold, as FaultFS checks FailNext before Before: a step held
		// while a failure is armed is not the one that fails.
		s.mu.Lock()
		if armed = s.fails[op] > 0; armed {
			s.fails[op]--
		}
		s.mu.Unlock()
	}
	if op == storage.OpSync && segment {
		if g := s.hold[s.syncs.Add(1)]; g != nil {
			close(g.entered)
			<-g.release
		}
	}
	if armed {
		return storage.ErrInjected
	}
	if s.other != nil {
		return s.other(op, path)
	}
	return nil
}

// answered reports whether w has its answer already (without waiting for it).
func answered(w *actor.Waiter) (any, bool) {
	select {
	case v := <-w.C:
		return v, true
	default:
		return nil, false
	}
}

func codesOK(codes []int16) bool {
	return len(codes) > 0 && slices.Equal(codes, make([]int16, len(codes)))
}

// TestJournalCommitDurableBeforeAnswer: in journal mode a commit is answered once the
// journal's fsync holding it returns, not before, and not visible to Fetch before; the
// group file is written only by the checkpoint, after which the group no longer pins the
// segment.
func TestJournalCommitDurableBeforeAnswer(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	hk, gates := j.hookSegments(nil, 1)
	w := j.commitW(Entry{TopicPartition{"t", 0}, Committed{Offset: 5, LeaderEpoch: 2, Metadata: "m"}})
	<-gates[0].entered
	// Two Fetches: the second is behind the commit's flushNow, so by its answer the
	// batch has gone to the journal; neither may see the commit.
	for range 2 {
		if f := j.fetch(); f.ErrorCode != 0 || len(f.Offsets) != 0 {
			t.Fatalf("fetch while the journal fsync is held: %+v", f)
		}
	}
	if v, done := answered(w); done {
		t.Fatalf("commit answered %+v before the journal fsync returned", v)
	}
	gates[0].open()
	if got := wait[*CommitResult](t, w).Codes; !codesOK(got) {
		t.Fatalf("commit codes %v", got)
	}
	if _, exists := j.onDisk(); exists {
		t.Fatal("group file written before its checkpoint (CheckpointInterval 1h)")
	}
	got := j.fetch().Offsets[TopicPartition{"t", 0}]
	if got.Offset != 5 || got.LeaderEpoch != 2 || got.Metadata != "m" || got.CommitTime != j.nowMs.Load() {
		t.Fatalf("fetch after the commit: %+v", got)
	}
	if s := j.stat(); !s.Exists || s.Count != 1 {
		t.Fatalf("stat %+v", s)
	}
	st := j.jstat()
	if len(st.Segments) != 1 || !slices.Equal(st.Pinned[st.Segments[0]], []string{"g"}) {
		t.Fatalf("journal status %+v, want one segment pinned by g", st)
	}
	if got := j.segmentFiles(); !slices.Equal(got, st.Segments) {
		t.Fatalf("journal directory %q, status %q", got, st.Segments)
	}
	if n := hk.syncs.Load(); n != 1 {
		t.Fatalf("%d segment fsyncs, want 1", n)
	}
	if _, err := os.Stat(j.dir); !os.IsNotExist(err) {
		t.Fatalf("offsets directory made on the commit path (err %v): the group file is the checkpoint's", err)
	}

	// With a short interval the checkpoint writes the file behind the journal, and the
	// group stops pinning the segment.
	j2 := newJournalHarness(t, "g", ckptSoon)
	if got := j2.commit(entry("t", 0, 7), entry("u", 3, 8)); !codesOK(got) {
		t.Fatalf("commit codes %v", got)
	}
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("checkpoint of the group file", func() bool {
		s, exists := j2.onDisk()
		return exists && s.offsets[TopicPartition{"t", 0}].Offset == 7 && s.offsets[TopicPartition{"u", 3}].Offset == 8
	}))
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("segment unpinned after the checkpoint", func() bool {
		// The first segment starts empty (nothing is reserved before the first
		// append) and is closed once its zero-filled successor is ready; closed and
		// unpinned, it goes.
		st := j2.jstat()
		return len(st.Segments) <= 1 && len(st.Pinned) == 0
	}))
	if got := counterValue(j2.metrics.writes.WithLabelValues("ok")); got != 1 {
		t.Fatalf("file writes ok = %v, want 1 (the checkpoint)", got)
	}
	if got := counterValue(j2.metrics.journalWrites.WithLabelValues("ok")); got != 1 {
		t.Fatalf("journal writes ok = %v, want 1", got)
	}
}

// TestJournalGroupCommitAcrossGroups: the journal makes the records of many groups
// durable with one fsync: 20 groups' commits that arrive while an fsync is in flight all
// share the next one.
func TestJournalGroupCommitAcrossGroups(t *testing.T) {
	j := newJournalHarness(t, "g00", ckptNever)
	pids := []*actor.PID{j.pid}
	for i := 1; i < 20; i++ {
		pids = append(pids, j.spawn(groupName(i)))
	}
	// Each actor first claims its state from the journal (Claim), which must not wait
	// behind the held fsync: one fetch each before the hold.
	for _, pid := range pids {
		j.fetchFrom(pid)
	}
	hk, gates := j.hookSegments(nil, 1)
	first := j.commitToW(pids[0], entry("t", 0, 100))
	<-gates[0].entered
	waiters := []*actor.Waiter{first}
	for i, pid := range pids[1:] {
		waiters = append(waiters, j.commitToW(pid, entry("t", 0, int64(101+i))))
	}
	// Two Fetches per group: by the second answer its Append is in the journal's
	// mailbox (see TestJournalCommitDurableBeforeAnswer).
	for _, pid := range pids[1:] {
		j.fetchFrom(pid)
		j.fetchFrom(pid)
	}
	for i, w := range waiters {
		if v, done := answered(w); done {
			t.Fatalf("commit of group %d answered %+v before its fsync", i, v)
		}
	}
	gates[0].open()
	for i, w := range waiters {
		if got := wait[*CommitResult](t, w).Codes; !codesOK(got) {
			t.Fatalf("commit of group %d: %v", i, got)
		}
	}
	if n := hk.syncs.Load(); n != 2 {
		t.Fatalf("%d segment fsyncs for 20 groups' commits, want 2 (one in flight, one for the other 19)", n)
	}
	if got := counterValue(j.metrics.journalWrites.WithLabelValues("ok")); got != 2 {
		t.Fatalf("journal writes ok = %v, want 2", got)
	}
	for i, pid := range pids {
		if f := j.fetchFrom(pid); f.Offsets[TopicPartition{"t", 0}].Offset != int64(100+i) {
			t.Fatalf("group %d fetch %+v", i, f)
		}
	}
	// The first segment may have been closed when its zero-filled successor was ready
	// (nothing is reserved before the first append): the 20 groups pin what is there.
	st := j.jstat()
	pinned := 0
	for _, gs := range st.Pinned {
		pinned += len(gs)
	}
	if len(st.Segments) > 2 || pinned != 20 {
		t.Fatalf("journal status %+v, want the segments pinned by the 20 groups", st)
	}
}

func groupName(i int) string { return "g" + string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// TestJournalWriteFailure: a journal write or fsync that fails answers every waiter of
// the batches in it NOT_COORDINATOR and changes nothing visible; the segment is closed and
// later batches go to a new one. With a group's batch held in its fsync, the next batch
// (a first run of the 5 commits) waits in the journal and is the one that fails; the
// commits that queue behind it in the actor go in a batch after the failure and are stored.
func TestJournalWriteFailure(t *testing.T) {
	for _, op := range []storage.Op{storage.OpWrite, storage.OpSync} {
		t.Run(string(op), func(t *testing.T) {
			j := newJournalHarness(t, "g", ckptNever)
			hk, gates := j.hookSegments(nil, 1)
			first := j.commitW(entry("t", 0, 1))
			<-gates[0].entered
			var batch []*actor.Waiter
			for i := range 5 {
				batch = append(batch, j.commitW(entry("t", int32(i), 50), entry("u", int32(i), 50)))
			}
			j.fetch() // the commits are in the journal's mailbox or queued in the actor
			hk.failNext(op)
			gates[0].open()
			if got := wait[*CommitResult](t, first).Codes; !codesOK(got) {
				t.Fatalf("first commit %v", got)
			}
			nFailed := 0
			for i, w := range batch {
				got := wait[*CommitResult](t, w).Codes
				switch {
				case nFailed == i && slices.Equal(got, codes(2, kerr.NotCoordinator.Code)):
					nFailed++
				case nFailed > 0 && codesOK(got):
				default:
					t.Fatalf("commit %d answered %v: want a first run NOT_COORDINATOR (the failed write), the rest stored", i, got)
				}
			}
			want := map[TopicPartition]int64{{"t", 0}: 1}
			for i := nFailed; i < 5; i++ {
				want[TopicPartition{"t", int32(i)}], want[TopicPartition{"u", int32(i)}] = 50, 50
			}
			sameOffsets := func(what string, got map[TopicPartition]Committed) {
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
			sameOffsets("fetch after the failed batch", j.fetch().Offsets)
			if got := counterValue(j.metrics.journalWrites.WithLabelValues("error")); got != 1 {
				t.Fatalf("journal writes error = %v, want 1", got)
			}
			if !strings.Contains(j.logs.String(), "offsets_journal_write_failed") {
				t.Fatalf("journal failure not logged:\n%s", j.logs)
			}
			failed := j.jstat().Segments[0]

			if got := j.commit(entry("t", 0, 2)); !codesOK(got) {
				t.Fatalf("commit after the failure %v", got)
			}
			want[TopicPartition{"t", 0}] = 2
			after := j.jstat()
			// The failed segment is closed; later records are in new ones (an empty one
			// first when no zero-filled spare is ready, then the spare).
			if len(after.Segments) < 2 || after.Segments[0] != failed || slices.Contains(after.Segments[1:], failed) {
				t.Fatalf("segments %q after the failure in %s: want it closed and a new one", after.Segments, failed)
			}
			if last := after.Segments[len(after.Segments)-1]; !slices.Equal(after.Pinned[last], []string{"g"}) {
				t.Fatalf("new segment's pins %+v", after.Pinned)
			}
			if got := j.segmentFiles(); !slices.Equal(got, after.Segments) {
				t.Fatalf("journal directory %q, status %q", got, after.Segments)
			}
			sameOffsets("fetch after recovery", j.fetch().Offsets)
			wantOK := 3.0
			if nFailed == 5 {
				wantOK = 2
			}
			if got := counterValue(j.metrics.journalWrites.WithLabelValues("ok")); got != wantOK {
				t.Fatalf("journal writes ok = %v, want %v", got, wantOK)
			}
			if op == storage.OpWrite {
				// The failed write left half a frame: a crash now replays the records on
				// both sides of it and not the torn one.
				img := j.crashImage()
				if _, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop()); err != nil {
					t.Fatal(err)
				}
				s, _ := groupFile(t, Dir(img), "g")
				sameOffsets("replayed", s.offsets)
			}
		})
	}
}

// TestJournalStopWritesFile: stopping an actor with a long CheckpointInterval journals
// what is queued, waits for the journal and writes the file with everything; the queued
// commits are answered success.
func TestJournalStopWritesFile(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	_, gates := j.hookSegments(nil, 1) // counts from here: the next commit's fsync
	inflight := j.commitW(entry("t", 1, 1))
	<-gates[0].entered
	queued := j.commitW(entry("t", 2, 1), entry("t", 0, 9))
	// The poison is in the mailbox behind the queued commit and ahead of the journal's
	// answer to the one in flight: Stopping finds one append in flight and one queued.
	stopped := j.sys.Raw().Root.PoisonFuture(j.pid)
	if _, exists := j.onDisk(); exists {
		t.Fatal("file written before the stop")
	}
	gates[0].open()
	for _, w := range []*actor.Waiter{inflight, queued} {
		if got := wait[*CommitResult](t, w).Codes; !codesOK(got) {
			t.Fatalf("commit answered %v at stop", got)
		}
	}
	must(t, stopped.Wait())
	s, exists := j.onDisk()
	want := map[TopicPartition]int64{{"t", 0}: 9, {"t", 1}: 1, {"t", 2}: 1}
	if !exists || len(s.offsets) != len(want) {
		t.Fatalf("file after the stop: %+v", s.offsets)
	}
	for tp, o := range want {
		if s.offsets[tp].Offset != o {
			t.Fatalf("file after the stop: %v = %+v, want %d", tp, s.offsets[tp], o)
		}
	}
	// The stop's checkpoint told the journal: nothing is pinned.
	st := j.jstat()
	for seg, groups := range st.Pinned {
		if len(groups) > 0 {
			t.Fatalf("segment %s still pinned by %q after the stop", seg, groups)
		}
	}
	if got := counterValue(j.metrics.writes.WithLabelValues("ok")); got != 1 {
		t.Fatalf("file writes ok = %v, want 1", got)
	}
}

// TestJournalSegmentsRollAndGo: small segments roll; a closed segment is deleted once
// every group with a record in it has checkpointed, oldest first, and the active one
// stays.
func TestJournalSegmentsRollAndGo(t *testing.T) {
	// A frame of one commit's compact record is about 40 bytes: one to a segment.
	j := newJournalHarness(t, "a", ckptNever, func(c *journal.Config) { c.SegmentBytes = 64 })
	a, b, c := j.pid, j.spawn("b"), j.spawn("c")
	n := int64(0)
	commit := func(pid *actor.PID) {
		n++
		if got := j.commitTo(pid, entry("t", 0, n)); !codesOK(got) {
			t.Fatalf("commit %d: %v", n, got)
		}
	}
	// a alone, then the three interleaved, then c alone: the oldest segments are a's,
	// the newest c's.
	for range 4 {
		commit(a)
	}
	for range 2 {
		commit(a)
		commit(b)
		commit(c)
	}
	for range 5 {
		commit(c)
	}
	st := j.jstat()
	if len(st.Segments) < 5 {
		t.Fatalf("%d segments of %d frames of about 40 bytes with SegmentBytes 64", len(st.Segments), n)
	}
	if got := j.segmentFiles(); !slices.Equal(got, st.Segments) {
		t.Fatalf("journal directory %q, status %q", got, st.Segments)
	}
	for _, seg := range st.Segments {
		if len(st.Pinned[seg]) == 0 {
			t.Fatalf("segment %s pins nothing before any checkpoint: %+v", seg, st.Pinned)
		}
	}
	last := st.Segments[len(st.Segments)-1]

	// kept is what the journal must keep once the groups in done have checkpointed: the
	// segments from the oldest one still pinned by another group. When none is, every
	// closed segment goes and the last one stays if it is the active one (journal.Status
	// does not say whether a segment that just filled up was closed).
	done := map[string]bool{}
	kept := func(now []string) bool {
		for i, seg := range st.Segments {
			for _, g := range st.Pinned[seg] {
				if !done[g] {
					return slices.Equal(now, st.Segments[i:])
				}
			}
		}
		return len(now) == 0 || slices.Equal(now, []string{last})
	}
	for _, step := range []struct {
		group string
		pid   *actor.PID
		check func(now []string)
	}{
		{"b", b, func(now []string) {
			if len(now) != len(st.Segments) {
				t.Fatalf("b's checkpoint deleted segments (%q left) while a pins the oldest", now)
			}
		}},
		{"a", a, func(now []string) {
			if len(now) == len(st.Segments) || len(now) < 3 {
				t.Fatalf("after a's and b's checkpoints %q of %q kept", now, st.Segments)
			}
		}},
		{"c", c, func(now []string) {
			if len(now) > 1 {
				t.Fatalf("after every checkpoint %q kept", now)
			}
		}},
	} {
		j.flushTo(step.pid)
		done[step.group] = true
		now := j.jstat()
		if !kept(now.Segments) {
			t.Fatalf("after %s's checkpoint the journal keeps %q (of %q pinned %v)",
				step.group, now.Segments, st.Segments, st.Pinned)
		}
		if got := j.segmentFiles(); !slices.Equal(got, now.Segments) {
			t.Fatalf("after %s's checkpoint the directory holds %q, status %q", step.group, got, now.Segments)
		}
		for seg, groups := range now.Pinned {
			for _, g := range groups {
				if done[g] {
					t.Fatalf("segment %s still pinned by %s after its checkpoint", seg, g)
				}
			}
		}
		step.check(now.Segments)
	}
	for _, g := range []string{"a", "b", "c"} {
		if _, exists := groupFile(t, j.dir, g); !exists {
			t.Fatalf("group %s has no file after its Flush", g)
		}
	}
	// The active segment stays when nothing pins it: commit and checkpoint until the
	// journal has one (a commit that fills a segment closes it, and the next opens one).
	for i := 0; ; i++ {
		commit(a)
		j.flushTo(a)
		now := j.jstat()
		if got := j.segmentFiles(); !slices.Equal(got, now.Segments) {
			t.Fatalf("directory %q, status %q", got, now.Segments)
		}
		if len(now.Segments) > 1 {
			t.Fatalf("after a's last checkpoint the journal keeps %q pinned %v", now.Segments, now.Pinned)
		}
		if len(now.Segments) == 1 {
			if len(now.Pinned[now.Segments[0]]) != 0 {
				t.Fatalf("active segment pinned %v after the checkpoint", now.Pinned)
			}
			if now.Segments[0] <= last {
				t.Fatalf("segment %s reused a name up to %s", now.Segments[0], last)
			}
			break
		}
		if i == 3 {
			t.Fatal("no active segment kept after 4 commits")
		}
	}
}

// TestJournalPanicRestart: a panic inside the offsets actor's Receive (here: the
// checkpoint job's directory creation, raised again in the turn that takes the job's
// outcome) with a journaled batch in flight. The failed
// incarnation answers that batch when the journal holds it and writes the file; the next
// incarnation's Fetch returns every acknowledged commit.
func TestJournalPanicRestart(t *testing.T) {
	j := newJournalHarness(t, "g", ckptSoon)
	panicked := make(chan struct{})
	var once sync.Once
	_, gates := j.hookSegments(func(op storage.Op, path string) error {
		if op == storage.OpMkdir && path == j.dir {
			once.Do(func() {
				close(panicked)
				panic("mkdir bug")
			})
		}
		return nil
	}, 1, 2)
	w1 := j.commitW(entry("t", 0, 1))
	<-gates[0].entered
	// Queued behind the append in flight: journaled right after it is answered, in the
	// same Receive that schedules the checkpoint, so it is in flight when the tick comes.
	w2 := j.commitW(entry("t", 1, 2))
	j.fetch()
	gates[0].open()
	if got := wait[*CommitResult](t, w1).Codes; !codesOK(got) {
		t.Fatalf("first commit %v", got)
	}
	<-gates[1].entered
	select {
	case <-panicked:
	case <-time.After(waitFor):
		t.Fatal("the checkpoint tick did not come")
	}
	// The checkpoint's write panics on its job's goroutine; the actor raises it when the
	// job's result reaches its turn. A commit sent before that would be queued by the
	// failing incarnation and answered with its crash.
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the actor raises the job's panic", func() bool {
		return strings.Contains(j.logs.String(), "offsets_actor_panic")
	}))
	// Sent while the failed incarnation waits for the journal: the next one takes it.
	w3 := j.commitW(entry("t", 2, 3))
	if v, done := answered(w2); done {
		t.Fatalf("commit in flight answered %+v before the journal's fsync", v)
	}
	gates[1].open()
	if got := wait[*CommitResult](t, w2).Codes; !codesOK(got) {
		t.Fatalf("commit in flight during the panic answered %v, want success (the journal holds it)", got)
	}
	if got := wait[*CommitResult](t, w3).Codes; !codesOK(got) {
		t.Fatalf("commit after the restart %v", got)
	}
	f := j.fetch()
	want := map[TopicPartition]int64{{"t", 0}: 1, {"t", 1}: 2, {"t", 2}: 3}
	if f.ErrorCode != 0 || len(f.Offsets) != len(want) {
		t.Fatalf("fetch after the restart %+v", f)
	}
	for tp, o := range want {
		if f.Offsets[tp].Offset != o {
			t.Fatalf("fetch after the restart: %v = %+v, want %d", tp, f.Offsets[tp], o)
		}
	}
	// The failed incarnation wrote the file before the next one read it, and the next
	// one's checkpoint follows.
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("checkpoint after the restart", func() bool {
		s, exists := j.onDisk()
		return exists && len(s.offsets) == 3
	}))
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("segment unpinned", func() bool {
		for _, groups := range j.jstat().Pinned {
			if len(groups) > 0 {
				return false
			}
		}
		return true
	}))
}

// appendPanic makes the journal panic on the nth Append of key it takes from now on
// (actor.Faults).
type appendPanic struct {
	key  string
	n    int32
	seen atomic.Int32
}

func (p *appendPanic) Receive(_ actor.Actor, msg any) bool {
	a, ok := msg.(*journal.Append)
	return ok && a.Key == p.key && p.seen.Add(1) == p.n
}

func (p *appendPanic) Timer(_ any, d time.Duration) (time.Duration, bool) { return d, false }

// TestJournalCrashAnswerOvertakes: the journal panics taking a group's second Append
// while the first still waits in its queue, so the answer to the second (a failed
// write, from the actor layer) comes ahead of the first's. The offsets actor answers
// both batches in order, the first durable and the second failed, and goes on. (It took
// answers only in order and dropped the early one: the second batch then waited for
// ever, and every later commit of the group behind it.)
func TestJournalCrashAnswerOvertakes(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	other := j.spawn("other")
	// Both groups have their journal Claims answered before the journal is held, so
	// neither awaits its start-up while the fsync below is held.
	j.fetch()
	j.fetchFrom(other)
	_, gates := j.hookSegments(nil, 1)
	held := j.commitToW(other, entry("o", 0, 1))
	<-gates[0].entered
	// The journal is in other's fsync: g's two batches wait in its mailbox.
	defer actor.SetFaults(&appendPanic{key: "g", n: 2})()
	first := j.commitW(entry("t", 0, 1))
	j.fetch() // by the second answer, the batch has gone to the journal
	j.fetch()
	second := j.commitW(entry("t", 1, 2))
	j.fetch()
	j.fetch()
	gates[0].open()
	if got := wait[*CommitResult](t, held).Codes; !codesOK(got) {
		t.Fatalf("other's commit %v", got)
	}
	if got := wait[*CommitResult](t, first).Codes; !codesOK(got) {
		t.Fatalf("first commit %v", got)
	}
	if got := wait[*CommitResult](t, second).Codes; got[0] != kerr.NotCoordinator.Code {
		t.Fatalf("commit whose Append the journal panicked on answered %v, want NOT_COORDINATOR", got)
	}
	if got := j.commit(entry("t", 2, 3)); !codesOK(got) {
		t.Fatalf("commit after the panic %v", got)
	}
	f := j.fetch()
	if len(f.Offsets) != 2 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 || f.Offsets[TopicPartition{"t", 2}].Offset != 3 {
		t.Fatalf("fetch after the panic %+v", f.Offsets)
	}
}

// TestJournalMetaOnCheckpoint: a SaveMeta with members goes through the journal and the
// checkpoint writes a version-2 file; the meta reads back as sent.
func TestJournalMetaOnCheckpoint(t *testing.T) {
	j := newJournalHarness(t, "g", ckptSoon)
	meta := sampleStateMembers().meta
	if c := j.result(func(p actor.Promise) any { return &SaveMeta{Meta: meta, Reply: p} }); c != 0 {
		t.Fatalf("SaveMeta %d", c)
	}
	if s := j.stat(); !s.Exists || !reflect.DeepEqual(s.Meta, meta) {
		t.Fatalf("stat %+v", s)
	}
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("checkpoint with the meta", func() bool {
		b, err := os.ReadFile(filepath.Join(j.dir, "g.json"))
		return err == nil && strings.HasPrefix(string(b), `{"version":2,`)
	}))
	s, _ := j.onDisk()
	if !reflect.DeepEqual(s.meta, meta) {
		t.Fatalf("meta on disk %+v, want %+v", s.meta, meta)
	}
}

// TestJournalPanicAnswersBatch: a panic in the journal's flush (here: in the segment
// write) must answer the batch it was writing, and the journal, which resumes rather
// than restarts, must go on after the records it has made durable, never over them.
func TestJournalPanicAnswersBatch(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	g2 := j.spawn("g2")
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	var once sync.Once
	j.hookSegments(func(op storage.Op, path string) error {
		if op == storage.OpWrite && strings.HasSuffix(path, journal.SegmentSuffix) {
			once.Do(func() { panic("journal write bug") })
		}
		return nil
	})
	w := j.commitW(entry("t", 0, 2))
	if v, done := w.Wait(waitFor); !done {
		t.Error("the batch being written when the journal panicked was never answered: the group's appends stay in flight")
	} else if r, _ := v.(*CommitResult); r == nil || r.Codes[0] != kerr.NotCoordinator.Code {
		t.Errorf("commit during the journal's panic answered %+v, want NOT_COORDINATOR", v)
	}
	// Another group's commit goes to the journal after its panic.
	if got := j.commitTo(g2, entry("x", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	img := j.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	if s, _ := groupFile(t, Dir(img), "g"); s.offsets[TopicPartition{"t", 0}].Offset != 1 {
		t.Errorf("g's acknowledged commit lost after the journal restarted: replayed %+v, segments %q",
			s.offsets, segmentFilesIn(t, JournalDir(j.root, 1)))
	}
	if s, _ := groupFile(t, Dir(img), "g2"); s.offsets[TopicPartition{"x", 0}].Offset != 1 {
		t.Errorf("g2's commit not replayed: %+v", s.offsets)
	}
}

// TestJournalFailedStopCheckpoint: a commit acknowledged through the journal whose
// group's file could not be written when the actor stopped (a disk briefly full) must
// still be served by the group's next actor, and must survive that actor's checkpoint.
func TestJournalFailedStopCheckpoint(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever, func(c *journal.Config) { c.SegmentBytes = 256 })
	if got := j.commit(entry("t", 1, 5)); !codesOK(got) {
		t.Fatal(got)
	}
	j.failFirstFileWrite("g.json")
	j.restart() // Stopping: the checkpoint fails, the commit is only in the journal
	if !strings.Contains(j.logs.String(), "offsets_checkpoint_failed_state_left_with_journal") {
		t.Fatalf("failed checkpoint not logged:\n%s", j.logs)
	}
	if f := j.fetch(); f.Offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Errorf("the group's next actor serves %+v: the acknowledged commit t-1=5 is missing", f.Offsets)
	}
	// The next actor commits and checkpoints: its Checkpointed unpins every earlier
	// record of the group, so its file must hold t-1, or once their segments roll and
	// go, a crash loses it.
	for i := range 4 {
		if got := j.commit(entry("t", 0, int64(i))); !codesOK(got) {
			t.Fatal(got)
		}
	}
	j.flushTo(j.pid)
	img := j.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	if s, _ := groupFile(t, Dir(img), "g"); s.offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Errorf("after a crash the replayed file holds %+v: the acknowledged commit t-1=5 is lost", s.offsets)
	}
}

// failFirstFileWrite makes the next write of the group file name fail (its tmp file
// cannot be created).
func (j *journalHarness) failFirstFileWrite(name string) {
	j.failOn(storage.OpCreate, func(path string) bool { return filepath.Base(path) == name+tmpSuffix })
}

// failOn makes the next op on a path that match accepts fail with storage.ErrInjected.
// FaultFS.FailNext would fail the next op on any path, and the journal zero-fills its
// next segment on a goroutine of its own meanwhile.
func (j *journalHarness) failOn(op storage.Op, match func(path string) bool) {
	var once sync.Once
	j.hookSegments(func(o storage.Op, path string) error {
		fail := false
		if o == op && match(path) {
			once.Do(func() { fail = true })
		}
		if fail {
			return storage.ErrInjected
		}
		return nil
	})
}

// TestJournalFailedBatchMeta: a SaveMeta without a reply in a batch whose journal write
// failed must not stay in memory "for the next write" (as it does without a journal): the
// next records would not carry it, the checkpoint would write a meta the journal does not
// hold, and a replay over that file would set the older journaled meta back.
func TestJournalFailedBatchMeta(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	other := j.spawn("other")
	m1 := GroupMeta{ProtocolType: "consumer", Generation: 1, EmptySince: 5}
	if c := j.result(func(p actor.Promise) any { return &SaveMeta{Meta: m1, Reply: p} }); c != 0 {
		t.Fatal(c)
	}
	// Another group's record pins the segment that holds m1 (its file is not written).
	if got := j.commitTo(other, entry("o", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	// A commit held in its fsync, so that the reply-less SaveMeta and the next commit
	// queue behind it and go to the journal as one batch, whose write fails.
	hk, gates := j.hookSegments(nil, 1)
	held := j.commitW(entry("t", 1, 1))
	<-gates[0].entered
	m2 := GroupMeta{ProtocolType: "consumer", Generation: 2, EmptySince: 6}
	j.sys.Send(j.pid, &SaveMeta{Meta: m2})
	inBatch := j.commitW(entry("t", 0, 1))
	j.fetch() // both are queued behind the held append
	hk.failNext(storage.OpWrite)
	gates[0].open()
	if got := wait[*CommitResult](t, held).Codes; !codesOK(got) {
		t.Fatalf("held commit answered %v", got)
	}
	// The SaveMeta is first in the batch whose write fails; the commit is in it or, with
	// the group's batches pipelined, in the next one.
	if got := wait[*CommitResult](t, inBatch).Codes; got[0] != kerr.NotCoordinator.Code && got[0] != 0 {
		t.Fatalf("commit after the reply-less SaveMeta answered %v", got)
	}
	if got := j.commit(entry("t", 0, 2)); !codesOK(got) {
		t.Fatal(got)
	}
	live := j.stat().Meta
	j.flushTo(j.pid)
	if s, _ := j.onDisk(); !reflect.DeepEqual(s.meta, live) {
		t.Fatalf("checkpointed meta %+v, live %+v", s.meta, live)
	}
	img := j.crashImage()
	_, err := ReplayJournal(nil, Dir(img), JournalDir(img, 1), zerolog.Nop())
	must(t, err)
	if s, _ := groupFile(t, Dir(img), "g"); !reflect.DeepEqual(s.meta, live) {
		t.Errorf("replay turned the checkpointed meta %+v back into %+v", live, s.meta)
	}
}

// TestJournalPanicRestartCheckpointFails: an offsets actor panics, and the file write
// its restart makes also fails. The state it had is left with the journal (Unsaved),
// the next incarnation claims it before serving (so Fetch has every acknowledged commit,
// not the older file) and writes it at its own checkpoint.
func TestJournalPanicRestartCheckpointFails(t *testing.T) {
	j := newJournalHarness(t, "g", ckptSoon)
	var calls atomic.Int32
	j.hookSegments(func(op storage.Op, path string) error {
		if op == storage.OpMkdir && path == j.dir {
			switch calls.Add(1) {
			case 1:
				panic("mkdir bug") // in the checkpoint tick, inside Receive
			case 2:
				return storage.ErrInjected // the restart's own write
			}
		}
		return nil
	})
	if got := j.commit(entry("t", 0, 1), entry("t", 1, 2)); !codesOK(got) {
		t.Fatal(got)
	}
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the panic and the failed write", func() bool {
		return strings.Contains(j.logs.String(), "offsets_checkpoint_failed_state_left_with_journal")
	}))
	f := j.fetch()
	if f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 0}].Offset != 1 || f.Offsets[TopicPartition{"t", 1}].Offset != 2 {
		t.Fatalf("the next incarnation serves %+v, want the acknowledged commits", f)
	}
	if !strings.Contains(j.logs.String(), "offsets_state_taken_from_journal_file_behind") {
		t.Fatalf("the next incarnation did not claim the state:\n%s", j.logs)
	}
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the claimed state written", func() bool {
		s, exists := j.onDisk()
		return exists && s.offsets[TopicPartition{"t", 0}].Offset == 1 && s.offsets[TopicPartition{"t", 1}].Offset == 2
	}))
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the journal unpinned", func() bool {
		for _, groups := range j.jstat().Pinned {
			if len(groups) > 0 {
				return false
			}
		}
		return true
	}))
}

// TestCheckpointsShareWriteSlots: checkpoints of a broker's groups run at most
// WriteSlots at once (each holds an OS thread in fsync): with one slot and the first
// group's file write held, the second group's checkpoint does not start until it is
// released, and then both files are written.
func TestCheckpointsShareWriteSlots(t *testing.T) {
	j := newJournalHarness(t, "a", ckptSoon)
	slots := make(chan struct{}, 1)
	j.cfg.WriteSlots = slots
	waiting := make(chan string, 4)
	j.cfg.slotWait = func(group string) {
		select {
		case waiting <- group:
		default: // the stops' checkpoints at cleanup: nobody reads
		}
	}
	_ = j.sys.Poison(j.pid, waitFor)
	j.pid = j.sys.Spawn(Props(j.cfg))
	b := j.spawn("b")
	entered, release := make(chan string, 2), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the harness's cleanup, which stops the actors
	j.hookSegments(func(op storage.Op, path string) error {
		if op == storage.OpCreate && strings.HasSuffix(path, ".json"+tmpSuffix) {
			entered <- filepath.Base(path)
			<-release
		}
		return nil
	})
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
	first := <-entered
	if got := j.commitTo(b, entry("t", 0, 2)); !codesOK(got) {
		t.Fatal(got)
	}
	// b's checkpoint is due within ckptSoon; it must find the slot taken and wait.
	select {
	case name := <-entered:
		t.Fatalf("%s's checkpoint started while %s held the only write slot", name, first)
	case g := <-waiting:
		if g != "b" {
			t.Fatalf("%s's checkpoint waits for a slot while %s holds the only one", g, first)
		}
	case <-time.After(waitFor):
		t.Fatalf("b's checkpoint did not come to wait for the slot held by the write of %s within %v", first, waitFor)
	}
	select {
	case name := <-entered:
		t.Fatalf("%s's checkpoint started while %s held the only write slot", name, first)
	default:
	}
	open()
	if second := <-entered; second == first {
		t.Fatalf("the same file twice: %s", second)
	}
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("both files written", func() bool {
		_, okA := j.onDisk()
		_, err := os.Stat(filepath.Join(j.dir, FileName("b")))
		return okA && err == nil
	}))
}

// claimRelay passes every message to the journal but holds Claims until releaseClaims.
type claimRelay struct {
	to       *actor.PID
	held     []*journal.Claim
	released bool
}

type releaseClaims struct{}

func (r *claimRelay) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *journal.Claim:
		if !r.released {
			r.held = append(r.held, m)
			return
		}
		ctx.Send(r.to, m)
	case *releaseClaims:
		r.released = true
		for _, c := range r.held {
			ctx.Send(r.to, c)
		}
		r.held = nil
	default:
		ctx.Send(r.to, m)
	}
}

// claimWatch passes every message to the journal. A Claim goes with a promise of the
// watch's own and is followed by a Stat: the journal takes them in that order, so when
// the Stat is answered the watch knows whether the journal answered the Claim as it took
// it, and tells taken. The Claim's answer, whenever it comes, goes on to the claimer.
type claimWatch struct {
	to     *actor.PID
	taken  chan bool                // per Claim: answered as the journal took it
	claims map[uint64]actor.Promise // the watch's promise → the claimer's
	stats  map[uint64]uint64        // a Stat's promise → its Claim's
}

func newClaimWatch(to *actor.PID) *claimWatch {
	return &claimWatch{to: to, taken: make(chan bool, 4), claims: map[uint64]actor.Promise{}, stats: map[uint64]uint64{}}
}

func (w *claimWatch) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *journal.Claim:
		p := actor.NewPromise(ctx, ctx.Self())
		w.claims[p.ID()] = m.Reply
		ctx.Send(w.to, &journal.Claim{Key: m.Key, Reply: p})
		st := actor.NewPromise(ctx, ctx.Self())
		w.stats[st.ID()] = p.ID()
		ctx.Send(w.to, &journal.Stat{Reply: st})
	case *actor.Settled:
		if claim, ok := w.stats[m.ID]; ok {
			delete(w.stats, m.ID)
			_, unanswered := w.claims[claim]
			select {
			case w.taken <- !unanswered:
			default:
			}
		} else if reply, ok := w.claims[m.ID]; ok {
			delete(w.claims, m.ID)
			reply.Resolve(m.Value)
		}
	default:
		ctx.Send(w.to, m)
	}
}

// TestClaimUnansweredRetries: while the journal has not answered a new actor's Claim, the
// group's file may be behind it (here it lacks t-1=5), so requests that waited ClaimWait
// are answered COORDINATOR_LOAD_IN_PROGRESS, never from the file; once the journal
// answers, the group serves what the earlier actor left with it.
func TestClaimUnansweredRetries(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever, func(c *journal.Config) { c.SegmentBytes = 256 })
	if got := j.commit(entry("t", 1, 5)); !codesOK(got) {
		t.Fatal(got)
	}
	j.failFirstFileWrite("g.json")
	relay := j.sys.Spawn(actor.PropsOf(func() actor.Actor { return &claimRelay{to: j.jpid} }))
	j.cfg.Journal, j.cfg.ClaimWait = relay, 20*time.Millisecond
	j.restart() // the old actor's checkpoint fails: t-1=5 is in the journal only
	for _, c := range j.commit(entry("t", 0, 1)) {
		if c != kerr.CoordinatorLoadInProgress.Code {
			t.Fatalf("commit while the claim is unanswered: %d", c)
		}
	}
	if f := j.fetch(); f.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("fetch while the claim is unanswered: %+v", f)
	}
	if !strings.Contains(j.logs.String(), "offsets_journal_claim_unanswered_requests_retried") {
		t.Fatalf("unanswered claim not logged:\n%s", j.logs)
	}
	j.sys.Send(relay, &releaseClaims{})
	// A fetch may still meet a ClaimWait running out before the answer arrives.
	var f *FetchResult
	testwait.For(t, waitFor, 2*time.Millisecond, testwait.Cond("the group serves once the journal answers", func() bool {
		f = j.fetch()
		return f.ErrorCode != kerr.CoordinatorLoadInProgress.Code
	}))
	if f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Fatalf("after the journal answers: %+v (want t-1=5)", f)
	}
	if got := j.commit(entry("t", 0, 1)); !codesOK(got) {
		t.Fatal(got)
	}
}

// TestJournalRetriesUnsavedFile: a group whose actor stopped without writing its file,
// and which no actor claims again, would pin its records, and with them every later
// segment, until the broker restarts. The journal writes the file itself every
// UnsavedRetry until that works, then lets the segments go; a Claim of the group while
// that write runs waits for it.
func TestJournalRetriesUnsavedFile(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever, func(c *journal.Config) {
		c.SegmentBytes = 256
		c.UnsavedRetry = 20 * time.Millisecond
	})
	u := j.spawn("u")
	if got := j.commitTo(u, entry("t", 1, 5)); !codesOK(got) {
		t.Fatal(got)
	}
	var creates atomic.Int32
	held := newGate()
	t.Cleanup(held.open)
	j.hookSegments(func(op storage.Op, path string) error {
		if op != storage.OpCreate || filepath.Base(path) != "u.json"+tmpSuffix {
			return nil
		}
		switch creates.Add(1) {
		case 1, 2: // the actor's checkpoint as it stops, the journal's first retry
			return storage.ErrInjected
		case 3:
			close(held.entered)
			<-held.release
		}
		return nil
	})
	must(t, j.sys.Poison(u, waitFor))
	// Commits of another group roll segments meanwhile; u's record pins them all.
	for i := range 20 {
		if got := j.commit(entry("t", 0, int64(i))); !codesOK(got) {
			t.Fatal(got)
		}
	}
	select {
	case <-held.entered:
	case <-time.After(waitFor):
		t.Fatalf("the journal never retried u's file (%d creates)", creates.Load())
	}
	if !strings.Contains(j.logs.String(), "offsets_unsaved_group_files_still_failing") {
		t.Fatalf("failed retry not logged:\n%s", j.logs)
	}
	if st := j.jstat(); len(st.Segments) < 3 {
		t.Fatalf("segments %v: the test needs several pinned by u", st.Segments)
	}
	// u's next actor claims while the journal writes u's file: the journal keeps the
	// Claim until that write is over, and the fetch waits for the Claim's answer.
	watch := newClaimWatch(j.jpid)
	j.cfg.Journal = j.sys.Spawn(actor.PropsOf(func() actor.Actor { return watch }))
	u2 := j.spawn("u")
	j.cfg.Journal = j.jpid
	w := j.sendTo(u2, func(p actor.Promise) any { return &Fetch{Reply: p} })
	select {
	case atOnce := <-watch.taken:
		if atOnce {
			t.Fatal("the journal answered u's Claim while it writes u's file")
		}
	case <-time.After(waitFor):
		t.Fatalf("u's next actor sent no Claim within %v", waitFor)
	}
	if v, ok := answered(w); ok {
		t.Fatalf("fetch answered while the journal writes the group's file: %+v", v)
	}
	held.open()
	if f := wait[*FetchResult](t, w); f.ErrorCode != 0 || f.Offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Fatalf("u's next actor serves %+v, want t-1=5", f)
	}
	if s, ok := groupFile(t, j.dir, "u"); !ok || s.offsets[TopicPartition{"t", 1}].Offset != 5 {
		t.Fatalf("u's file holds %+v", s.offsets)
	}
	if !strings.Contains(j.logs.String(), "offsets_unsaved_state_written") {
		t.Fatalf("written state not logged:\n%s", j.logs)
	}
	for seg, groups := range j.jstat().Pinned {
		if slices.Contains(groups, "u") {
			t.Fatalf("segment %s still pinned by u", seg)
		}
	}
}
