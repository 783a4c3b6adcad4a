package group_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// The online upgrade of a classic group caught in a rebalance (Apache
// convertToConsumerGroup): the ConsumerGroupHeartbeat join converts it at once, the
// JoinGroups and SyncGroups the rebalance had parked are answered
// REBALANCE_IN_PROGRESS, and the classic members rejoin through the consumer group's
// classic path.

// asyncAs sends req on its own connection under clientID (a DescribeGroups of the
// classic group then shows which member's JoinGroup the broker has taken).
func (w *wire) asyncAs(clientID string, req kmsg.Request) <-chan kmsg.Response {
	w.t.Helper()
	raw := brokertest.Dial(w.t, w.b.Addr())
	raw.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)).AppendRequest(nil, req, w.corr.Add(1)))
	ch := make(chan kmsg.Response, 1)
	go func() {
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		b, err := raw.ReadFrame(30 * time.Second)
		if err == nil {
			_, err = brokertest.Decode(b, resp)
		}
		if err != nil {
			close(ch)
			return
		}
		ch <- resp
	}()
	return ch
}

// longJoin is m's JoinGroup with a rebalance timeout longer than any test: the round
// ends only when every member has rejoined, never on its deadline.
func longJoin(m *cmember) *kmsg.JoinGroupRequest {
	r := m.joinReq()
	r.RebalanceTimeoutMillis = 120000
	return r
}

// waitClassic waits until DescribeGroups of g satisfies ok.
func (w *wire) waitClassic(g, what string, ok func(kmsg.DescribeGroupsResponseGroup) bool) {
	w.t.Helper()
	testwait.For(w.t, 10*time.Second, 10*time.Millisecond, func() error {
		d := describe(w, 5, g).Groups[0]
		if !ok(d) {
			return fmt.Errorf("%s: group %s with %d members", what, d.State, len(d.Members))
		}
		return nil
	})
}

// newClassicMember is a classic member of g with the id the broker gave it (its first
// JoinGroup answered MEMBER_ID_REQUIRED).
func (w *wire) newClassicMember(g string, topics ...string) *cmember {
	w.t.Helper()
	m := &cmember{w: w, group: g, own: map[string][]int32{}, topics: topics}
	first := w.do(m.joinReq()).(*kmsg.JoinGroupResponse)
	wantCode(w.t, "first join", first.ErrorCode, kerr.MemberIDRequired.Code)
	m.id = first.MemberID
	return m
}

// upgradeMidRebalance is the part both cases share once the classic group is in its
// rebalance with the requests parked: the consumer-protocol member joins, the parked
// requests are answered REBALANCE_IN_PROGRESS, the group is a consumer group whose
// classic members kept what they held (gen is their epoch, fresh the members with no
// assignment yet), and once everybody has rejoined every partition is owned once.
//
// then, when not nil, runs once the parked requests are answered (a crash).
func upgradeMidRebalance(t *testing.T, w *wire, gen int32, parts int, cs, fresh []*cmember, parked []<-chan kmsg.Response, then func()) {
	t.Helper()
	held := map[string]int{}
	for _, cm := range cs {
		held[cm.id] = count(cm.own)
	}
	c := w.join("g", "t")
	if c.epoch != gen+1 || count(c.own) != 0 {
		t.Fatalf("joiner at epoch %d with %v, want %d with nothing (the classic members hold everything)", c.epoch, c.own, gen+1)
	}
	for i, ch := range parked {
		switch r := wait[kmsg.Response](t, ch, 10*time.Second).(type) {
		case *kmsg.JoinGroupResponse:
			wantCode(t, fmt.Sprintf("parked request %d (JoinGroup)", i), r.ErrorCode, kerr.RebalanceInProgress.Code)
		case *kmsg.SyncGroupResponse:
			wantCode(t, fmt.Sprintf("parked request %d (SyncGroup)", i), r.ErrorCode, kerr.RebalanceInProgress.Code)
		}
	}
	if then != nil {
		then()
	}
	d := w.cgDescribe(1, "g").Groups[0]
	wantCode(t, "describe", d.ErrorCode, 0)
	all := append(append([]*cmember{}, cs...), fresh...)
	if d.Epoch != gen+1 || len(d.Members) != len(all)+1 {
		t.Fatalf("after the upgrade: epoch %d, %d members", d.Epoch, len(d.Members))
	}
	for _, cm := range all {
		dm := describedMember(d, cm.id)
		if dm == nil || dm.MemberType != 0 || dm.MemberEpoch != gen {
			t.Fatalf("classic member %s after the upgrade: %+v, want type 0 at epoch %d", cm.id, dm, gen)
		}
		n := 0
		for _, tp := range dm.Assignment.TopicPartitions {
			n += len(tp.Partitions)
		}
		if n != held[cm.id] {
			t.Fatalf("classic member %s holds %d partitions after the upgrade, %d before", cm.id, n, held[cm.id])
		}
	}
	if dg := describe(w, 6, "g").Groups[0]; dg.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DescribeGroups v6 of the converted group: %s", codeName(dg.ErrorCode))
	}
	// A member whose JoinGroup or SyncGroup was answered REBALANCE_IN_PROGRESS joins again
	// at once (the others learn it from their heartbeat): through the consumer group's
	// classic path, answered without a leader.
	for _, cm := range all {
		if code := cm.rejoin(); code != 0 && code != kerr.RebalanceInProgress.Code {
			t.Fatalf("rejoin of %s: %s", cm.id, codeName(code))
		}
		noDoubleOwnerMixed(w, all, []*member{c})
	}
	d = w.settleMixed("g", parts, all, []*member{c})
	if count(c.own) == 0 {
		t.Fatalf("the consumer-protocol member got nothing: %+v", d)
	}
	for _, cm := range all {
		if cm.gen != d.Epoch || count(cm.own) == 0 {
			t.Fatalf("classic member %s at generation %d with %v, group epoch %d", cm.id, cm.gen, cm.own, d.Epoch)
		}
		wantCode(t, "classic heartbeat once stable", cm.hb(), 0)
	}
}

// Classic members parked in JoinGroup (PreparingRebalance): a member that owns
// partitions and one that joined in this rebalance and has none; a third has not
// rejoined yet and learns of the conversion from its heartbeat.
func TestMigrationUpgradePreparingRebalance(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	upgradePreparing(t, w, nil)
}

// The conversion of a group in a rebalance is durable before the join is answered: a
// crash right after it (the broker's data copied while it runs, before any
// checkpoint) comes back with the converted group, and its members go on there.
func TestMigrationUpgradeMidRebalanceSurvivesCrash(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	upgradePreparing(t, w, func() {
		img := t.TempDir()
		brokertest.CopyTree(t, w.cfg.DataDir, img)
		w.cfg.DataDir = img
		w.b = brokertest.StartWith(t, w.cfg)
	})
}

func upgradePreparing(t *testing.T, w *wire, then func()) {
	t.Helper()
	w.createTopics(6, "t")
	cs := w.classicGroup("g", 2, 6, "t")
	gen := cs[0].gen
	nm := w.newClassicMember("g", "t")
	joinNew := w.asyncAs("joiner", longJoin(nm))
	w.waitClassic("g", "the new member's join parked", func(d kmsg.DescribeGroupsResponseGroup) bool {
		return d.State == "PreparingRebalance" && len(d.Members) == 3
	})
	rejoin := w.asyncAs("rejoined", longJoin(cs[0]))
	w.waitClassic("g", "the first member's rejoin parked", func(d kmsg.DescribeGroupsResponseGroup) bool {
		for _, m := range d.Members {
			if m.MemberID == cs[0].id {
				return d.State == "PreparingRebalance" && m.ClientID == "rejoined"
			}
		}
		return false
	})
	upgradeMidRebalance(t, w, gen, 6, cs, []*cmember{nm}, []<-chan kmsg.Response{joinNew, rejoin}, then)
}

// Classic members parked in SyncGroup (CompletingRebalance): every member has rejoined,
// the generation moved on, the followers wait in SyncGroup for a leader that has not
// sent its assignment. The members keep what the last generation gave them.
func TestMigrationUpgradeCompletingRebalance(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(6, "t")
	cs := w.classicGroup("g", 2, 6, "t")
	nm := w.newClassicMember("g", "t")
	all := []*cmember{cs[0], cs[1], nm}
	chans := []<-chan kmsg.Response{w.async(longJoin(nm))}
	w.waitClassic("g", "the new member's join parked", func(d kmsg.DescribeGroupsResponseGroup) bool {
		return d.State == "PreparingRebalance" && len(d.Members) == 3
	})
	chans = append(chans, w.async(longJoin(cs[0])), w.async(longJoin(cs[1])))
	var leader *cmember
	for i, ch := range chans {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "join", j.ErrorCode, 0)
		m := []*cmember{nm, cs[0], cs[1]}[i]
		m.gen = j.Generation
		if j.LeaderID == m.id {
			leader = m
		}
	}
	if leader == nil || nm.gen != cs[0].gen || nm.gen != cs[1].gen {
		t.Fatalf("round: leader %v, generations %d %d %d", leader, nm.gen, cs[0].gen, cs[1].gen)
	}
	gen := nm.gen
	var parked []<-chan kmsg.Response
	for _, m := range all {
		if m != leader {
			parked = append(parked, w.async(m.syncReq(nil)))
		}
	}
	w.waitClassic("g", "the round completed", func(d kmsg.DescribeGroupsResponseGroup) bool {
		return d.State == "CompletingRebalance"
	})
	upgradeMidRebalance(t, w, gen, 6, cs, []*cmember{nm}, parked, nil)
}

// A sync interrupted by a new round drops the classic members' assignments (Apache
// resetAndPropagateAssignmentWithError), yet a cooperative client keeps its partitions
// until it is told to revoke them, and says so in its JoinGroup. The conversion takes
// them as its own: the consumer-protocol member gets none of them before their owners
// have rejoined and revoked them (never two owners).
func TestMigrationUpgradeAfterInterruptedSync(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(6, "t")
	cs := w.classicGroup("g", 2, 6, "t")
	nm := w.newClassicMember("g", "t")
	chans := []<-chan kmsg.Response{w.async(longJoin(nm))}
	w.waitClassic("g", "the new member's join parked", func(d kmsg.DescribeGroupsResponseGroup) bool {
		return d.State == "PreparingRebalance" && len(d.Members) == 3
	})
	chans = append(chans, w.async(longJoin(cs[0])), w.async(longJoin(cs[1])))
	for i, ch := range chans {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "join", j.ErrorCode, 0)
		[]*cmember{nm, cs[0], cs[1]}[i].gen = j.Generation
	}
	gen := nm.gen
	// Before anybody syncs, another member joins: a new round, the assignments dropped.
	nm2 := w.newClassicMember("g", "t")
	joinNew := w.async(longJoin(nm2))
	w.waitClassic("g", "the second new member's join parked", func(d kmsg.DescribeGroupsResponseGroup) bool {
		return d.State == "PreparingRebalance" && len(d.Members) == 4
	})
	upgradeMidRebalance(t, w, gen, 6, cs, []*cmember{nm, nm2}, []<-chan kmsg.Response{joinNew}, nil)
}
