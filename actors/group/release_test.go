package group

import (
	"testing"
	"time"

	"kaas/actors/actor"
	"kaas/storage"
)

// delayDescribe holds the group actor's next DescribeGroup for a while before it is
// handled, as a busy or slow actor would be.
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
// the group go to another broker) is not handled by the stopping actor: protoactor still
// delivers the mailbox while the actor waits for its offsets actor to stop, and that one
// is already drained. The expiry once reached the offsets actor that was gone, the panic
// restarted the group actor, its stop was lost, and the release never completed: the
// broker kept serving a group it had let go (found by the cluster chaos run: a broker
// paused past its members' sessions, resumed as its lease had lapsed).
func TestSessionExpiredBeforeReleaseIsDropped(t *testing.T) {
	dir := t.TempDir()
	inBubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, func(s *Settings) { s.InitialRebalanceDelay = 0 })
		defer h.stop()
		j := call[*JoinResult](h, joinMsg("g", "", 45*time.Second, time.Minute))
		if s := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: j.MemberID, Generation: j.Generation}); s.ErrorCode != 0 {
			t.Fatalf("sync %d", s.ErrorCode)
		}
		time.Sleep(44 * time.Second)
		// The actor is busy from 44 s to 46 s: the session check due at 45 s waits in
		// its mailbox, and the release's stop arrives behind it at 45.5 s. Writes from
		// then on are slow, so the offsets actor's own stop takes its time.
		restore := actor.SetFaults(delayDescribe{d: 2 * time.Second})
		defer restore()
		describe := h.send(&DescribeGroup{Group: "g"})
		time.Sleep(1500 * time.Millisecond)
		fsys.SetBefore(func(storage.Op, string) error {
			time.Sleep(time.Second)
			return nil
		})
		w := h.sys.NewWaiter()
		h.sys.Send(h.mgr, &Release{Keep: func(string) bool { return false }, Reply: w.Promise})
		if _, ok := w.Wait(time.Minute); !ok {
			t.Fatal("the release never completed")
		}
		fsys.SetBefore(nil)
		get[*Description](t, describe)
		if n := h.logs.Count("group_actor_failed_restarting"); n != 0 {
			t.Fatalf("the group actor failed %d times while it was released", n)
		}
	})
}
