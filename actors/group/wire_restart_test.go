package group_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// A group survives a broker restart with its members (§5.1, §5.2 of the reference): the
// generation the leader's SyncGroup completed is saved with its members and assignments,
// and after the restart the group loads Stable with them, each on a fresh session.

// restartProfile: the initial delay lets n members that join together make one generation.
func restartProfile(c *config.Config) {
	c.GroupInitialRebalanceDelay = 200 * time.Millisecond
}

type joined struct {
	id  string
	gen int32
}

// stableN makes n dynamic members join g together and sync (the leader assigns each
// member its own id as bytes); it returns them in joining order of the answers.
func (w *wire) stableN(g string, n int, session int32) []joined {
	w.t.Helper()
	chans := make([]<-chan kmsg.Response, n)
	for i := range chans {
		_, chans[i] = w.dynJoin(g, joinOpts{session: session, rebalance: 5000})
	}
	var ms []joined
	var leader joined
	for _, ch := range chans {
		j := wait[*kmsg.JoinGroupResponse](w.t, ch, 10*time.Second)
		wantCode(w.t, "join", j.ErrorCode, 0)
		m := joined{j.MemberID, j.Generation}
		if len(ms) > 0 && ms[0].gen != m.gen {
			w.t.Fatalf("members joined generations %d and %d", ms[0].gen, m.gen)
		}
		ms = append(ms, m)
		if j.LeaderID == j.MemberID {
			leader = m
		}
	}
	var syncs []<-chan kmsg.Response
	assign := map[string][]byte{}
	for _, m := range ms {
		assign[m.id] = []byte(m.id)
		if m != leader {
			syncs = append(syncs, w.async(syncReq(g, m.id, m.gen, nil)))
		}
	}
	syncs = append(syncs, w.async(syncReq(g, leader.id, leader.gen, assign)))
	for _, ch := range syncs {
		s := wait[*kmsg.SyncGroupResponse](w.t, ch, 10*time.Second)
		wantCode(w.t, "sync", s.ErrorCode, 0)
	}
	return ms
}

func (w *wire) heartbeat(g string, m joined) int16 {
	return w.do(hbReq(g, m.id, m.gen)).(*kmsg.HeartbeatResponse).ErrorCode
}

// A 3-member group keeps heartbeating (error 0, same generation) and committing across a
// restart; DescribeGroups shows its members and assignments; a Stable group that never
// committed is listed and described too. The sessions here are long enough that no pause
// of a loaded machine ends one: how a loaded member's session runs from the load,
// renewed by heartbeats and ended without them, is TestRestartLoadsStableMembers, on
// synctest's clock.
func TestGroupKeepsMembersAcrossRestart(t *testing.T) {
	w := startWire(t, restartProfile)
	w.createTopics(1, "t")
	const session = 60_000
	ms := w.stableN("g", 3, session)
	quiet := w.stableN("quiet", 2, session)
	for _, m := range ms {
		allCodes(t, "commit before restart", commitCodes(w.do(commitReq("g", 8, m.id, m.gen, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)), 0)
	}

	w.restart()
	for i := range 2 * len(ms) {
		for _, m := range ms {
			wantCode(t, "heartbeat after restart", w.heartbeat("g", m), 0)
		}
		for _, m := range quiet {
			wantCode(t, "quiet heartbeat after restart", w.heartbeat("quiet", m), 0)
		}
		m := ms[i%len(ms)]
		allCodes(t, "commit after restart", commitCodes(w.do(commitReq("g", 8, m.id, m.gen, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)), 0)
	}

	d := describe(w, 5, "g", "quiet")
	for i, want := range [][]joined{ms, quiet} {
		gd := d.Groups[i]
		if gd.ErrorCode != 0 || gd.State != "Stable" || gd.ProtocolType != "consumer" || gd.Protocol != "range" || len(gd.Members) != len(want) {
			t.Fatalf("%s after restart: %+v", gd.Group, gd)
		}
		for _, dm := range gd.Members {
			if !bytes.Equal(dm.MemberAssignment, []byte(dm.MemberID)) {
				t.Fatalf("%s member %s assignment %q", gd.Group, dm.MemberID, dm.MemberAssignment)
			}
		}
	}
	lr := kmsg.NewPtrListGroupsRequest()
	lr.Version = 4
	listed := map[string]string{}
	for _, g := range w.do(lr).(*kmsg.ListGroupsResponse).Groups {
		listed[g.Group] = g.GroupState
	}
	if listed["g"] != "Stable" || listed["quiet"] != "Stable" {
		t.Fatalf("listed after restart: %v", listed)
	}
}

// After a restart, a member that stops heartbeating is removed one session timeout after
// the group loaded (its first touch), not before; the others are told to rejoin and make
// the next generation without it.
func TestSilentMemberEvictedAfterRestart(t *testing.T) {
	w := startWire(t, restartProfile)
	const session = time.Second
	ms := w.stableN("g", 3, int32(session.Milliseconds()))
	w.restart()

	start := time.Now()
	var evicted time.Duration
	testwait.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		for _, m := range ms[:2] {
			switch c := w.heartbeat("g", m); c {
			case 0:
			case kerr.RebalanceInProgress.Code:
				evicted = time.Since(start)
			default:
				t.Fatalf("heartbeat after restart: %s", codeName(c))
			}
		}
		if evicted == 0 {
			return errors.New("the silent member was never removed")
		}
		return nil
	})
	if evicted < session {
		t.Fatalf("silent member removed %v after the first touch, before its %v session", evicted, session)
	}
	a := w.async(joinReq("g", joinOpts{version: 5, member: ms[0].id, session: int32(session.Milliseconds()), rebalance: 5000}))
	b := w.async(joinReq("g", joinOpts{version: 5, member: ms[1].id, session: int32(session.Milliseconds()), rebalance: 5000}))
	for _, ch := range []<-chan kmsg.Response{a, b} {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "rejoin", j.ErrorCode, 0)
		if j.Generation != ms[0].gen+1 {
			t.Fatalf("rejoined generation %d, want %d", j.Generation, ms[0].gen+1)
		}
	}
	if d := describe(w, 5, "g").Groups[0]; len(d.Members) != 2 {
		t.Fatalf("after the eviction: %+v", d)
	}
	wantCode(t, "evicted member's heartbeat", w.heartbeat("g", ms[2]), kerr.UnknownMemberID.Code)
}

// A group file written before members were saved (format version 1) still loads: an
// Empty group with its generation, protocol type and offsets, which members join anew.
func TestOldGroupFileLoads(t *testing.T) {
	c := brokertest.Config(t)
	restartProfile(&c)
	dir := offsets.Dir(c.DataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := `{"version":1,"group":"old","meta":{"protocol_type":"consumer","generation":4,"empty_since":1700000000000},` +
		`"offsets":[{"topic":"t","partition":0,"offset":42,"leader_epoch":-1,"metadata":"","commit_time":1700000000000,"expire_time":0}]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, offsets.FileName("old")), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &wire{t: t, b: brokertest.StartWith(t, c), cfg: c}
	d := describe(w, 5, "old").Groups[0]
	if d.ErrorCode != 0 || d.State != "Empty" || d.ProtocolType != "consumer" || len(d.Members) != 0 {
		t.Fatalf("old group: %+v", d)
	}
	f := w.do(fetchReq(7, "old", map[string][]int32{"t": {0}})).(*kmsg.OffsetFetchResponse)
	if got := f.Topics[0].Partitions[0].Offset; got != 42 {
		t.Fatalf("old group's offset %d", got)
	}
	ms := w.stableN("old", 1, 500)
	if ms[0].gen != 5 {
		t.Fatalf("generation after the old file's 4: %d", ms[0].gen)
	}
}
