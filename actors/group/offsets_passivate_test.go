package group

import (
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
	"kaas/internal/diskimage"
	"kaas/metrics"
)

// The offsets actor of a live group stops once its file holds everything and it was
// idle for IdleAfter, and comes back, from the file, on the group's next request
// (offsets_passivate.go, actors/offsets/passivate.go). On the fake clock.

const (
	testCheckpoint  = 2 * time.Second
	testOffsetsIdle = 30 * time.Second
)

// passivatingHarness is newHarness with the offsets actors passivating.
func passivatingHarness(t *testing.T, dir string, mutate func(*Settings)) *harness {
	h := newHarness(t, dir, mutate)
	h.checkpoint, h.offsetsIdle = testCheckpoint, testOffsetsIdle
	return h
}

// offsetsLive says whether group g's offsets actor is running, once everything else has
// settled.
func (h *harness) offsetsLive(g string) bool {
	synctest.Wait()
	_, ok := h.sys.Raw().ProcessRegistry.GetLocal("groups/" + strconv.Quote(g) + "/offsets")
	return ok
}

// idleOut lets the fake clock run past a checkpoint and an idle period.
func idleOut() { time.Sleep(testCheckpoint + testOffsetsIdle + time.Second) }

func commitTo(t *testing.T, h *harness, g string, offset int64, parts int32) {
	t.Helper()
	var es []offsets.Entry
	for p := range parts {
		es = append(es, txnEntry("t", p, offset+int64(p))...)
	}
	c := call[*offsets.CommitResult](h, &CommitOffsets{Group: g, Generation: -1, Entries: es})
	for _, code := range c.Codes {
		if code != 0 {
			t.Fatalf("commit %d to %s: %s", offset, g, kerr.ErrorForCode(code))
		}
	}
}

// checkFetch checks that g serves offset+p on each of its parts partitions.
func checkFetch(t *testing.T, h *harness, g string, offset int64, parts int32) {
	t.Helper()
	f := call[*offsets.FetchResult](h, &FetchOffsets{Group: g})
	if f.ErrorCode != 0 || len(f.Offsets) != int(parts) {
		t.Fatalf("fetch %s: %+v, want %d partitions", g, f, parts)
	}
	for p := range parts {
		tp := offsets.TopicPartition{Topic: "t", Partition: p}
		if got := f.Offsets[tp].Offset; got != offset+int64(p) {
			t.Fatalf("fetch %s %v: %d, want %d", g, tp, got, offset+int64(p))
		}
	}
}

// An idle group's offsets actor stops, the group staying live; a fetch after it answers
// from the file, a commit after it is kept, and both the journal and the file have it
// after a restart.
func TestOffsetsActorPassivatesWhenIdle(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := passivatingHarness(t, dir, nil)
		commitTo(t, h, "g", 100, 4)
		if !h.offsetsLive("g") {
			t.Fatal("no offsets actor after a commit")
		}
		idleOut()
		if h.offsetsLive("g") {
			t.Fatal("the offsets actor of an idle group did not stop")
		}
		if n := h.liveActors(); n != 1 {
			t.Fatalf("%d live groups, want 1 (only the offsets actor passivates)", n)
		}
		checkFetch(t, h, "g", 100, 4)
		if !h.offsetsLive("g") {
			t.Fatal("a fetch did not bring the offsets actor back")
		}
		commitTo(t, h, "g", 200, 4)
		checkFetch(t, h, "g", 200, 4)
		idleOut()
		if h.offsetsLive("g") {
			t.Fatal("the offsets actor did not stop again")
		}
		commitTo(t, h, "g", 300, 4) // journaled, not yet checkpointed
		h.stop()

		h = newHarness(t, dir, nil)
		defer h.stop()
		checkFetch(t, h, "g", 300, 4)
	})
}

// A pending transactional offset keeps the offsets actor (it is in memory only until
// its transaction ends); once the marker applies it, the actor passivates, and the
// offset is served from the file.
func TestTxnPendingOffsetKeepsOffsetsActor(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := passivatingHarness(t, dir, nil)
		defer h.stop()
		tp := offsets.TopicPartition{Topic: "t", Partition: 0}
		c := call[*offsets.CommitResult](h, &TxnCommitOffsets{Group: "g", ProducerID: 5, Generation: -1,
			Entries: txnEntry("t", 0, 7)})
		if c.Codes[0] != 0 {
			t.Fatalf("txn commit: %s", kerr.ErrorForCode(c.Codes[0]))
		}
		idleOut()
		idleOut()
		if !h.offsetsLive("g") {
			t.Fatal("an offsets actor with a pending transactional offset passivated")
		}
		f := call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if !f.Unstable[tp] {
			t.Fatalf("pending offset not unstable: %+v", f)
		}
		if r := call[*TxnOffsetMarked](h, &TxnOffsetMarker{Group: "g", ProducerID: 5, Commit: true}); r.ErrorCode != 0 {
			t.Fatalf("commit marker: %s", kerr.ErrorForCode(r.ErrorCode))
		}
		idleOut()
		if h.offsetsLive("g") {
			t.Fatal("the offsets actor did not passivate once the transaction ended")
		}
		f = call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if f.Unstable != nil || f.Offsets[tp].Offset != 7 {
			t.Fatalf("after passivation: %+v", f)
		}
	})
}

// A crash (the data dir as a kill -9 leaves it) after offsets actors passivated keeps
// every acknowledged commit: those the passivated actors checkpointed, and those made
// after, by actors spawned again, still only in the journal.
func TestPassivatedOffsetsSurviveCrash(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := passivatingHarness(t, dir, nil)
		defer h.stop()
		for i := range 8 {
			commitTo(t, h, "g"+itoa(i), int64(10*i), 4)
		}
		idleOut()
		for i := range 8 {
			if h.offsetsLive("g" + itoa(i)) {
				t.Fatalf("g%d: offsets actor still live", i)
			}
		}
		for i := range 4 { // half come back, and their new commits are only journaled
			commitTo(t, h, "g"+itoa(i), int64(1000+10*i), 4)
		}
		image := crashImage(t, dir)

		h2 := newHarness(t, image, nil)
		defer h2.stop()
		for i := range 8 {
			want := int64(10 * i)
			if i < 4 {
				want += 1000
			}
			checkFetch(t, h2, "g"+itoa(i), want, 4)
		}
	})
}

// crashImage copies the data dir as a crash could leave it: the journal first, then the
// rest (offsets.journalHarness.crashImage: the other order could pair a group file from
// before its checkpoint with a journal from after it).
func crashImage(t *testing.T, dir string) string {
	t.Helper()
	return diskimage.Crash(t, dir, filepath.Join(dir, "__cluster", "__offsets_journal"))
}

// Requests that come while the offsets actor is passivating (the group's Idle and
// Passivate crossing them) are answered in order from the state they follow: a commit
// made as the actor stops is served by the next one.
func TestRequestsAcrossPassivation(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := passivatingHarness(t, dir, nil)
		defer h.stop()
		commitTo(t, h, "g", 0, 2)
		time.Sleep(testCheckpoint)
		// Commit and fetch at and around the moment the idle timer fires: some land
		// before the Idle, some between it and the Passivate, some after the stop.
		for i := 1; i <= 40; i++ {
			time.Sleep(testOffsetsIdle) // with the idle timer, armed at the last request
			w := h.send(&CommitOffsets{Group: "g", Generation: -1,
				Entries: append(txnEntry("t", 0, int64(i)), txnEntry("t", 1, int64(i)+1)...)})
			f := h.send(&FetchOffsets{Group: "g"})
			if c := get[*offsets.CommitResult](t, w); c.Codes[0] != 0 || c.Codes[1] != 0 {
				t.Fatalf("commit %d: %v", i, c.Codes)
			}
			// The fetch sent with the commit is served from what is durable as it comes: the
			// commit acknowledged before, or this one; never older.
			tp := offsets.TopicPartition{Topic: "t", Partition: 0}
			if fr := get[*offsets.FetchResult](t, f); fr.ErrorCode != 0 || fr.Offsets[tp].Offset < int64(i-1) {
				t.Fatalf("fetch with commit %d: %+v", i, fr)
			}
			checkFetch(t, h, "g", int64(i), 2)
		}
		idleOut()
		if h.offsetsLive("g") {
			t.Fatal("offsets actor still live")
		}
		checkFetch(t, h, "g", 40, 2)
	})
}

// Passivated offsets actors free what they held: their context, mailbox and state are
// no longer reachable (the actor library's children set kept the stopped child's PID,
// and with it the whole actor, until the group dropped the PID's cached process).
func TestPassivatedOffsetsActorsAreFreed(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := passivatingHarness(t, dir, nil)
		defer h.stop()
		const n = 300
		for i := range n {
			commitTo(t, h, "g"+itoa(i), int64(i), 4)
		}
		time.Sleep(testCheckpoint + time.Second)
		live := heapAlloc()
		idleOut()
		for i := range n {
			if h.offsetsLive("g" + itoa(i)) {
				t.Fatalf("g%d: offsets actor still live", i)
			}
		}
		idle := heapAlloc()
		// An offsets actor with its context, mailbox, registry entry and 4 offsets
		// holds over 2 KB.
		freed := (int64(live) - int64(idle)) / n
		if freed < 1024 {
			t.Fatalf("passivation freed %d bytes per group (live %d, idle %d)", freed, live, idle)
		}
		t.Logf("passivation freed %d bytes per group", freed)
	})
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A group released while its offsets actor is passivated goes without spawning it again
// (its file holds everything), and its committed-offsets series go with it.
func TestReleaseOfPassivatedOffsetsSpawnsNothing(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		h := passivatingHarness(t, dir, nil)
		h.offsetsMetrics = offsets.NewMetrics(reg)
		h.offsetsMetrics.Offsets = metrics.NewOffsets(nil)
		starts := func() float64 {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "kaas_offsets_actor_starts_total" {
					return mf.GetMetric()[0].GetCounter().GetValue()
				}
			}
			t.Fatal("no kaas_offsets_actor_starts_total")
			return 0
		}
		commitTo(t, h, "g", 100, 4)
		idleOut()
		if h.offsetsLive("g") {
			t.Fatal("the offsets actor of an idle group did not stop")
		}
		if n := testutil.CollectAndCount(h.offsetsMetrics.Offsets, "kaas_group_committed_offset"); n != 4 {
			t.Fatalf("%d committed-offset series of the live group, want 4", n)
		}
		before := starts()
		h.stop()
		if n := starts() - before; n != 0 {
			t.Fatalf("the release started the offsets actor again (%v starts)", n)
		}
		if n := testutil.CollectAndCount(h.offsetsMetrics.Offsets, "kaas_group_committed_offset"); n != 0 {
			t.Fatalf("%d committed-offset series left after the group went", n)
		}
	})
}

// The retention tick does not spawn a passivated offsets actor to ask about offsets
// none of which can expire yet (offsets.Idle.NoExpiryBefore); once one can, the tick
// asks, and the offsets due expire. A Stable consumer group's offsets of a topic it is
// not subscribed to expire retention after their commit.
func TestRetentionTickSkipsPassivatedOffsetsUntilDue(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, dir, func(s *Settings) {
			s.InitialRebalanceDelay = 0
			s.OffsetsRetention = 25 * time.Minute
			s.RetentionCheck = 10 * time.Minute
			s.MaxSessionTimeout = 2 * time.Hour
		})
		h.checkpoint, h.offsetsIdle = testCheckpoint, testOffsetsIdle
		reg := prometheus.NewRegistry()
		h.offsetsMetrics = offsets.NewMetrics(reg)
		h.offsetsMetrics.Offsets = metrics.NewOffsets(nil)
		starts := func() float64 {
			synctest.Wait()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "kaas_offsets_actor_starts_total" {
					return mf.GetMetric()[0].GetCounter().GetValue()
				}
			}
			t.Fatal("no kaas_offsets_actor_starts_total")
			return 0
		}
		jm := joinMsg("consumer", "", time.Hour, time.Minute)
		jm.Protocols[0].Metadata = subscriptionTo("foo")
		j := call[*JoinResult](h, jm)
		call[*SyncResult](h, &SyncGroup{Group: "consumer", MemberID: j.MemberID, Generation: j.Generation})
		foo, bar := offsets.TopicPartition{Topic: "foo"}, offsets.TopicPartition{Topic: "bar"}
		call[*offsets.CommitResult](h, commitMsg("consumer", j.Generation, j.MemberID, foo, bar))
		idleOut()
		if h.offsetsLive("consumer") {
			t.Fatal("offsets actor live after an idle period")
		}
		before := starts()
		// The ticks at 10 and 20 minutes: bar expires at 25.
		time.Sleep(20*time.Minute + time.Second - testCheckpoint - testOffsetsIdle - time.Second)
		if n := starts(); n != before {
			t.Fatalf("retention ticks before any offset could expire started the offsets actor %v times", n-before)
		}
		// The tick at 30 minutes asks: bar has expired, foo is kept.
		time.Sleep(10 * time.Minute)
		if n := starts(); n != before+1 {
			t.Fatalf("the retention tick once an offset could expire started the offsets actor %v times, want 1", n-before)
		}
		got := fetchAll(h, "consumer")
		if _, ok := got[foo]; !ok {
			t.Fatal("subscribed topic's offset expired")
		}
		if _, ok := got[bar]; ok {
			t.Fatal("unsubscribed topic's offset kept past its retention")
		}
		h.stop()
	})
}
