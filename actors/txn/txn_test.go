package txn

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/partition"
	"kaas/internal/testwait"
	"kaas/storage"
)

// fakeTopics hands out producer ids as the topics manager does.
type fakeTopics struct{ next int64 }

func (f *fakeTopics) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*partition.InitProducerID); ok {
		f.next++
		m.Reply.Resolve(&partition.ProducerID{ID: 1000 + f.next})
	}
}

// sent is one side effect the coordinator asked for.
type sent struct {
	marker *Marker
	group  *GroupMarker
	at     time.Time
	reply  actor.Promise
}

// coord is a coordinator over dir with fake sides: every marker asked for is reported
// on sent and answered with answer's code (nil: never answered, as a broker killed
// before the partition wrote it).
type coord struct {
	t      *testing.T
	sys    *actor.System
	dir    string
	jpid   *actor.PID
	mgr    *actor.PID
	sent   chan sent
	answer func(Marker) *int16
	met    *Metrics
	writes *journalWrites
}

// journalWrites counts the journal's writes (a write and its fdatasync each).
type journalWrites struct{ n atomic.Int64 }

func (w *journalWrites) Wrote(err error, _ time.Duration, _ int) {
	if err == nil {
		w.n.Add(1)
	}
}

func (w *journalWrites) Quarantined() {}

func startCoord(t *testing.T, dir string, answer func(Marker) *int16) *coord {
	t.Helper()
	return startCoordWith(t, dir, answer, nil)
}

func startCoordWith(t *testing.T, dir string, answer func(Marker) *int16, mutate func(*Settings)) *coord {
	t.Helper()
	return startCoordFS(t, dir, storage.OSFS{}, answer, mutate)
}

// startCoordFS is startCoordWith with the journal's file access fsys.
func startCoordFS(t *testing.T, dir string, fsys storage.FS, answer func(Marker) *int16, mutate func(*Settings)) *coord {
	t.Helper()
	c := &coord{t: t, dir: dir, sent: make(chan sent, 1000), answer: answer, met: NewMetrics(prometheus.NewRegistry()),
		writes: &journalWrites{}}
	c.sys = actor.NewSystem(zerolog.Nop())
	rep, err := Replay(storage.OSFS{}, dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	c.jpid, err = c.sys.SpawnNamed(journal.Props(journal.Config{Dir: JournalDir(dir), FS: fsys, Log: zerolog.Nop(), FirstSeq: rep.Next, SegmentBytes: 1 << 20,
		Metrics: c.writes}), "txn-journal")
	if err != nil {
		t.Fatal(err)
	}
	topics := c.sys.Spawn(actor.PropsOf(func() actor.Actor { return &fakeTopics{next: int64(len(rep.States)) * 10} }))
	sides := Sides{
		WriteMarker: func(_ actor.Context, m Marker, reply actor.Promise) {
			c.sent <- sent{marker: &m, at: time.Now(), reply: reply}
			if code := c.answer(m); code != nil {
				reply.Resolve(*code)
			}
		},
		EndOffsets: func(_ actor.Context, g GroupMarker, reply actor.Promise) {
			c.sent <- sent{group: &g, at: time.Now()}
			reply.Resolve(int16(0))
		},
	}
	settings := Settings{CheckpointDelay: time.Hour, MarkerBackoff: 10 * time.Millisecond, MaxPartitions: 100}
	if mutate != nil {
		mutate(&settings)
	}
	c.mgr, err = c.sys.SpawnNamed(ManagerProps(ManagerConfig{
		Replayed: rep, Journal: c.jpid, Dir: IDsDir(dir), Topics: topics, Sides: sides, Log: zerolog.Nop(),
		Settings: settings, Metrics: c.met,
	}), "transactions")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stop stops everything as a crash would leave it on disk: nothing saved past what the
// journal made durable.
func (c *coord) stop() {
	c.t.Helper()
	if err := c.sys.Stop(c.mgr, 5*time.Second); err != nil {
		c.t.Fatal(err)
	}
	if err := c.sys.Poison(c.jpid, 5*time.Second); err != nil {
		c.t.Fatal(err)
	}
	c.sys.Shutdown()
}

func (c *coord) ask(msg func(actor.Promise) any) any {
	c.t.Helper()
	w := c.sys.NewWaiter()
	c.sys.Send(c.mgr, msg(w.Promise))
	v, ok := w.Wait(5 * time.Second)
	if !ok {
		c.t.Fatal("no answer")
	}
	return v
}

// implicitAdd sends the implicit add of topic's partition to id's transaction (Produce
// v12, KIP-890 part 2) and returns the waiter of its answer, *PartitionsVerified.
func (c *coord) implicitAdd(id string, pid int64, epoch int16, topic string, part int32) *actor.Waiter {
	w := c.sys.NewWaiter()
	c.sys.Send(c.mgr, &VerifyPartitions{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch,
		Partitions: map[string][]int32{topic: {part}}, Add: true, Reply: w.Promise})
	return w
}

func (c *coord) init(id string, timeoutMs int32) *ProducerIDInitialized {
	return c.ask(func(p actor.Promise) any {
		return &InitProducerID{TransactionalID: id, TimeoutMs: timeoutMs, ProducerID: -1, ProducerEpoch: -1, Reply: p}
	}).(*ProducerIDInitialized)
}

func (c *coord) add(id string, pid int64, epoch int16, tps map[string][]int32) int16 {
	v := c.ask(func(p actor.Promise) any {
		return &AddPartitions{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Partitions: tps, Reply: p}
	}).(*PartitionsVerified)
	for _, codes := range v.Codes {
		for _, code := range codes {
			return code
		}
	}
	return -1
}

func (c *coord) end(id string, pid int64, epoch int16, commit, tv2 bool) *TxnEnded {
	return c.ask(func(p actor.Promise) any {
		return &EndTxn{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, TV2: tv2, Reply: p}
	}).(*TxnEnded)
}

func (c *coord) describe(id string) Description {
	return c.ask(func(p actor.Promise) any { return &Describe{IDs: []string{id}, Reply: p} }).(*Described).Txns[0]
}

// waitState waits for id to reach s (the markers run after the answer).
func (c *coord) waitState(id string, s State) {
	c.t.Helper()
	testwait.For(c.t, 5*time.Second, 5*time.Millisecond, func() error {
		if d := c.describe(id); d.State != s || d.ErrorCode != 0 {
			return fmt.Errorf("%s: state %v (error %d), want %v", id, d.State, d.ErrorCode, s)
		}
		return nil
	})
}

func (c *coord) nextSent() sent {
	c.t.Helper()
	select {
	case s := <-c.sent:
		return s
	case <-time.After(5 * time.Second):
		c.t.Fatal("no marker sent")
		return sent{}
	}
}

func ok16() *int16 { v := int16(0); return &v }

func TestCommitWritesMarkersThenCompletes(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return ok16() })
	defer c.stop()
	r := c.init("tx", 60000)
	if r.ErrorCode != 0 || r.ProducerEpoch != 0 {
		t.Fatalf("init: %+v", r)
	}
	if code := c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0, 1}}); code != 0 {
		t.Fatalf("add: %d", code)
	}
	g := c.ask(func(p actor.Promise) any {
		return &AddOffsets{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0, Group: "g", Reply: p}
	}).(*GroupVerified)
	if g.ErrorCode != 0 {
		t.Fatalf("add offsets: %d", g.ErrorCode)
	}
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	seen := map[string]bool{}
	for range 3 {
		s := c.nextSent()
		switch {
		case s.marker != nil:
			if !s.marker.Commit || s.marker.ProducerID != r.ProducerID || s.marker.ProducerEpoch != 0 {
				t.Fatalf("marker %+v", s.marker)
			}
			seen[s.marker.Topic+string(rune('0'+s.marker.Partition))] = true
		case s.group != nil:
			seen["group "+s.group.Group] = s.group.Commit
		}
	}
	if !seen["a0"] || !seen["a1"] || !seen["group g"] {
		t.Fatalf("side effects %v", seen)
	}
	c.waitState("tx", CompleteCommit)
	// A retried EndTxn (TV1) is answered NONE; the opposite one INVALID_TXN_STATE.
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("retry: %+v", e)
	}
	if e := c.end("tx", r.ProducerID, 0, false, false); e.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("abort after commit: %+v", e)
	}
}

// TestMarkersRetriedUntilWritten: a retriable code sends the marker again.
func TestMarkersRetriedUntilWritten(t *testing.T) {
	fails := 2
	c := startCoord(t, t.TempDir(), func(Marker) *int16 {
		if fails > 0 { // read and written on the coordinator's turn only
			fails--
			v := kerr.KafkaStorageError.Code
			return &v
		}
		return ok16()
	})
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	c.end("tx", r.ProducerID, 0, false, false)
	for range 3 {
		c.nextSent()
	}
	c.waitState("tx", CompleteAbort)
}

// TestRestartMidPrepareRedrivesMarkers: the broker dies after the PrepareCommit is
// durable and before any marker is written; the restarted coordinator writes them and
// completes the commit.
func TestRestartMidPrepareRedrivesMarkers(t *testing.T) {
	dir := t.TempDir()
	c := startCoord(t, dir, func(Marker) *int16 { return nil }) // markers never answered
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {3}})
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	c.nextSent()
	c.stop()

	c = startCoord(t, dir, func(Marker) *int16 { return ok16() })
	defer c.stop()
	s := c.nextSent()
	if s.marker == nil || s.marker.Topic != "a" || s.marker.Partition != 3 || !s.marker.Commit || s.marker.ProducerID != r.ProducerID {
		t.Fatalf("after restart: %+v", s.marker)
	}
	c.waitState("tx", CompleteCommit)
	// The next InitProducerId bumps the epoch of the same producer id.
	if r2 := c.init("tx", 60000); r2.ProducerID != r.ProducerID || r2.ProducerEpoch != 1 {
		t.Fatalf("init after restart: %+v", r2)
	}
}

// TestTimeoutAbortsAndFences: a stalled transaction is aborted at its timeout (+1 s at
// most) with the epoch bumped; the stalled producer is fenced.
func TestTimeoutAbortsAndFences(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return ok16() })
	defer c.stop()
	r := c.init("tx", 300)
	start := time.Now()
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	s := c.nextSent()
	if took := s.at.Sub(start); took > 1300*time.Millisecond || took < 250*time.Millisecond {
		t.Fatalf("aborted after %v (timeout 300 ms)", took)
	}
	if s.marker.Commit || s.marker.ProducerEpoch != 1 {
		t.Fatalf("timeout marker %+v: want an abort at the bumped epoch", s.marker)
	}
	c.waitState("tx", CompleteAbort)
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("stalled producer's commit: %+v", e)
	}
	if code := c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}}); code != kerr.ProducerFenced.Code {
		t.Fatalf("stalled producer's add: %d", code)
	}
}

// TestRestartKeepsOngoingDeadline: an Ongoing transaction survives a restart, and its
// timeout still counts from its start.
func TestRestartKeepsOngoingDeadline(t *testing.T) {
	dir := t.TempDir()
	c := startCoord(t, dir, func(Marker) *int16 { return ok16() })
	r := c.init("tx", 1500)
	start := time.Now()
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	c.stop()

	c = startCoord(t, dir, func(Marker) *int16 { return ok16() })
	defer c.stop()
	if d := c.describe("tx"); d.State != Ongoing || d.ProducerID != r.ProducerID || len(d.Partitions["a"]) != 1 {
		t.Fatalf("after restart: %+v", d)
	}
	s := c.nextSent()
	if took := s.at.Sub(start); took > 2500*time.Millisecond || s.marker.Commit {
		t.Fatalf("aborted after %v, marker %+v", took, s.marker)
	}
}

// TestZombieFence: InitProducerId on an Ongoing transaction aborts it at a bumped
// epoch and answers CONCURRENT_TRANSACTIONS; the retry bumps again.
func TestZombieFence(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return ok16() })
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	if r2 := c.init("tx", 60000); r2.ErrorCode != kerr.ConcurrentTransactions.Code {
		t.Fatalf("fence: %+v", r2)
	}
	if s := c.nextSent(); s.marker.Commit || s.marker.ProducerEpoch != 1 {
		t.Fatalf("fence marker %+v", s.marker)
	}
	c.waitState("tx", CompleteAbort)
	if r3 := c.init("tx", 60000); r3.ErrorCode != 0 || r3.ProducerEpoch != 2 {
		t.Fatalf("retry: %+v", r3)
	}
}

// TestTV2EmptyAbortAndBump: EndTxn v5 bumps the epoch every time; an empty abort is legal.
func TestTV2EmptyAbortAndBump(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return ok16() })
	defer c.stop()
	r := c.init("tx", 60000)
	e := c.end("tx", r.ProducerID, 0, false, true)
	if e.ErrorCode != 0 || e.ProducerEpoch != 1 || e.ProducerID != r.ProducerID {
		t.Fatalf("empty abort: %+v", e)
	}
	c.waitState("tx", CompleteAbort)
	v := c.ask(func(p actor.Promise) any {
		return &VerifyPartitions{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 1, Partitions: map[string][]int32{"a": {0}}, Add: true, Reply: p}
	}).(*PartitionsVerified)
	if v.Codes["a"][0] != 0 {
		t.Fatalf("implicit add: %v", v.Codes)
	}
	if e := c.end("tx", r.ProducerID, 1, true, true); e.ErrorCode != 0 || e.ProducerEpoch != 2 {
		t.Fatalf("commit: %+v", e)
	}
	if s := c.nextSent(); !s.marker.Commit || s.marker.ProducerEpoch != 2 {
		t.Fatalf("TV2 marker carries the bumped epoch: %+v", s.marker)
	}
	c.waitState("tx", CompleteCommit)
	if e := c.end("tx", r.ProducerID, 1, true, true); e.ErrorCode != 0 || e.ProducerEpoch != 2 {
		t.Fatalf("retried commit: %+v", e)
	}
	// Unknown ids.
	if e := c.end("nope", 1, 0, true, true); e.ErrorCode != kerr.InvalidProducerIDMapping.Code {
		t.Fatalf("unknown id: %+v", e)
	}
	if d := c.describe("nope"); d.ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Fatalf("describe unknown: %+v", d)
	}
	l := c.ask(func(p actor.Promise) any {
		return &List{States: []string{"CompleteCommit"}, MinDurationMs: -1, Reply: p}
	}).(*Listed)
	if len(l.Txns) != 1 || l.Txns[0].ID != "tx" {
		t.Fatalf("list: %+v", l)
	}
}

// TestIdleIDExpires: an id idle past transactional.id.expiration.ms is forgotten; the
// next InitProducerId for it starts afresh with a new producer id.
func TestIdleIDExpires(t *testing.T) {
	dir := t.TempDir()
	c := startCoordWith(t, dir, func(Marker) *int16 { return ok16() }, func(s *Settings) { s.Expiration = 300 * time.Millisecond })
	defer c.stop()
	r := c.init("old", 60000)
	testwait.For(t, 5*time.Second, 10*time.Millisecond, func() error {
		if d := c.describe("old"); d.ErrorCode != kerr.TransactionalIDNotFound.Code {
			return fmt.Errorf("old: %+v", d)
		}
		return nil
	})
	if r2 := c.init("old", 60000); r2.ErrorCode != 0 || r2.ProducerID == r.ProducerID || r2.ProducerEpoch != 0 {
		t.Fatalf("after expiry: %+v (was %+v)", r2, r)
	}
}

// TestImplicitAddWaitsForPreviousMarkers: under TV2 the producer starts its next
// transaction at the bumped epoch while the last one's markers are still being written;
// its implicit add (Produce v12) waits for them instead of failing.
func TestImplicitAddWaitsForPreviousMarkers(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return nil }) // the test answers
	defer c.stop()
	r := c.init("tx", 60000)
	add := func(epoch int16) *actor.Waiter {
		w := c.sys.NewWaiter()
		c.sys.Send(c.mgr, &VerifyPartitions{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: epoch,
			Partitions: map[string][]int32{"a": {0}}, Add: true, Reply: w.Promise})
		return w
	}
	if v, _ := add(0).Wait(5 * time.Second); v.(*PartitionsVerified).Codes["a"][0] != 0 {
		t.Fatalf("first add: %+v", v)
	}
	e := c.end("tx", r.ProducerID, 0, true, true)
	if e.ErrorCode != 0 || e.ProducerEpoch != 1 {
		t.Fatalf("end: %+v", e)
	}
	marker := c.nextSent() // PrepareCommit durable, its marker not answered yet
	w := add(1)
	if d := c.describe("tx"); d.State != PrepareCommit {
		t.Fatalf("state %v while the marker is unanswered", d.State)
	}
	marker.reply.Resolve(int16(0))
	v, ok := w.Wait(5 * time.Second)
	if !ok || v.(*PartitionsVerified).Codes["a"][0] != 0 {
		t.Fatalf("add of the next transaction: %+v", v)
	}
	if d := c.describe("tx"); d.State != Ongoing || d.Epoch != 1 {
		t.Fatalf("next transaction: %+v", d)
	}
}

// The implicit add of the producer's next transaction, parked while the last one's
// marker is written, is made durable with the Complete*: one journal frame, one
// fdatasync, for both transitions; the state goes through CompleteCommit to Ongoing.
func TestCompleteAndNextOngoingOneFdatasync(t *testing.T) {
	dir := t.TempDir()
	c := startCoord(t, dir, func(Marker) *int16 { return nil }) // the test answers
	r := c.init("tx", 60000)
	add := func(epoch int16, part int32) *actor.Waiter {
		return c.implicitAdd("tx", r.ProducerID, epoch, "a", part)
	}
	if v, _ := add(0, 0).Wait(5 * time.Second); v.(*PartitionsVerified).Codes["a"][0] != 0 {
		t.Fatalf("first add: %+v", v)
	}
	if e := c.end("tx", r.ProducerID, 0, true, true); e.ErrorCode != 0 || e.ProducerEpoch != 1 {
		t.Fatalf("end: %+v", e)
	}
	marker := c.nextSent()
	w := add(1, 1)
	if d := c.describe("tx"); d.State != PrepareCommit {
		t.Fatalf("state %v while the marker is unanswered", d.State)
	}
	writes := c.writes.n.Load()
	marker.reply.Resolve(int16(0))
	v, ok := w.Wait(5 * time.Second)
	if !ok || v.(*PartitionsVerified).Codes["a"][1] != 0 {
		t.Fatalf("add of the next transaction: %+v", v)
	}
	if n := c.writes.n.Load() - writes; n != 1 {
		t.Fatalf("the Complete* and the next Ongoing took %d journal writes (a write and its fdatasync each), want 1", n)
	}
	if d := c.describe("tx"); d.State != Ongoing || d.Epoch != 1 || len(d.Partitions["a"]) != 1 || d.Partitions["a"][0] != 1 {
		t.Fatalf("next transaction: %+v", d)
	}
	// Both records replay: the id comes back in the next transaction.
	c.stop()
	c = startCoord(t, dir, func(Marker) *int16 { return ok16() })
	defer c.stop()
	if d := c.describe("tx"); d.State != Ongoing || d.Epoch != 1 || d.Partitions["a"][0] != 1 {
		t.Fatalf("replayed: %+v", d)
	}
}

// A TV1 producer's explicit adds of its next transaction (AddPartitionsToTxn,
// AddOffsetsToTxn), parked while the last one's marker is written, are made durable
// with the Complete* as the implicit add is: one journal write for the Complete* and the
// next Ongoing, not one after the other.
func TestCompleteAndNextExplicitAddOneFdatasync(t *testing.T) {
	for _, kind := range []string{"partitions", "offsets"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			c := startCoord(t, dir, func(Marker) *int16 { return nil }) // the test answers
			r := c.init("tx", 60000)
			if code := c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}}); code != 0 {
				t.Fatalf("add: %d", code)
			}
			if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
				t.Fatalf("end: %+v", e)
			}
			marker := c.nextSent()
			w := c.sys.NewWaiter()
			if kind == "partitions" {
				c.sys.Send(c.mgr, &AddPartitions{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0,
					Partitions: map[string][]int32{"a": {1}}, Reply: w.Promise})
			} else {
				c.sys.Send(c.mgr, &AddOffsets{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0,
					Group: "g", Reply: w.Promise})
			}
			if d := c.describe("tx"); d.State != PrepareCommit {
				t.Fatalf("state %v while the marker is unanswered", d.State)
			}
			writes := c.writes.n.Load()
			marker.reply.Resolve(int16(0))
			v, ok := w.Wait(5 * time.Second)
			if !ok {
				t.Fatal("the next transaction's add is not answered")
			}
			switch v := v.(type) {
			case *PartitionsVerified:
				if v.Codes["a"][1] != 0 {
					t.Fatalf("add of the next transaction: %+v", v)
				}
			case *GroupVerified:
				if v.ErrorCode != 0 {
					t.Fatalf("add of the next transaction's offsets: %+v", v)
				}
			default:
				t.Fatalf("answer %T", v)
			}
			if n := c.writes.n.Load() - writes; n != 1 {
				t.Fatalf("the Complete* and the next Ongoing took %d journal writes (a write and its fdatasync each), want 1", n)
			}
			check := func(d Description) {
				t.Helper()
				if d.State != Ongoing || d.Epoch != 0 {
					t.Fatalf("next transaction: %+v", d)
				}
				if kind == "partitions" && (len(d.Partitions["a"]) != 1 || d.Partitions["a"][0] != 1) {
					t.Fatalf("next transaction's partitions: %+v", d)
				}
			}
			check(c.describe("tx"))
			// Both records replay: the id comes back in the next transaction.
			c.stop()
			c = startCoord(t, dir, func(Marker) *int16 { return ok16() })
			defer c.stop()
			check(c.describe("tx"))
		})
	}
}

// A failed write of the Complete* with the next Ongoing leaves both undone: the add
// waits again, and is answered once the Complete* written again lets it go on.
func TestCompleteAndNextOngoingFailedWrite(t *testing.T) {
	fsys := storage.NewFaultFS(storage.OSFS{})
	c := startCoordFS(t, t.TempDir(), fsys, func(Marker) *int16 { return nil }, nil) // the test answers
	defer c.stop()
	r := c.init("tx", 60000)
	add := func(epoch int16, part int32) *actor.Waiter {
		return c.implicitAdd("tx", r.ProducerID, epoch, "a", part)
	}
	if v, _ := add(0, 0).Wait(5 * time.Second); v.(*PartitionsVerified).Codes["a"][0] != 0 {
		t.Fatalf("first add: %+v", v)
	}
	if e := c.end("tx", r.ProducerID, 0, true, true); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	marker := c.nextSent()
	w := add(1, 1)
	if d := c.describe("tx"); d.State != PrepareCommit {
		t.Fatalf("state %v while the marker is unanswered", d.State)
	}
	fsys.FailNext(storage.OpSync, nil)
	marker.reply.Resolve(int16(0))
	v, ok := w.Wait(5 * time.Second)
	if !ok || v.(*PartitionsVerified).Codes["a"][1] != 0 {
		t.Fatalf("add of the next transaction after a failed write: %+v", v)
	}
	if d := c.describe("tx"); d.State != Ongoing || d.Epoch != 1 || d.Partitions["a"][0] != 1 {
		t.Fatalf("next transaction: %+v", d)
	}
	if n := fsys.Count(storage.OpSync); n < 2 {
		t.Fatalf("%d fdatasyncs", n)
	}
}

// Requests Apache answers CONCURRENT_TRANSACTIONS while the last transaction's markers
// are written (its client then backs off) wait for the Complete* instead and get the
// answer the retry would: an InitProducerId (a TV2 client's reload of its producer id),
// a TV1 client's AddPartitionsToTxn of its next transaction, an EndTxn's retry.
func TestRequestsDuringCompletionWaitForIt(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return nil }) // the test answers
	defer c.stop()
	r := c.init("tx", 60000)
	tps := map[string][]int32{"a": {0}}
	if code := c.add("tx", r.ProducerID, 0, tps); code != 0 {
		t.Fatalf("add: %d", code)
	}
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	marker := c.nextSent()
	send := func(mk func(actor.Promise) any) *actor.Waiter {
		w := c.sys.NewWaiter()
		c.sys.Send(c.mgr, mk(w.Promise))
		return w
	}
	endAgain := send(func(p actor.Promise) any {
		return &EndTxn{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0, Commit: true, Reply: p}
	})
	addNext := send(func(p actor.Promise) any {
		return &AddPartitions{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0, Partitions: tps, Reply: p}
	})
	if d := c.describe("tx"); d.State != PrepareCommit {
		t.Fatalf("state %v while the marker is unanswered", d.State)
	}
	for _, w := range []*actor.Waiter{endAgain, addNext} {
		select {
		case v := <-w.C:
			t.Fatalf("answered before the Complete*: %+v", v)
		default:
		}
	}
	marker.reply.Resolve(int16(0))
	if v, ok := endAgain.Wait(5 * time.Second); !ok || v.(*TxnEnded).ErrorCode != 0 {
		t.Fatalf("EndTxn retried during the completion: %+v", v)
	}
	if v, ok := addNext.Wait(5 * time.Second); !ok || v.(*PartitionsVerified).Codes["a"][0] != 0 {
		t.Fatalf("the next transaction's add during the completion: %+v", v)
	}
	if e := c.end("tx", r.ProducerID, 0, false, false); e.ErrorCode != 0 {
		t.Fatalf("abort: %+v", e)
	}
	marker = c.nextSent()
	init := send(func(p actor.Promise) any {
		return &InitProducerID{TransactionalID: "tx", TimeoutMs: 60000, ProducerID: r.ProducerID, ProducerEpoch: 0, Reply: p}
	})
	marker.reply.Resolve(int16(0))
	if v, ok := init.Wait(5 * time.Second); !ok || v.(*ProducerIDInitialized).ErrorCode != 0 || v.(*ProducerIDInitialized).ProducerEpoch != 1 {
		t.Fatalf("InitProducerId during the completion: %+v", v)
	}
	if d := c.describe("tx"); d.State != Empty || d.Epoch != 1 {
		t.Fatalf("after the bump: %+v", d)
	}
}

// A TV2 producer that aborts its next transaction right after a commit (franz-go's
// GroupTransactSession in a rebalance) waits for the commit's Complete* and gets its
// empty abort, the epoch bumped again, without a CONCURRENT_TRANSACTIONS retry.
func TestTV2AbortAfterCommitWaitsForCompletion(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return nil }) // the test answers
	defer c.stop()
	r := c.init("tx", 60000)
	v := c.ask(func(p actor.Promise) any {
		return &VerifyPartitions{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 0,
			Partitions: map[string][]int32{"a": {0}}, Add: true, Reply: p}
	}).(*PartitionsVerified)
	if v.Codes["a"][0] != 0 {
		t.Fatalf("add: %v", v.Codes)
	}
	if e := c.end("tx", r.ProducerID, 0, true, true); e.ErrorCode != 0 || e.ProducerEpoch != 1 {
		t.Fatalf("commit: %+v", e)
	}
	marker := c.nextSent()
	w := c.sys.NewWaiter()
	c.sys.Send(c.mgr, &EndTxn{TransactionalID: "tx", ProducerID: r.ProducerID, ProducerEpoch: 1, Commit: false, TV2: true, Reply: w.Promise})
	if d := c.describe("tx"); d.State != PrepareCommit {
		t.Fatalf("state %v while the marker is unanswered", d.State)
	}
	marker.reply.Resolve(int16(0))
	got, ok := w.Wait(5 * time.Second)
	if e, _ := got.(*TxnEnded); !ok || e == nil || e.ErrorCode != 0 || e.ProducerEpoch != 2 {
		t.Fatalf("abort at the bumped epoch during the completion: %+v", got)
	}
}

// A request parked for a completion that does not come within parkWait gets
// CONCURRENT_TRANSACTIONS, as Apache answers at once.
func TestParkedRequestTimesOut(t *testing.T) {
	c := startCoord(t, t.TempDir(), func(Marker) *int16 { return nil }) // never answered
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	c.nextSent()
	v := c.ask(func(p actor.Promise) any {
		return &InitProducerID{TransactionalID: "tx", TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1, Reply: p}
	}).(*ProducerIDInitialized)
	if v.ErrorCode != kerr.ConcurrentTransactions.Code {
		t.Fatalf("InitProducerId after parkWait: %+v", v)
	}
}

// TestBounds: transaction.max.open and transaction.max.partitions answer clear codes,
// and a place is given back when a transaction completes.
func TestBounds(t *testing.T) {
	budget := NewBudget(1)
	c := startCoordWith(t, t.TempDir(), func(Marker) *int16 { return ok16() }, func(s *Settings) {
		s.Open, s.MaxPartitions = budget, 2
	})
	defer c.stop()
	a, b := c.init("a", 60000), c.init("b", 60000)
	if code := c.add("a", a.ProducerID, 0, map[string][]int32{"t": {0, 1, 2}}); code != kerr.InvalidTxnState.Code {
		t.Fatalf("3 partitions past a bound of 2: %d", code)
	}
	if code := c.add("a", a.ProducerID, 0, map[string][]int32{"t": {0}}); code != 0 {
		t.Fatalf("add a: %d", code)
	}
	if code := c.add("b", b.ProducerID, 0, map[string][]int32{"t": {0}}); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("a second open transaction past a bound of 1: %d", code)
	}
	if budget.Open() != 1 {
		t.Fatalf("open %d", budget.Open())
	}
	c.end("a", a.ProducerID, 0, true, false)
	c.waitState("a", CompleteCommit)
	if code := c.add("b", b.ProducerID, 0, map[string][]int32{"t": {0}}); code != 0 {
		t.Fatalf("add b once a completed: %d", code)
	}
}

// TestFailedWriteAnswersNothingDone: a transition whose fdatasync fails is not made: the
// caller gets NOT_COORDINATOR, no marker goes out, the state is unchanged, and a retry
// succeeds.
func TestFailedWriteAnswersNothingDone(t *testing.T) {
	fsys := storage.NewFaultFS(storage.OSFS{})
	c := startCoordFS(t, t.TempDir(), fsys, func(Marker) *int16 { return ok16() }, nil)
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	fsys.FailNext(storage.OpSync, nil)
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("end with a failed fdatasync: %+v", e)
	}
	if d := c.describe("tx"); d.State != Ongoing {
		t.Fatalf("state after a failed write: %v", d.State)
	}
	select {
	case s := <-c.sent:
		t.Fatalf("a marker went out before the decision was durable: %+v", s.marker)
	default:
	}
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("retry: %+v", e)
	}
	if s := c.nextSent(); !s.marker.Commit {
		t.Fatalf("marker %+v", s.marker)
	}
	c.waitState("tx", CompleteCommit)
}

// A Complete* whose journal write fails is written again after the markers' backoff, not
// after the longest one: one failed fdatasync must not hold the id's next transaction
// (its implicit adds wait for the completion) for maxMarkerBackoff. Found by the chaos
// suite's seed 3, whose transactional producer stalled on it.
func TestFailedCompleteRetriedSoon(t *testing.T) {
	fsys := storage.NewFaultFS(storage.OSFS{})
	c := startCoordFS(t, t.TempDir(), fsys, func(Marker) *int16 {
		fsys.FailNext(storage.OpSync, nil) // the Complete*'s fdatasync, the next one
		return ok16()
	}, nil)
	defer c.stop()
	r := c.init("tx", 60000)
	c.add("tx", r.ProducerID, 0, map[string][]int32{"a": {0}})
	start := time.Now()
	if e := c.end("tx", r.ProducerID, 0, true, false); e.ErrorCode != 0 {
		t.Fatalf("end: %+v", e)
	}
	testwait.For(t, maxMarkerBackoff/2, 5*time.Millisecond, func() error {
		if d := c.describe("tx"); d.State != CompleteCommit {
			return fmt.Errorf("state %v %v after the EndTxn, want CompleteCommit well before %v", d.State, time.Since(start), maxMarkerBackoff)
		}
		return nil
	})
}
