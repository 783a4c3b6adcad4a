package group

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
	"kaas/storage"
)

// delayDescribe holds the group actor's next DescribeGroup for a while before it is
// handled, as a busy actor would be.
type delayDescribe struct{ d time.Duration }

func (f delayDescribe) Receive(a actor.Actor, msg any) bool {
	if _, ok := a.(*groupActor); ok {
		if _, ok := msg.(*DescribeGroup); ok {
			time.Sleep(f.d)
		}
	}
	return false
}

func (delayDescribe) Timer(_ any, d time.Duration) (time.Duration, bool) { return d, false }

// A member whose session expired just before its group was released (the broker lets
// the group go to another broker) is not handled by the releasing actor: its mailbox is
// delivered while it waits for its offsets actor's Flush, and protoactor still delivers
// it while that actor stops, when it may already be drained. The expiry once reached the
// offsets actor that was gone, the panic restarted the group actor, its stop was lost,
// and the release never completed: the broker kept serving a group it had let go (found
// by the cluster chaos run: a broker paused past its members' sessions, resumed as its
// lease had lapsed).
//
// The test runs on synctest's fake clock (it takes milliseconds): the session check comes
// due while the actor is busy, so it waits in the mailbox behind the release, and a
// commit whose journal write is held makes the release's Flush wait out its timeout. Whether the offsets actor then stops before the group actor goes
// through its mailbox is up to the scheduler: without the fix the test fails in about
// half of its runs, with it in none.
func TestSessionExpiredBeforeReleaseIsDropped(t *testing.T) {
	dir := t.TempDir()
	const session = 100 * time.Millisecond
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, func(s *Settings) { s.InitialRebalanceDelay = 0 })
		defer h.stop()
		j := call[*JoinResult](h, joinMsg("g", "", session, time.Minute))
		if s := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: j.MemberID, Generation: j.Generation}); s.ErrorCode != 0 {
			t.Fatalf("sync %d", s.ErrorCode)
		}
		// A commit whose journal write does not finish until the test lets it.
		hold, held := holdJournalWrites(fsys)
		commit := h.send(commitMsg("g", j.Generation, j.MemberID, offsets.TopicPartition{Topic: "t"}))
		<-held
		// The actor is busy across the session's end: the session check waits in its
		// mailbox, and the release's stop arrives behind it.
		time.Sleep(session * 8 / 10)
		restore := actor.SetFaults(delayDescribe{d: session * 4 / 10})
		defer restore()
		describe := h.send(&DescribeGroup{Group: "g"})
		time.Sleep(session * 3 / 10)
		w := h.sys.NewWaiter()
		h.sys.Send(h.mgr, &Release{Keep: func(string) bool { return false }, Reply: w.Promise})
		// The group actor is released: its Flush times out on the held write, the
		// offsets actor is told to stop but cannot yet, and the group actor goes
		// through what is left in its mailbox.
		synctest.Wait()
		time.Sleep(flushTimeout)
		synctest.Wait()
		close(hold)
		if _, ok := w.Wait(time.Minute); !ok {
			t.Fatal("the release never completed")
		}
		fsys.SetBefore(nil)
		get[*Description](t, describe)
		get[*offsets.CommitResult](t, commit)
		if n := h.logs.Count("group_actor_failed_restarting"); n != 0 {
			t.Fatalf("the group actor failed %d times while it was released", n)
		}
	})
}

// A group being released waits for its offsets actor's Flush in a state, not in its
// Receive: while the offsets actor's file write hangs (a slow or stuck disk), the group
// still answers what reaches it (NOT_COORDINATOR: its members find the new coordinator),
// and once the write is done the release completes with the commit in the file. (The
// group waited in its Stopping, through a blocking call, for up to 11 s: nothing sent to
// it was answered meanwhile.)
func TestReleasingGroupAnswersWhileItsFileWriteHangs(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, nil)
		defer h.stop()
		tp := offsets.TopicPartition{Topic: "t"}
		if r := call[*offsets.CommitResult](h, commitMsg("g", -1, "", tp)); r.Codes[0] != 0 {
			t.Fatalf("commit %d", r.Codes[0])
		}
		file := filepath.Join(offsets.Dir(dir), offsets.FileName("g"))
		held, hold := make(chan struct{}), make(chan struct{})
		var once sync.Once
		fsys.SetBefore(func(op storage.Op, path string) error {
			if op == storage.OpCreate && path == file+storage.TmpSuffix {
				once.Do(func() { close(held) })
				<-hold
			}
			return nil
		})
		w := h.sys.NewWaiter()
		h.sys.Send(h.mgr, &Release{Keep: func(string) bool { return false }, Reply: w.Promise})
		<-held // the group is releasing: its offsets actor writes the file for its Flush
		group := &actor.PID{Address: h.mgr.Address, Id: h.mgr.Id + "/" + strconv.Quote("g")}
		d := h.sys.NewWaiter()
		h.sys.Send(group, &DescribeGroup{Group: "g", Reply: d.Promise})
		synctest.Wait()
		select {
		case v := <-d.C:
			if r, ok := v.(*Description); !ok || r.ErrorCode != kerr.NotCoordinator.Code {
				t.Fatalf("describe while released: %+v, want NOT_COORDINATOR", v)
			}
		default:
			t.Fatal("the releasing group did not answer while its offsets actor's write hung")
		}
		close(hold)
		if _, ok := w.Wait(time.Minute); !ok {
			t.Fatal("the release never completed")
		}
		fsys.SetBefore(nil)
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), `"t"`) {
			t.Fatalf("group file after the release: %v %s", err, b)
		}
	})
}
