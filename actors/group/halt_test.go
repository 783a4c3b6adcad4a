package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
	"kaas/storage"
)

// Halt (a broker alone's stop) tells only the groups that have had members: a JoinGroup
// parked for the initial rebalance delay is answered NOT_COORDINATOR, a commit in flight
// in a group that only commits goes on to the journal and is answered once durable, no
// group actor is stopped one by one, and every request from then on is answered
// NOT_COORDINATOR. The journal then stops, the actors are halted where they stand, and a
// start on the same data dir serves every commit that was acknowledged.
func TestHaltAnswersWaitersAndLeavesIdleGroups(t *testing.T) {
	dir := t.TempDir()
	tp := offsets.TopicPartition{Topic: "t"}
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, func(s *Settings) { s.InitialRebalanceDelay = time.Hour })
		h.checkpoint = time.Hour // the group files stay behind the journal
		const idle = 20
		for i := range idle {
			if r := call[*offsets.CommitResult](h, commitMsg("c"+itoa(i), -1, "", tp)); r.Codes[0] != 0 {
				t.Fatalf("commit c%d: %d", i, r.Codes[0])
			}
		}
		join := h.send(joinMsg("m", "", time.Minute, time.Minute))
		if answered(join) {
			t.Fatal("the JoinGroup was answered before the initial rebalance delay")
		}
		// A commit whose journal write does not finish until the test lets it.
		hold, held := holdJournalWrites(fsys)
		inFlight := commitMsg("c0", -1, "", tp)
		inFlight.Entries[0].Offset = 99
		commit := h.send(inFlight)
		<-held

		w := h.sys.NewWaiter()
		h.sys.Send(h.mgr, &Halt{Reply: w.Promise})
		told, ok := w.Wait(time.Hour)
		if !ok || told.(int) != 1 {
			t.Fatalf("Halt told %v groups, want 1 (the one with a member)", told)
		}
		if r := get[*JoinResult](t, join); r.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("parked JoinGroup answered %d, want NOT_COORDINATOR", r.ErrorCode)
		}
		if answered(commit) {
			t.Fatal("the commit in flight was answered before its journal write")
		}
		close(hold)
		fsys.SetBefore(nil)
		if r := get[*offsets.CommitResult](t, commit); r.Codes[0] != 0 {
			t.Fatalf("commit in flight at the halt: %d, want durable and answered", r.Codes[0])
		}
		if r := call[*offsets.CommitResult](h, commitMsg("c1", -1, "", tp)); r.Codes[0] != kerr.NotCoordinator.Code {
			t.Fatalf("commit after the halt: %d, want NOT_COORDINATOR", r.Codes[0])
		}
		if r := call[*JoinResult](h, joinMsg("m", "", time.Minute, time.Minute)); r.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("JoinGroup after the halt: %d, want NOT_COORDINATOR", r.ErrorCode)
		}
		if n := h.liveActors(); n != idle+1 {
			t.Fatalf("%d live group actors after the halt, want all %d left where they stand", n, idle+1)
		}
		if err := h.sys.Poison(h.journal, time.Minute); err != nil {
			t.Fatal(err)
		}
		if !h.sys.Halt(time.Minute) {
			t.Fatal("a turn still ran")
		}
		h.sys.Shutdown()

		again := newHarness(t, dir, nil)
		defer again.stop()
		for i := range idle {
			want := int64(10)
			if i == 0 {
				want = 99
			}
			if got := fetchAll(again, "c"+itoa(i))[tp].Offset; got != want {
				t.Fatalf("group c%d after the restart: offset %d, want %d", i, got, want)
			}
		}
	})
}
