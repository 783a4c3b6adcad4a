package offsets

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/internal/diskimage"
	"kaas/internal/testwait"
	"kaas/storage"
)

// The start of a broker alone (ReplayConfig.Behind): replay writes no group file, the
// journal hands each group's state to its actor and writes the files behind.

const (
	behindGroups = 300
	behindNow    = int64(1_700_000_000_000)
)

// writeBehindJournal writes a journal of two segments, as a broker alone leaves it when it
// stops (LeaveToJournal): group b-i committed t-0 = i, and the even ones t-0 = 1000+i
// later (second segment). b-0 also has a file from an earlier checkpoint, with t-1 = 7
// that no record holds. It returns what every group must serve.
func writeBehindJournal(t *testing.T, root string) map[string]map[TopicPartition]int64 {
	t.Helper()
	want := map[string]map[TopicPartition]int64{}
	rec := func(g string, off int64) []byte {
		e := Entry{TopicPartition{"t", 0}, Committed{Offset: off, LeaderEpoch: -1, CommitTime: behindNow}}
		return encRecord(t, g, setOp(e))
	}
	var first, second []byte
	for i := range behindGroups {
		g := "b-" + strconv.Itoa(i)
		first = append(first, frame(rec(g, int64(i)))...)
		want[g] = map[TopicPartition]int64{{"t", 0}: int64(i)}
	}
	n := uint64(0)
	for i := 0; i < behindGroups; i += 2 {
		g := "b-" + strconv.Itoa(i)
		second = append(second, frame(rec(g, int64(1000+i)))...)
		want[g][TopicPartition{"t", 0}] = int64(1000 + i)
		n++
	}
	jdir := JournalDir(root, 1)
	writeSegment(t, jdir, 1, first)
	writeSegment(t, jdir, behindGroups+1, second)
	writeGroupFile(t, Dir(root), "b-0", groupState(GroupMeta{}, map[TopicPartition]Committed{
		{"t", 1}: {Offset: 7, LeaderEpoch: -1, CommitTime: behindNow},
	}))
	want["b-0"][TopicPartition{"t", 1}] = 7
	// A group deleted after its last checkpoint: its file is still there, its records
	// say it is gone.
	writeGroupFile(t, Dir(root), "gone", groupState(GroupMeta{ProtocolType: "consumer"}, map[TopicPartition]Committed{
		{"t", 0}: {Offset: 3, LeaderEpoch: -1, CommitTime: behindNow},
	}))
	writeSegment(t, jdir, behindGroups+n+1, frame(encRecord(t, "gone", clearOp())))
	want["gone"] = map[TopicPartition]int64{}
	return want
}

// behindNode is a journal and offsets actors started on root as a broker alone starts.
type behindNode struct {
	t    *testing.T
	root string
	fs   *storage.FaultFS
	sys  *actor.System
	jpid *actor.PID
	rec  *journal.Recovered
	m    *Metrics
	pend *Pending
	// unsaved and kept are how many groups' states and segments the replay left, read
	// before the journal takes rec (it empties it).
	unsaved, kept int
}

// startBehind replays root's journal (Behind) and starts the journal on what it left,
// tuned by tune. It is never stopped gracefully: the test ends it by abandoning it (the
// actor system's shutdown comes after every image of its data dir is taken).
func startBehind(t *testing.T, root string, before func(storage.Op, string) error, tune func(*journal.Config)) *behindNode {
	t.Helper()
	n := &behindNode{t: t, root: root, fs: storage.NewFaultFS(nil), m: NewMetrics(prometheus.NewRegistry()), pend: NewPending()}
	n.fs.SetBefore(before)
	var err error
	n.rec, err = Replay(ReplayConfig{FS: n.fs, OffsetsDir: Dir(root), JournalDir: JournalDir(root, 1), Log: zerolog.Nop(), Behind: true, Pending: n.pend})
	if err != nil {
		t.Fatal(err)
	}
	n.unsaved, n.kept = len(n.rec.Unsaved), len(n.rec.Kept)
	n.sys = actor.NewSystem(zerolog.Nop())
	jc := journal.Config{Dir: JournalDir(root, 1), FS: n.fs, Log: zerolog.Nop(), Recovered: n.rec, SegmentBytes: 64 << 10,
		Save: GroupFileSaver(n.fs, Dir(root)), SaveMany: GroupFilesSaver(n.fs, Dir(root)), Saved: n.pend.Forget,
		UnsavedRetry: time.Hour, WriteBehindPause: time.Hour}
	if tune != nil {
		tune(&jc)
	}
	n.jpid = n.sys.Spawn(journal.Props(jc))
	t.Cleanup(func() {
		n.fs.SetBefore(nil)
		n.sys.Shutdown()
	})
	return n
}

func (n *behindNode) group(g string) *actor.PID {
	return n.sys.Spawn(Props(Config{Group: g, Dir: Dir(n.root), FS: n.fs, Log: zerolog.Nop(), Metrics: n.m,
		Now: func() time.Time { return time.UnixMilli(behindNow) }, Journal: n.jpid, CheckpointInterval: ckptNever}))
}

func (n *behindNode) fetch(pid *actor.PID) *FetchResult {
	n.t.Helper()
	w := n.sys.NewWaiter()
	n.sys.Send(pid, &Fetch{Reply: w.Promise})
	return wait[*FetchResult](n.t, w)
}

// checkServes fetches every group of want from a new actor and compares.
func (n *behindNode) checkServes(want map[string]map[TopicPartition]int64, what string) {
	n.t.Helper()
	for g, offs := range want {
		f := n.fetch(n.group(g))
		if f.ErrorCode != 0 || len(f.Offsets) != len(offs) {
			n.t.Fatalf("%s: %s serves %+v (code %d), want %v", what, g, f.Offsets, f.ErrorCode, offs)
		}
		for tp, o := range offs {
			if f.Offsets[tp].Offset != o {
				n.t.Fatalf("%s: %s serves %v=%d, want %d", what, g, tp, f.Offsets[tp].Offset, o)
			}
		}
	}
}

// groupFiles lists the group files (and tombstones) in dir.
func groupFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range names {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// imageOf copies root's data dir as a crash would leave it, its users still running
// (crashImage: the journal first).
func imageOf(t *testing.T, root string) string {
	t.Helper()
	return diskimage.Crash(t, root, filepath.Join(root, "__cluster", "__offsets_journal"))
}

// TestStartBehindServesWithoutWritingFiles: a start on a journal with records of many
// groups writes none of their files, and every group serves every committed offset (the
// file's merged with the records'); a commit after the start, then a kill -9 (the data
// dir as it is, nothing stopped), then another start loses nothing.
func TestStartBehindServesWithoutWritingFiles(t *testing.T) {
	root := t.TempDir()
	want := writeBehindJournal(t, root)
	before := groupFiles(t, Dir(root))
	n := startBehind(t, root, nil, nil)
	if n.unsaved != behindGroups+1 || n.kept != 3 {
		t.Fatalf("replay left %d groups' state and %d segments, want %d and 3", n.unsaved, n.kept, behindGroups+1)
	}
	// The listings see every group as if its file were written, and not the deleted one.
	ids, err := n.pend.ListGroupIDs(n.fs, Dir(root))
	if err != nil || len(ids) != behindGroups || slices.Contains(ids, "gone") {
		t.Fatalf("groups listed after the start: %d (%v), want %d without gone", len(ids), err, behindGroups)
	}
	if _, ok, err := n.pend.ReadMeta(n.fs, Dir(root), "b-7"); !ok || err != nil {
		t.Fatalf("b-7's meta after the start: %v %v", ok, err)
	}
	if _, ok, _ := n.pend.ReadMeta(n.fs, Dir(root), "gone"); ok {
		t.Fatal("the deleted group's meta is read from its old file")
	}
	if got := groupFiles(t, Dir(root)); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("the start wrote group files: %v, before %v", got, before)
	}
	if s, _ := groupFile(t, Dir(root), "b-0"); len(s.offsets) != 1 {
		t.Fatalf("the start rewrote b-0's file: %+v", s.offsets)
	}
	n.checkServes(want, "after the start")
	b1 := n.group("b-1")
	w := n.sys.NewWaiter()
	n.sys.Send(b1, &Commit{Entries: []Entry{{TopicPartition{"t", 0}, Committed{Offset: 5000, LeaderEpoch: -1, CommitTime: behindNow}}}, Reply: w.Promise})
	if r := wait[*CommitResult](t, w); !codesOK(r.Codes) {
		t.Fatalf("commit after the start: %v", r.Codes)
	}
	want["b-1"][TopicPartition{"t", 0}] = 5000
	if got := groupFiles(t, Dir(root)); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("serving wrote group files: %v, before %v", got, before)
	}

	img := imageOf(t, root)
	again := startBehind(t, img, nil, nil)
	again.checkServes(want, "after a crash and another start")
}

// TestFilesWrittenBehindReplaceSegments: the journal writes the files the start left in
// rounds (WriteBehindBatch), and once every group's file is written the replayed
// segments go. A kill -9 in the middle of a round loses nothing.
func TestFilesWrittenBehindReplaceSegments(t *testing.T) {
	root := t.TempDir()
	want := writeBehindJournal(t, root)
	var creates atomic.Int32
	held := newGate()
	t.Cleanup(held.open)
	n := startBehind(t, root, func(op storage.Op, path string) error {
		if op == storage.OpCreate && strings.HasSuffix(path, tmpSuffix) && creates.Add(1) == behindGroups/2 {
			close(held.entered)
			<-held.release
		}
		return nil
	}, func(c *journal.Config) {
		c.WriteBehindBatch = 40
		c.WriteBehindPause = time.Millisecond
	})
	select {
	case <-held.entered:
	case <-time.After(waitFor):
		t.Fatalf("the journal wrote %d files behind, want at least %d", creates.Load(), behindGroups/2)
	}
	img := imageOf(t, root)
	held.open()
	segs := []string{journal.SegmentName(1), journal.SegmentName(behindGroups + 1), journal.SegmentName(behindGroups + behindGroups/2 + 1)}
	testwait.For(t, waitFor, 5*time.Millisecond, testwait.Cond("the replayed segments deleted", func() bool {
		for _, s := range segs {
			if _, err := os.Stat(filepath.Join(JournalDir(root, 1), s)); err == nil {
				return false
			}
		}
		return true
	}))
	if _, ok := groupFile(t, Dir(root), "gone"); ok {
		t.Fatal("the deleted group's file is still there once the files are written")
	}
	for g, offs := range want {
		if g == "gone" {
			continue
		}
		if _, ok := n.pend.Meta(g); ok {
			t.Fatalf("%s still pending once its file is written", g)
		}
		s, ok := groupFile(t, Dir(root), g)
		if !ok || len(s.offsets) != len(offs) {
			t.Fatalf("%s's file written behind holds %+v, want %v", g, s.offsets, offs)
		}
		for tp, o := range offs {
			if s.offsets[tp].Offset != o {
				t.Fatalf("%s's file written behind holds %v=%d, want %d", g, tp, s.offsets[tp].Offset, o)
			}
		}
	}
	n.checkServes(want, "after the files are written")

	again := startBehind(t, img, nil, nil)
	again.checkServes(want, "after a crash while files were written behind")
}
