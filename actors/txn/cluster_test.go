package txn

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/storage"
)

// ownSet is which ids a test broker coordinates, changed by the test.
type ownSet struct {
	mu  sync.Mutex
	ids map[string]bool
	all bool
}

func (o *ownSet) owns(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all || o.ids[id]
}

func (o *ownSet) set(all bool, ids ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all, o.ids = all, map[string]bool{}
	for _, id := range ids {
		o.ids[id] = true
	}
}

// startNode is broker node's coordinator of a cluster on data: its own journal, the
// shared id files, the ids own gives it (started by load).
func startNode(t *testing.T, data string, node int32, own *ownSet) *coord {
	t.Helper()
	return startNodeGated(t, data, node, own, nil)
}

// startNodeGated is startNode whose id actors write only while lease says so.
func startNodeGated(t *testing.T, data string, node int32, own *ownSet, lease *atomic.Bool) *coord {
	t.Helper()
	var gate func() func() bool
	if lease != nil {
		gate = func() func() bool { return lease.Load }
	}
	c := &coord{t: t, dir: data, sent: make(chan sent, 1000), answer: func(Marker) *int16 { return ok16() },
		met: NewMetrics(prometheus.NewRegistry()), writes: &journalWrites{}}
	c.sys = actor.NewSystem(zerolog.Nop())
	jdir := NodeJournalDir(data, node)
	rep, err := ReplayDirs(storage.OSFS{}, IDsDir(data), jdir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	c.jpid, err = c.sys.SpawnNamed(journal.Props(journal.Config{Dir: jdir, Log: zerolog.Nop(), FirstSeq: rep.Next,
		SegmentBytes: 1 << 20, Metrics: c.writes}), "txn-journal")
	if err != nil {
		t.Fatal(err)
	}
	topics := c.sys.Spawn(actor.PropsOf(func() actor.Actor { return &fakeTopics{next: int64(node) * 100} }))
	sides := Sides{
		WriteMarker: func(_ actor.Context, m Marker, reply actor.Promise) {
			c.sent <- sent{marker: &m, at: time.Now(), reply: reply}
			reply.Resolve(int16(0))
		},
		EndOffsets: func(_ actor.Context, g GroupMarker, reply actor.Promise) { reply.Resolve(int16(0)) },
	}
	c.mgr, err = c.sys.SpawnNamed(ManagerProps(ManagerConfig{
		Replayed: &Replayed{Next: rep.Next}, Journal: c.jpid, Dir: IDsDir(data), Topics: topics, Sides: sides,
		Log: zerolog.Nop(), Settings: Settings{CheckpointDelay: time.Hour, MarkerBackoff: 10 * time.Millisecond, MaxPartitions: 100},
		Metrics: c.met, Owns: own.owns, Gate: gate,
	}), "transactions")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *coord) load(owns func(string) bool) error {
	v := c.ask(func(p actor.Promise) any { return &Load{Owns: owns, Reply: p} })
	err, _ := v.(error)
	return err
}

func (c *coord) release(keep func(string) bool) {
	c.ask(func(p actor.Promise) any { return &Release{Keep: keep, Reply: p} })
}

func readFile(t *testing.T, data, id string) *Meta {
	t.Helper()
	f, err := readID(storage.OSFS{}, IDsDir(data), offsets.FileName(id))
	if err != nil {
		t.Fatal(err)
	}
	return f.Meta
}

// TestClusterReleaseSavesThenAdopterGoesOn: a broker releases an id with a transaction
// open (its file not saved yet: checkpoints wait an hour): the release saves the file
// before it answers, the releasing broker answers NOT_COORDINATOR from then on, and the
// broker that loads the id goes on with the same producer, epoch and partitions; its
// records are newer (Version) than the releasing broker's, so the releasing broker's
// restart keeps them.
func TestClusterReleaseSavesThenAdopterGoesOn(t *testing.T) {
	data := t.TempDir()
	own0, own1 := &ownSet{}, &ownSet{}
	own0.set(false, "tx")
	n0 := startNode(t, data, 0, own0)
	r := n0.init("tx", 60000)
	if r.ErrorCode != 0 {
		t.Fatalf("init: %+v", r)
	}
	if code := n0.add("tx", r.ProducerID, r.ProducerEpoch, map[string][]int32{"a": {0}}); code != 0 {
		t.Fatalf("add: %d", code)
	}
	if _, err := os.Stat(filepath.Join(IDsDir(data), offsets.FileName("tx"))); !os.IsNotExist(err) {
		t.Fatalf("the id's file exists before the release (%v): the test would not show the release saves it", err)
	}
	own0.set(false)
	n0.release(own0.owns)
	m := readFile(t, data, "tx")
	if m.State != Ongoing || !m.has("a", 0) || m.ProducerID != r.ProducerID || m.Version != 2 || m.CoordinatorEpoch != 2 {
		t.Fatalf("file after release: %+v", m)
	}
	if got := n0.init("tx", 60000); got.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("init on the releasing broker: %+v, want NOT_COORDINATOR", got)
	}
	if d := n0.describe("tx"); d.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("describe on the releasing broker: %+v", d)
	}
	n0.stop()

	own1.set(false, "tx")
	n1 := startNode(t, data, 1, own1)
	if err := n1.load(own1.owns); err != nil {
		t.Fatal(err)
	}
	if d := n1.describe("tx"); d.State != Ongoing || d.ProducerID != r.ProducerID || d.Partitions["a"] == nil {
		t.Fatalf("adopted: %+v", d)
	}
	if e := n1.end("tx", r.ProducerID, r.ProducerEpoch, true, false); e.ErrorCode != 0 {
		t.Fatalf("commit on the adopting broker: %+v", e)
	}
	s := n1.nextSent()
	// The releasing broker's last record was version 2; the adopter numbers its first
	// past the gap (a record the releasing broker could have written unanswered).
	if want := int32(2 + adoptGap + 1); s.marker == nil || s.marker.CoordinatorEpoch != want || !s.marker.Commit {
		t.Fatalf("marker %+v: want the commit's at coordinator epoch %d (above the releasing broker's 2)", s.marker, want)
	}
	n1.waitState("tx", CompleteCommit)
	n1.release(func(string) bool { return false })
	n1.stop()
	// Broker 0 restarts: its journal's records of tx (Version 1, 2) are older than the
	// file broker 1 saved (6); its replay keeps the file.
	rep, err := ReplayDirs(storage.OSFS{}, IDsDir(data), NodeJournalDir(data, 0), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if m := rep.States["tx"]; m == nil || m.State != CompleteCommit || m.Version != 2+adoptGap+2 {
		t.Fatalf("after broker 0's replay: %+v, want broker 1's CompleteCommit (version %d)", m, 2+adoptGap+2)
	}
}

// TestClusterAdoptReadsALapsedPeersJournal: a broker that stopped without saving (its
// lease lapsed, a kill) leaves the id's newest state in its journal only; Adopt writes
// it to the id's file for the broker that owns the id now, leaves the ids it does not
// own alone, and never takes a peer's record older than the file.
func TestClusterAdoptReadsALapsedPeersJournal(t *testing.T) {
	data := t.TempDir()
	own0 := &ownSet{}
	own0.set(true)
	n0 := startNode(t, data, 0, own0)
	r := n0.init("mine", 60000)
	n0.add("mine", r.ProducerID, r.ProducerEpoch, map[string][]int32{"a": {1}})
	if e := n0.end("mine", r.ProducerID, r.ProducerEpoch, false, false); e.ErrorCode != 0 {
		t.Fatalf("abort: %+v", e)
	}
	n0.waitState("mine", CompleteAbort)
	o := n0.init("other", 60000)
	n0.add("other", o.ProducerID, o.ProducerEpoch, map[string][]int32{"a": {2}})
	n0.stop() // a crash: nothing saved
	// A file newer than the peer's journal is kept ("stale": saved at Version 9 by a
	// third broker since).
	stale := &Meta{ID: "stale", ProducerID: 77, State: CompleteCommit, Version: 9, CoordinatorEpoch: 9, StartMs: -1}
	if err := saveID(storage.OSFS{}, IDsDir(data), stale, 0); err != nil {
		t.Fatal(err)
	}
	old := &Meta{ID: "stale", ProducerID: 77, State: Ongoing, Version: 5, CoordinatorEpoch: 5}
	f := journal.StartFrame(nil)
	f = journal.AppendRecord(f, encode(old))
	journal.FinishFrame(f, 1)
	if err := os.MkdirAll(NodeJournalDir(data, 2), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(NodeJournalDir(data, 2), journal.SegmentName(1)), f, 0o600); err != nil {
		t.Fatal(err)
	}

	owns := func(id string) bool { return id == "mine" || id == "stale" }
	n, err := Adopt(AdoptConfig{IDsDir: IDsDir(data), JournalDirs: []string{NodeJournalDir(data, 0), NodeJournalDir(data, 2)},
		Owns: owns, Log: zerolog.Nop()})
	if err != nil || n != 1 {
		t.Fatalf("adopt: %d files, %v; want 1", n, err)
	}
	if m := readFile(t, data, "mine"); m.State != CompleteAbort || m.ProducerID != r.ProducerID {
		t.Fatalf("mine: %+v", m)
	}
	if m := readFile(t, data, "stale"); m.Version != 9 || m.State != CompleteCommit {
		t.Fatalf("stale: %+v, want the file's Version 9 kept", m)
	}
	if _, err := os.Stat(filepath.Join(IDsDir(data), offsets.FileName("other"))); !os.IsNotExist(err) {
		t.Fatalf("an id not owned was adopted: %v", err)
	}
	// The adopting broker starts what it owns, with the producer the journal held.
	own1 := &ownSet{}
	own1.set(false, "mine", "stale")
	n1 := startNode(t, data, 1, own1)
	defer n1.stop()
	if err := n1.load(own1.owns); err != nil {
		t.Fatal(err)
	}
	if d := n1.describe("mine"); d.State != CompleteAbort || d.ProducerID != r.ProducerID {
		t.Fatalf("mine on the adopting broker: %+v", d)
	}
	if d := n1.describe("other"); d.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("other on the adopting broker: %+v, want NOT_COORDINATOR", d)
	}
	// InitProducerId bumps the adopted producer's epoch rather than starting afresh.
	if got := n1.init("mine", 60000); got.ErrorCode != 0 || got.ProducerID != r.ProducerID || got.ProducerEpoch != r.ProducerEpoch+1 {
		t.Fatalf("init after adoption: %+v, want producer %d at epoch %d", got, r.ProducerID, r.ProducerEpoch+1)
	}
}

// TestUnreadableFileRefusesTheID: an id whose file cannot be read is not started afresh
// (that would forget its producer and an undecided transaction): its requests get
// COORDINATOR_NOT_AVAILABLE, and the other ids are served; in a cluster (Load) and on a
// broker alone (Replay) alike.
func TestUnreadableFileRefusesTheID(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		data := t.TempDir()
		if err := os.MkdirAll(IDsDir(data), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(IDsDir(data), offsets.FileName("broken")), []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := startCoord(t, data, func(Marker) *int16 { return ok16() })
		defer c.stop()
		if got := c.init("broken", 60000); got.ErrorCode != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("init of the id with an unreadable file: %+v, want COORDINATOR_NOT_AVAILABLE", got)
		}
		if got := c.init("fine", 60000); got.ErrorCode != 0 {
			t.Fatalf("init of another id: %+v", got)
		}
	})
	t.Run("cluster", testClusterUnreadableFile)
}

func testClusterUnreadableFile(t *testing.T) {
	data := t.TempDir()
	if err := os.MkdirAll(IDsDir(data), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(IDsDir(data), offsets.FileName("broken")), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := &ownSet{}
	own.set(true)
	n := startNode(t, data, 0, own)
	defer n.stop()
	if err := n.load(own.owns); err != nil {
		t.Fatal(err)
	}
	if got := n.init("broken", 60000); got.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("init of the id with an unreadable file: %+v, want COORDINATOR_NOT_AVAILABLE", got)
	}
	if got := n.init("fine", 60000); got.ErrorCode != 0 {
		t.Fatalf("init of another id: %+v", got)
	}
}

// TestClusterLapsedLeaseTakenAgain: a broker whose lease lapses writes nothing more (its
// release cannot save the id's file) and, once it holds the lease again and adopts the
// id back, takes it from its own journal: the open transaction is still there.
func TestClusterLapsedLeaseTakenAgain(t *testing.T) {
	data := t.TempDir()
	own := &ownSet{}
	own.set(true)
	var lease atomic.Bool
	lease.Store(true)
	n := startNodeGated(t, data, 0, own, &lease)
	defer n.stop()
	r := n.init("tx", 60000)
	if code := n.add("tx", r.ProducerID, r.ProducerEpoch, map[string][]int32{"a": {3}}); code != 0 {
		t.Fatalf("add: %d", code)
	}
	lease.Store(false)
	if got := n.init("other", 60000); got.ErrorCode == 0 {
		t.Fatalf("init with the lease lapsed: %+v, want an error (nothing written)", got)
	}
	n.release(func(string) bool { return false })
	if _, err := os.Stat(filepath.Join(IDsDir(data), offsets.FileName("tx"))); !os.IsNotExist(err) {
		t.Fatalf("the release saved the id's file with the lease lapsed (%v)", err)
	}
	lease.Store(true)
	if _, err := Adopt(AdoptConfig{IDsDir: IDsDir(data), JournalDirs: []string{NodeJournalDir(data, 0)},
		Owns: own.owns, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if err := n.load(own.owns); err != nil {
		t.Fatal(err)
	}
	if d := n.describe("tx"); d.State != Ongoing || d.ProducerID != r.ProducerID || d.Partitions["a"] == nil {
		t.Fatalf("after the lease was taken again: %+v, want the open transaction", d)
	}
}
