package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/goleak"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/internal/testwait"
)

// crash makes a group actor panic while it handles it (fault injection for these tests).
type crash struct{ group string }

func (c *crash) GroupID() string                 { return c.group }
func (c *crash) withReply(actor.Promise) Request { return c }
func (c *crash) fail(int16)                      {}
func (c *crash) AnswerCrash(*actor.Crashed)      {}
func (c *crash) inject(*groupActor)              { panic("injected fault") }

// A group actor that panics mid-rebalance is restarted: its parked members get an error
// and can rejoin; other groups are untouched; no goroutine is left behind.
func TestChaosPanicMidRebalance(t *testing.T) {
	defer goleak.VerifyNone(t, actortest.LeakOptions(goleak.IgnoreCurrent())...)
	dir := t.TempDir()
	h := newHarness(t, dir, func(s *Settings) { s.InitialRebalanceDelay = 0 })
	defer h.stop()

	// Another group, Stable, must not notice.
	other := call[*JoinResult](h, joinMsg("other", "", time.Minute, time.Minute))
	call[*SyncResult](h, &SyncGroup{Group: "other", MemberID: other.MemberID, Generation: other.Generation})

	// g: a is Stable; b joins, so a rejoin is needed and b is parked in PreparingRebalance.
	a := call[*JoinResult](h, joinMsg("g", "", time.Minute, time.Minute))
	call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: a.MemberID, Generation: a.Generation})
	b := h.send(joinMsg("g", "", time.Minute, time.Minute))
	testwait.For(t, 5*time.Second, time.Millisecond, testwait.Cond("no rebalance", func() bool {
		return call[*Description](h, &DescribeGroup{Group: "g"}).State == "PreparingRebalance"
	}))
	h.sys.Send(h.mgr, &crash{group: "g"})

	rb := get[*JoinResult](t, b)
	if rb.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("parked join got %d, want COORDINATOR_NOT_AVAILABLE", rb.ErrorCode)
	}
	// The restarted group is what its file keeps, as after a coordinator move (§5.2): a,
	// which synced generation 1, is still a member; the rebalance b was parked in was
	// never saved. a rejoins with its id, b as new.
	if r := call[*Result](h, &Heartbeat{Group: "g", MemberID: a.MemberID, Generation: a.Generation}); r.ErrorCode != 0 {
		t.Fatalf("heartbeat after restart %d", r.ErrorCode)
	}
	rb2 := h.send(joinMsg("g", "", time.Minute, time.Minute))
	ra := h.send(joinMsg("g", a.MemberID, time.Minute, time.Minute))
	j1, j2 := get[*JoinResult](t, ra), get[*JoinResult](t, rb2)
	if j1.ErrorCode != 0 || j2.ErrorCode != 0 {
		t.Fatalf("rejoin %d %d", j1.ErrorCode, j2.ErrorCode)
	}
	// other is untouched: same generation, heartbeat fine.
	if r := call[*Result](h, &Heartbeat{Group: "other", MemberID: other.MemberID, Generation: other.Generation}); r.ErrorCode != 0 {
		t.Fatalf("other group heartbeat %d", r.ErrorCode)
	}
	if d := call[*Description](h, &DescribeGroup{Group: "other"}); d.State != "Stable" || len(d.Members) != 1 {
		t.Fatalf("other group %+v", d)
	}
}

// A panic in the middle of a request answers that request.
func TestChaosPanicAnswersCurrentRequest(t *testing.T) {
	h := newHarness(t, t.TempDir(), nil)
	defer h.stop()
	// A commit whose handling panics inside the group actor is answered (not left
	// hanging), and the group serves the next request.
	panicky := &panicCommit{CommitOffsets{Group: "g", Generation: -1}}
	v, ok := h.send(panicky).Wait(5 * time.Second)
	if !ok {
		t.Fatal("panicking request not answered")
	}
	_ = v
	if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("after restart %+v", d)
	}
}

type panicCommit struct{ CommitOffsets }

func (p *panicCommit) withReply(r actor.Promise) Request { c := *p; c.Reply = r; return &c }
func (p *panicCommit) inject(*groupActor)                { panic("injected fault") }
