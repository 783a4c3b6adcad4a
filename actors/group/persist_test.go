package group

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/storage"
)

// What the group saves in its file and how it comes back (§5.1, §5.2 of the reference),
// on the fake clock: a restart is the manager stopped and a new one started on the same
// directory.

// stableGroup joins n dynamic members to g within the initial delay and syncs them, the
// followers first; each member's assignment is "a-<member id>". It returns the join
// answers in the order the members were sent.
func stableGroup(t *testing.T, h *harness, g string, n int, session time.Duration) []*JoinResult {
	t.Helper()
	ws := make([]*actor.Waiter, n)
	for i := range ws {
		ws[i] = h.send(joinMsg(g, "", session, time.Minute))
	}
	js := make([]*JoinResult, n)
	assign := map[string][]byte{}
	for i, w := range ws {
		js[i] = get[*JoinResult](t, w)
		if js[i].ErrorCode != 0 {
			t.Fatalf("join %d: %d", i, js[i].ErrorCode)
		}
		assign[js[i].MemberID] = []byte("a-" + js[i].MemberID)
	}
	var syncs []*actor.Waiter
	var leader *JoinResult
	for _, j := range js {
		if j.MemberID == j.Leader {
			leader = j
			continue
		}
		syncs = append(syncs, h.send(&SyncGroup{Group: g, MemberID: j.MemberID, Generation: j.Generation}))
	}
	syncs = append(syncs, h.send(&SyncGroup{Group: g, MemberID: leader.MemberID, Generation: leader.Generation, Assignments: assign}))
	for _, w := range syncs {
		if s := get[*SyncResult](t, w); s.ErrorCode != 0 || !bytes.HasPrefix(s.Assignment, []byte("a-")) {
			t.Fatalf("sync: %+v", s)
		}
	}
	return js
}

func heartbeatCode(h *harness, g string, j *JoinResult) int16 {
	return call[*Result](h, &Heartbeat{Group: g, MemberID: j.MemberID, Generation: j.Generation}).ErrorCode
}

// A Stable group comes back after a restart with its generation, leader, members and
// assignments; members keep heartbeating and committing with the same generation, each on
// a session that starts at load time; one that stays silent is removed exactly one
// session timeout after the load, and the group rebalances.
func TestRestartLoadsStableMembers(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		const session = 10 * time.Second
		h := newHarness(t, dir, nil)
		js := stableGroup(t, h, "g", 3, session)
		h.stop()

		// Time passes while the broker is down: longer than any session.
		time.Sleep(time.Minute)
		h = newHarness(t, dir, nil)
		defer h.stop()
		loaded := time.Now()
		if c := heartbeatCode(h, "g", js[0]); c != 0 {
			t.Fatalf("first heartbeat after restart: %s", codeName(c))
		}
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.State != "Stable" || d.Protocol != "range" || len(d.Members) != 3 {
			t.Fatalf("described after restart: %+v", d)
		}
		for i, m := range d.Members {
			if m.MemberID != js[i].MemberID || string(m.Assignment) != "a-"+m.MemberID || m.ClientID != "c" {
				t.Fatalf("member %d after restart: %+v", i, m)
			}
		}
		c := call[*offsets.CommitResult](h, &CommitOffsets{Group: "g", MemberID: js[1].MemberID, Generation: js[1].Generation,
			Entries: []offsets.Entry{{TopicPartition: offsets.TopicPartition{Topic: "t"}, Committed: offsets.Committed{Offset: 7, LeaderEpoch: -1}}}})
		if c.Codes[0] != 0 {
			t.Fatalf("commit after restart: %s", codeName(c.Codes[0]))
		}

		// Members 0 and 1 heartbeat; member 2 is gone for good.
		for time.Since(loaded) < session-time.Second {
			time.Sleep(time.Second)
			for _, j := range js[:2] {
				if c := heartbeatCode(h, "g", j); c != 0 {
					t.Fatalf("heartbeat at %v after load: %s", time.Since(loaded), codeName(c))
				}
			}
		}
		time.Sleep(loaded.Add(session).Sub(time.Now()) - time.Millisecond)
		synctest.Wait()
		if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.State != "Stable" || len(d.Members) != 3 {
			t.Fatalf("1 ms before the silent member's session ends: %s with %d members", d.State, len(d.Members))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.State != "PreparingRebalance" || len(d.Members) != 2 {
			t.Fatalf("at the silent member's session end: %s with %d members", d.State, len(d.Members))
		}
		if c := heartbeatCode(h, "g", js[0]); c != kerr.RebalanceInProgress.Code {
			t.Fatalf("heartbeat after the eviction: %s", codeName(c))
		}
		if c := heartbeatCode(h, "g", js[2]); c != kerr.UnknownMemberID.Code {
			t.Fatalf("evicted member's heartbeat: %s", codeName(c))
		}
	})
}

// A group whose last member left is saved Empty, without members, and loads Empty.
func TestRestartLoadsEmptyGroup(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, dir, nil)
		js := stableGroup(t, h, "g", 1, 10*time.Second)
		l := call[*LeaveResult](h, &LeaveGroup{Group: "g", Members: []LeaveMember{{MemberID: js[0].MemberID}}})
		if l.Members[0] != 0 {
			t.Fatalf("leave: %d", l.Members[0])
		}
		h.stop()
		h = newHarness(t, dir, nil)
		defer h.stop()
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.ErrorCode != 0 || d.State != "Empty" || d.ProtocolType != "consumer" || len(d.Members) != 0 {
			t.Fatalf("after restart: %+v", d)
		}
		if c := heartbeatCode(h, "g", js[0]); c != kerr.UnknownMemberID.Code {
			t.Fatalf("heartbeat of the member that left: %s", codeName(c))
		}
	})
}

// The leader's SyncGroup completes the generation only once it is on disk: while the
// write is held, the leader's and the followers' SyncGroups wait and the group stays
// CompletingRebalance (heartbeats answer 0); the write done, everyone gets the
// assignment and the group is Stable.
func TestSyncAnsweredAfterSave(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		hold := make(chan struct{})
		held := make(chan struct{}, 1)
		fsys.Before = func(op storage.Op, path string) error {
			if op == storage.OpSync && strings.HasSuffix(path, journal.SegmentSuffix) {
				select {
				case held <- struct{}{}:
					<-hold
				default:
				}
			}
			return nil
		}
		h := newHarnessFS(t, dir, fsys, nil)
		defer h.stop()
		a, b := h.send(joinMsg("g", "", time.Minute, time.Minute)), h.send(joinMsg("g", "", time.Minute, time.Minute))
		ja, jb := get[*JoinResult](t, a), get[*JoinResult](t, b)
		leader, follower := ja, jb
		if jb.MemberID == jb.Leader {
			leader, follower = jb, ja
		}
		fs := h.send(&SyncGroup{Group: "g", MemberID: follower.MemberID, Generation: follower.Generation})
		ls := h.send(&SyncGroup{Group: "g", MemberID: leader.MemberID, Generation: leader.Generation,
			Assignments: map[string][]byte{leader.MemberID: {1}, follower.MemberID: {2}}})
		if answered(ls) || answered(fs) {
			t.Fatal("SyncGroup answered before the generation was saved")
		}
		if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.State != "CompletingRebalance" {
			t.Fatalf("while saving: %s", d.State)
		}
		if c := heartbeatCode(h, "g", follower); c != 0 {
			t.Fatalf("heartbeat while saving: %s", codeName(c))
		}
		close(hold)
		if s := get[*SyncResult](t, ls); s.ErrorCode != 0 || !bytes.Equal(s.Assignment, []byte{1}) {
			t.Fatalf("leader sync %+v", s)
		}
		if s := get[*SyncResult](t, fs); s.ErrorCode != 0 || !bytes.Equal(s.Assignment, []byte{2}) {
			t.Fatalf("follower sync %+v", s)
		}
		if d := call[*Description](h, &DescribeGroup{Group: "g"}); d.State != "Stable" {
			t.Fatalf("after saving: %s", d.State)
		}
	})
}

// A failed write of the generation answers the parked SyncGroups with the write's error
// (NOT_COORDINATOR, the mapped storage error) and the group rebalances (§4.4).
func TestSyncSaveFailureRebalances(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, nil)
		defer h.stop()
		a, b := h.send(joinMsg("g", "", time.Minute, time.Minute)), h.send(joinMsg("g", "", time.Minute, time.Minute))
		ja, jb := get[*JoinResult](t, a), get[*JoinResult](t, b)
		leader, follower := ja, jb
		if jb.MemberID == jb.Leader {
			leader, follower = jb, ja
		}
		fs := h.send(&SyncGroup{Group: "g", MemberID: follower.MemberID, Generation: follower.Generation})
		failNextSegmentSync(fsys)
		ls := h.send(&SyncGroup{Group: "g", MemberID: leader.MemberID, Generation: leader.Generation,
			Assignments: map[string][]byte{leader.MemberID: {1}, follower.MemberID: {2}}})
		for _, w := range []*actor.Waiter{ls, fs} {
			if s := get[*SyncResult](t, w); s.ErrorCode != kerr.NotCoordinator.Code {
				t.Fatalf("sync after a failed save: %s", codeName(s.ErrorCode))
			}
		}
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.State != "PreparingRebalance" || len(d.Members) != 2 {
			t.Fatalf("after a failed save: %+v", d)
		}
		if c := heartbeatCode(h, "g", follower); c != kerr.RebalanceInProgress.Code {
			t.Fatalf("heartbeat after a failed save: %s", codeName(c))
		}
	})
}

// A static member replaced in Stable is answered once its new id is saved; a failed
// write undoes the replacement (the old id is still the member) and answers the write's
// error with no member id. After a restart the saved id is the member, the old one fenced.
func TestStaticReplacementSaved(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		h := newHarnessFS(t, dir, fsys, nil)
		static := func(member string) *JoinGroup {
			j := joinMsg("g", member, time.Minute, time.Minute)
			j.InstanceID = "i"
			return j
		}
		first := call[*JoinResult](h, static(""))
		if s := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: first.MemberID, InstanceID: "i", Generation: first.Generation,
			Assignments: map[string][]byte{first.MemberID: {9}}}); s.ErrorCode != 0 {
			t.Fatalf("sync %d", s.ErrorCode)
		}
		hb := func(id string) int16 {
			return call[*Result](h, &Heartbeat{Group: "g", MemberID: id, InstanceID: "i", Generation: first.Generation}).ErrorCode
		}

		failNextSegmentSync(fsys)
		failed := call[*JoinResult](h, static(""))
		if failed.ErrorCode != kerr.NotCoordinator.Code || failed.MemberID != "" {
			t.Fatalf("replacement with a failed save: %s %q", codeName(failed.ErrorCode), failed.MemberID)
		}
		if c := hb(first.MemberID); c != 0 {
			t.Fatalf("old id after an undone replacement: %s", codeName(c))
		}

		second := call[*JoinResult](h, static(""))
		if second.ErrorCode != 0 || second.MemberID == first.MemberID || second.Generation != first.Generation {
			t.Fatalf("replacement: %+v", second)
		}
		if c := hb(first.MemberID); c != kerr.FencedInstanceID.Code {
			t.Fatalf("old id after the replacement: %s", codeName(c))
		}
		h.stop()
		h = newHarnessFS(t, dir, fsys, nil)
		defer h.stop()
		if c := hb(second.MemberID); c != 0 {
			t.Fatalf("new id after restart: %s", codeName(c))
		}
		if c := hb(first.MemberID); c != kerr.FencedInstanceID.Code {
			t.Fatalf("old id after restart: %s", codeName(c))
		}
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.State != "Stable" || len(d.Members) != 1 || !bytes.Equal(d.Members[0].Assignment, []byte{9}) {
			t.Fatalf("after restart: %+v", d)
		}
	})
}

// failNextSegmentSync fails the next fsync of a journal segment: the write that makes
// the group's next change durable. FaultFS.FailNext would fail the next fsync of any
// file, and the journal zero-fills its next segment on a goroutine of its own.
func failNextSegmentSync(fsys *storage.FaultFS) {
	var once sync.Once
	fsys.SetBefore(func(op storage.Op, path string) error {
		fail := false
		if op == storage.OpSync && strings.HasSuffix(path, journal.SegmentSuffix) {
			once.Do(func() { fail = true })
		}
		if fail {
			return storage.ErrInjected
		}
		return nil
	})
}

func codeName(c int16) string {
	if c == 0 {
		return "NONE"
	}
	return kerr.ErrorForCode(c).Error()
}
