package group

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Timer behaviour on synctest's fake clock: durations are asserted exactly.

// Scenario 21: the first join waits group.initial.rebalance.delay.ms.
func TestInitialDelay(t *testing.T) {
	bubble(t, nil, func(t *testing.T, h *harness) {
		start := time.Now()
		r := call[*JoinResult](h, joinMsg("g", "", 10*time.Second, 60*time.Second))
		if el := time.Since(start); el != 3*time.Second {
			t.Fatalf("join answered after %v, want 3s", el)
		}
		if r.ErrorCode != 0 || r.Generation != 1 || r.Leader != r.MemberID || r.MemberID != "c-id1" {
			t.Fatalf("join %+v", r)
		}
	})
}

// Scenarios 22, 23: each wave of new members extends the delay by up to D, capped near
// the rebalance timeout.
func TestInitialDelayExtension(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 50 * time.Millisecond }, func(t *testing.T, h *harness) {
		start := time.Now()
		a := h.send(joinMsg("g", "", time.Second, 150*time.Millisecond))
		time.Sleep(49 * time.Millisecond)
		b := h.send(joinMsg("g", "", time.Second, 150*time.Millisecond))
		time.Sleep(28 * time.Millisecond)
		if answered(a) || answered(b) {
			t.Fatal("answered before the extended delay")
		}
		ra, rb := get[*JoinResult](t, a), get[*JoinResult](t, b)
		if el := time.Since(start); el != 100*time.Millisecond {
			t.Fatalf("answered after %v, want 100ms", el)
		}
		if ra.Generation != 1 || rb.Generation != 1 || len(ra.Members)+len(rb.Members) != 2 {
			t.Fatalf("results %+v %+v", ra, rb)
		}
	})
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 50 * time.Millisecond }, func(t *testing.T, h *harness) {
		// Members keep coming every 20ms: the delay is capped by the rebalance timeout (100ms).
		start := time.Now()
		first := h.send(joinMsg("g", "", time.Second, 100*time.Millisecond))
		for range 4 {
			time.Sleep(20 * time.Millisecond)
			h.send(joinMsg("g", "", time.Second, 100*time.Millisecond))
		}
		r := get[*JoinResult](t, first)
		if el := time.Since(start); el != 100*time.Millisecond || r.ErrorCode != 0 {
			t.Fatalf("answered after %v (%d), want 100ms", el, r.ErrorCode)
		}
	})
}

// KAFKA-7610: a new member's join parked for 5 minutes (a round that cannot complete) is
// dropped with UNKNOWN_MEMBER_ID and no member id.
func TestNewMemberJoinTimeout(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 0 }, func(t *testing.T, h *harness) {
		a := call[*JoinResult](h, joinMsg("g", "", time.Second, time.Hour))
		// a is Stable-bound but never syncs nor heartbeats until much later; meanwhile b's
		// join waits for a to rejoin (rebalance timeout one hour).
		_ = a
		start := time.Now()
		b := h.send(joinMsg("g", "", 10*time.Minute, time.Hour))
		// keep a alive with heartbeats at its generation (REBALANCE_IN_PROGRESS)
		for time.Since(start) < 6*time.Minute && !answered(b) {
			time.Sleep(500 * time.Millisecond)
			call[*Result](h, &Heartbeat{Group: "g", MemberID: a.MemberID, Generation: a.Generation})
		}
		r := get[*JoinResult](t, b)
		if el := time.Since(start); el < 5*time.Minute || el > 5*time.Minute+time.Second {
			t.Fatalf("answered after %v, want 5m", el)
		}
		if r.ErrorCode != kerr.UnknownMemberID.Code || r.MemberID != "" {
			t.Fatalf("result %+v", r)
		}
	})
}

// Scenario 64: a member that stops heartbeating is removed after its session timeout
// exactly; heartbeats and commits keep it (scenario 65).
func TestSessionExpiry(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 0 }, func(t *testing.T, h *harness) {
		j := call[*JoinResult](h, joinMsg("g", "", 45*time.Second, time.Minute))
		s := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: j.MemberID, Generation: j.Generation})
		if s.ErrorCode != 0 {
			t.Fatalf("sync %d", s.ErrorCode)
		}
		time.Sleep(40 * time.Second)
		if r := call[*Result](h, &Heartbeat{Group: "g", MemberID: j.MemberID, Generation: 1}); r.ErrorCode != 0 {
			t.Fatalf("heartbeat %d", r.ErrorCode)
		}
		time.Sleep(44*time.Second + 999*time.Millisecond)
		if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.State != "Stable" {
			t.Fatalf("state %s before the session expired", d.State)
		}
		// The timer fires at 85s; a test waking at the same instant could ask first.
		time.Sleep(2 * time.Millisecond)
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.State != "Empty" || len(d.Members) != 0 {
			t.Fatalf("after expiry: %+v", d)
		}
		if r := call[*Result](h, &Heartbeat{Group: "g", MemberID: j.MemberID, Generation: 1}); r.ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("heartbeat after expiry %d", r.ErrorCode)
		}
	})
}

// Scenario 35 on the fake clock: a pending member expires after its session timeout.
func TestPendingMemberExpiry(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 0 }, func(t *testing.T, h *harness) {
		a := joinMsg("g", "", time.Minute, time.Hour)
		a.RequireKnownMemberID = true
		ra := call[*JoinResult](h, a)
		a.MemberID = ra.MemberID
		ja := call[*JoinResult](h, a)
		call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: ja.MemberID, Generation: ja.Generation})
		p := joinMsg("g", "", 100*time.Millisecond, time.Hour)
		p.RequireKnownMemberID = true
		if r := call[*JoinResult](h, p); r.ErrorCode != kerr.MemberIDRequired.Code {
			t.Fatalf("pending %d", r.ErrorCode)
		}
		start := time.Now()
		rejoin := h.send(a) // a rejoins: the round waits for the pending member
		r := get[*JoinResult](t, rejoin)
		if el := time.Since(start); el != 100*time.Millisecond || r.ErrorCode != 0 || r.Generation != 2 {
			t.Fatalf("rejoin after %v: %+v", el, r)
		}
	})
}

// KIP-800: reasons are logged at Info with the member and group.
func TestReasonsLogged(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 0 }, func(t *testing.T, h *harness) {
		j := joinMsg("g", "", time.Minute, time.Minute)
		j.Reason = "rebalance please"
		r := call[*JoinResult](h, j)
		call[*LeaveResult](h, &LeaveGroup{Group: "g", Members: []LeaveMember{{MemberID: r.MemberID, Reason: "bye now"}}})
		logs := h.logs.String()
		for _, want := range []string{`"reason":"rebalance please"`, `"reason":"bye now"`, `"member":"` + r.MemberID + `"`, `"group":"g"`, `"level":"info"`} {
			if !strings.Contains(logs, want) {
				t.Fatalf("logs lack %s:\n%s", want, logs)
			}
		}
	})
}
