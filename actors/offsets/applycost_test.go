package offsets

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"kaas/actors/actor"
)

// groupWith is an offsets actor's state for a group with n committed partitions and a
// journal, as after a load.
func groupWith(n int) *offsetsActor {
	a := &offsetsActor{cfg: &Config{Group: "g", Journal: &actor.PID{}, Now: time.Now}, loaded: true, exists: true,
		st: newState()}
	for i := range n {
		a.st.offsets[TopicPartition{Topic: "t" + strconv.Itoa(i%100), Partition: int32(i / 100)}] =
			Committed{Offset: int64(i), LeaderEpoch: -1, CommitTime: 1}
	}
	return a
}

// bytesPerBatch is what building a journaled batch of one single-partition commit
// allocates, on average over runs.
func bytesPerBatch(a *offsetsActor, runs int) uint64 {
	commit := &Commit{Entries: []Entry{{TopicPartition: TopicPartition{Topic: "t0", Partition: 0},
		Committed: Committed{Offset: 7, LeaderEpoch: -1}}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		a.queue = []queued{{msg: commit, codes: []int16{0}}}
		b := a.applyQueue()
		if !b.dirty || len(b.rec.ops) != 1 {
			panic("commit made no op")
		}
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// A commit costs what it commits: building the batch of a one-partition commit in a
// group of 20,000 committed partitions allocates about what it does in a group of 10,
// not a copy of the group's offsets.
func TestCommitCostsWhatItCommits(t *testing.T) {
	small := bytesPerBatch(groupWith(10), 200)
	large := bytesPerBatch(groupWith(20000), 200)
	t.Logf("bytes allocated per one-partition batch: group of 10 %d, group of 20,000 %d", small, large)
	if large > 2*small+1024 {
		t.Fatalf("a one-partition commit into a group of 20,000 partitions allocates %d bytes, %d in a group of 10",
			large, small)
	}
}

// A batch that reads the state (a Delete) sees what the commit batches in flight before
// it set, though they were built as overlays.
func TestBatchAfterCommitsInFlightSeesThem(t *testing.T) {
	a := groupWith(10)
	tp := TopicPartition{Topic: "new", Partition: 3}
	for i := range 2 {
		a.queue = []queued{{msg: &Commit{Entries: []Entry{{TopicPartition: tp,
			Committed: Committed{Offset: int64(i), LeaderEpoch: -1}}}}, codes: []int16{0}}}
		a.inflight = append(a.inflight, a.applyQueue())
	}
	a.queue = []queued{{msg: &Delete{Partitions: []TopicPartition{tp, {Topic: "absent"}}}}}
	b := a.applyQueue()
	if !b.dirty || len(b.rec.ops) != 1 || len(b.rec.ops[0].Del) != 1 || string(b.rec.ops[0].Del[0].Topic) != "new" {
		t.Fatalf("the delete after two commits in flight recorded %+v, want the delete of new/3 alone", b.rec.ops)
	}
	if _, ok := b.next.offsets[tp]; ok || len(b.next.offsets) != 10 {
		t.Fatalf("after the delete the batch holds %d offsets (new/3 present: %v), want the 10 loaded", len(b.next.offsets), ok)
	}
	// The state the actor serves is untouched until the journal answers.
	if _, ok := a.st.offsets[tp]; ok {
		t.Fatal("a batch in flight changed the served state")
	}
}
