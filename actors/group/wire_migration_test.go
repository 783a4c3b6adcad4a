package group_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
)

// Online migration between the classic and consumer group protocols
// (group.consumer.migration.policy; Apache GroupMetadataManager's
// convertToConsumerGroup, classicGroupJoinToConsumerGroup and friends,
// convertToClassicGroup).

func migrationProfile(policy string) func(c *config.Config) {
	return func(c *config.Config) {
		consumerProfile(c)
		restartProfile(c)
		c.OffsetsCheckpointInterval = time.Hour
		if policy != "" {
			c.GroupConsumerMigrationPolicy = policy
		}
	}
}

// memberTypes is the member type of each member ConsumerGroupDescribe v1 lists, by id.
func memberTypes(d kmsg.ConsumerGroupDescribeResponseGroup) map[string]int8 {
	out := map[string]int8{}
	for _, m := range d.Members {
		out[m.MemberID] = m.MemberType
	}
	return out
}

func describedMember(d kmsg.ConsumerGroupDescribeResponseGroup, id string) *kmsg.ConsumerGroupDescribeResponseGroupMember {
	for i := range d.Members {
		if d.Members[i].MemberID == id {
			return &d.Members[i]
		}
	}
	return nil
}

// settleMixed runs every member's heartbeat (the classic ones rejoining when told) until
// the group is Stable with every partition of parts owned once.
func (w *wire) settleMixed(g string, parts int, cs []*cmember, ms []*member) kmsg.ConsumerGroupDescribeResponseGroup {
	w.t.Helper()
	var d kmsg.ConsumerGroupDescribeResponseGroup
	testwait.For(w.t, 15*time.Second, 20*time.Millisecond, func() error {
		for _, c := range cs {
			c.step()
			noDoubleOwnerMixed(w, cs, ms)
		}
		for _, m := range ms {
			m.beat()
			noDoubleOwnerMixed(w, cs, ms)
		}
		d = w.cgDescribe(1, g).Groups[0]
		if d.ErrorCode != 0 {
			return fmt.Errorf("describe: %s", codeName(d.ErrorCode))
		}
		if d.State != "Stable" {
			return fmt.Errorf("group %s", d.State)
		}
		if n := ownedCount(cs, ms); n != parts {
			return fmt.Errorf("%d of %d partitions owned", n, parts)
		}
		return nil
	})
	return d
}

// A ConsumerGroupHeartbeat join to a Stable classic group converts it: the classic
// members become classic members of a consumer-protocol group at the generation as
// their epoch with their assignments (ConsumerGroupDescribe member type 0), the joiner
// gets the next epoch and nothing another member still holds; the classic members are
// told to rejoin, revoke first, and everything is owned once, never twice.
func TestMigrationUpgrade(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(4, "t")
	cs := w.classicGroup("g", 2, 4, "t")
	gen := cs[0].gen
	before := map[string]map[string][]int32{cs[0].id: cs[0].own, cs[1].id: cs[1].own}

	c := w.join("g", "t")
	if c.epoch != gen+1 || count(c.own) != 0 {
		t.Fatalf("joiner at epoch %d with %v, want %d with nothing (the classic members hold everything)", c.epoch, c.own, gen+1)
	}
	d := w.cgDescribe(1, "g").Groups[0]
	wantCode(t, "describe", d.ErrorCode, 0)
	if d.Epoch != gen+1 || len(d.Members) != 3 {
		t.Fatalf("after the upgrade: epoch %d, %d members", d.Epoch, len(d.Members))
	}
	types := memberTypes(d)
	for _, cm := range cs {
		dm := describedMember(d, cm.id)
		if types[cm.id] != 0 || dm.MemberEpoch != gen {
			t.Fatalf("classic member %s: type %d epoch %d, want 0 at %d", cm.id, types[cm.id], dm.MemberEpoch, gen)
		}
		if got := count(before[cm.id]); len(dm.Assignment.TopicPartitions) != 1 || len(dm.Assignment.TopicPartitions[0].Partitions) != got {
			t.Fatalf("classic member %s kept %+v, had %v", cm.id, dm.Assignment, before[cm.id])
		}
	}
	if types[c.id] != 1 {
		t.Fatalf("consumer-protocol member type %d", types[c.id])
	}
	// The classic API sees a consumer-protocol group (KIP-1043) and ListGroups lists it so.
	dg := describe(w, 6, "g").Groups[0]
	wantCode(t, "DescribeGroups v6", dg.ErrorCode, kerr.GroupIDNotFound.Code)
	lr := kmsg.NewPtrListGroupsRequest()
	lr.Version = 5
	for _, lg := range w.do(lr).(*kmsg.ListGroupsResponse).Groups {
		if lg.Group == "g" && (lg.GroupType != "consumer" || lg.ProtocolType != "consumer") {
			t.Fatalf("listed %+v", lg)
		}
	}
	// A commit at the classic member's epoch is accepted; another generation is not.
	allCodes(t, "classic commit", commitCodes(w.do(commitReq("g", 8, cs[0].id, gen, map[string][]int32{"t": before[cs[0].id]["t"]})).(*kmsg.OffsetCommitResponse)), 0)
	allCodes(t, "classic commit, wrong generation", commitCodes(w.do(commitReq("g", 8, cs[0].id, gen+5, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)), kerr.IllegalGeneration.Code)

	// The classic members are told to rejoin.
	wantCode(t, "classic heartbeat after the upgrade", cs[0].hb(), kerr.RebalanceInProgress.Code)
	d = w.settleMixed("g", 4, cs, []*member{c})
	if count(c.own) == 0 {
		t.Fatalf("the consumer-protocol member got nothing: %+v", d)
	}
	for _, cm := range cs {
		if cm.gen != d.Epoch {
			t.Fatalf("classic member %s at generation %d, group epoch %d", cm.id, cm.gen, d.Epoch)
		}
		wantCode(t, "classic heartbeat once stable", cm.hb(), 0)
	}
}

// The last consumer-protocol member leaving a group of classic members converts it back:
// a classic group at the group epoch, rebalancing (Apache triggers one), its members
// rejoining classically; ConsumerGroupDescribe no longer knows it.
func TestMigrationDowngrade(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(4, "t")
	cs := w.classicGroup("g", 2, 4, "t")
	c := w.join("g", "t")
	d := w.settleMixed("g", 4, cs, []*member{c})

	r := w.cgh("g", hbOpts{member: c.id, epoch: -1})
	wantCode(t, "leave", r.ErrorCode, 0)
	if r.MemberEpoch != -1 {
		t.Fatalf("leave answered epoch %d", r.MemberEpoch)
	}
	wantCode(t, "ConsumerGroupDescribe after the downgrade", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
	dg := describe(w, 5, "g").Groups[0]
	if dg.State != "PreparingRebalance" || dg.ProtocolType != "consumer" || len(dg.Members) != 2 {
		t.Fatalf("after the downgrade: %+v", dg)
	}
	// Members at the group epoch are told to rejoin, and a classic generation completes.
	for _, cm := range cs {
		if cm.gen != d.Epoch {
			t.Fatalf("member %s at %d, group epoch %d", cm.id, cm.gen, d.Epoch)
		}
		wantCode(t, "heartbeat after the downgrade", cm.hb(), kerr.RebalanceInProgress.Code)
	}
	chans := make([]<-chan kmsg.Response, len(cs))
	for i, cm := range cs {
		chans[i] = w.async(cm.joinReq())
	}
	var leader *cmember
	for i, ch := range chans {
		j := wait[*kmsg.JoinGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "classic rejoin", j.ErrorCode, 0)
		if j.Generation != d.Epoch+1 {
			t.Fatalf("classic generation %d after epoch %d", j.Generation, d.Epoch)
		}
		cs[i].gen = j.Generation
		if j.LeaderID == j.MemberID {
			leader = cs[i]
		}
	}
	if leader == nil {
		t.Fatal("no leader in the classic generation")
	}
	syncs := map[*cmember]<-chan kmsg.Response{}
	for _, cm := range cs {
		var a map[string][]byte
		if cm == leader {
			a = map[string][]byte{cs[0].id: assignmentBytes(map[string][]int32{"t": {0, 1}}), cs[1].id: assignmentBytes(map[string][]int32{"t": {2, 3}})}
		}
		syncs[cm] = w.async(cm.syncReq(a))
	}
	for cm, ch := range syncs {
		s := wait[*kmsg.SyncGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "classic sync", s.ErrorCode, 0)
		cm.own = readAssignment(s.MemberAssignment)
	}
	if dg := describe(w, 5, "g").Groups[0]; dg.State != "Stable" {
		t.Fatalf("classic group %s", dg.State)
	}
}

// group.consumer.migration.policy refuses what it does not allow: an upgrade with
// GROUP_ID_NOT_FOUND (the classic group goes on untouched), a downgrade by keeping the
// consumer-protocol group with its classic members.
func TestMigrationPolicy(t *testing.T) {
	for _, policy := range []string{"disabled", "downgrade"} {
		t.Run("no upgrade under "+policy, func(t *testing.T) {
			w := startWire(t, migrationProfile(policy))
			w.createTopics(2, "t")
			cs := w.classicGroup("g", 2, 2, "t")
			r := w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}})
			wantCode(t, "join", r.ErrorCode, kerr.GroupIDNotFound.Code)
			for _, cm := range cs {
				wantCode(t, "classic heartbeat", cm.hb(), 0)
			}
			if dg := describe(w, 5, "g").Groups[0]; dg.State != "Stable" || len(dg.Members) != 2 {
				t.Fatalf("classic group after the refusal: %+v", dg)
			}
		})
	}
	for _, policy := range []string{"disabled", "upgrade"} {
		t.Run("no downgrade under "+policy, func(t *testing.T) {
			w := startWire(t, migrationProfile(policy))
			w.createTopics(2, "t")
			c := w.join("g", "t")
			w.settle("g", c)
			// A classic member joins the consumer-protocol group (mixed groups are always
			// served), then the consumer-protocol member leaves.
			cm := &cmember{w: w, group: "g", own: map[string][]int32{}, topics: []string{"t"}}
			first := w.do(cm.joinReq()).(*kmsg.JoinGroupResponse)
			wantCode(t, "first join", first.ErrorCode, kerr.MemberIDRequired.Code)
			cm.id = first.MemberID
			wantCode(t, "classic join", cm.rejoin(), 0)
			wantCode(t, "leave", w.cgh("g", hbOpts{member: c.id, epoch: -1}).ErrorCode, 0)
			d := w.cgDescribe(1, "g").Groups[0]
			wantCode(t, "describe", d.ErrorCode, 0)
			if len(d.Members) != 1 || d.Members[0].MemberType != 0 {
				t.Fatalf("after the leave: %+v", d.Members)
			}
			w.settleMixed("g", 2, []*cmember{cm}, nil)
		})
	}
}

// The classic requests in a mixed group answer Apache's codes.
func TestMigrationClassicCodes(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(2, "t")
	c := w.join("g", "t")
	w.settle("g", c)
	cm := &cmember{w: w, group: "g", own: map[string][]int32{}, topics: []string{"t"}}

	// v4+ without a member id: MEMBER_ID_REQUIRED with the id to use.
	first := w.do(cm.joinReq()).(*kmsg.JoinGroupResponse)
	wantCode(t, "join without id", first.ErrorCode, kerr.MemberIDRequired.Code)
	cm.id = first.MemberID
	// Not the consumer embedded protocol.
	jr := cm.joinReq()
	jr.ProtocolType = "connect"
	wantCode(t, "other protocol type", w.do(jr).(*kmsg.JoinGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)
	j := w.do(cm.joinReq()).(*kmsg.JoinGroupResponse)
	wantCode(t, "join", j.ErrorCode, 0)
	if j.LeaderID != "" || len(j.Members) != 0 || j.Protocol == nil || *j.Protocol != classicProto || j.Generation < 1 {
		t.Fatalf("join answer %+v", j)
	}
	cm.gen = j.Generation
	// A protocol the classic members do not all share.
	other := &cmember{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, topics: []string{"t"}, protos: []string{"range"}}
	wantCode(t, "protocol not shared", w.do(other.joinReq()).(*kmsg.JoinGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)

	sr := cm.syncReq(nil)
	sr.Generation = cm.gen + 1
	wantCode(t, "sync, wrong generation", w.do(sr).(*kmsg.SyncGroupResponse).ErrorCode, kerr.IllegalGeneration.Code)
	sr = cm.syncReq(nil)
	sr.Protocol = kmsg.StringPtr("range")
	wantCode(t, "sync, other protocol name", w.do(sr).(*kmsg.SyncGroupResponse).ErrorCode, kerr.InconsistentGroupProtocol.Code)
	sr = cm.syncReq(nil)
	sr.MemberID = "nobody"
	wantCode(t, "sync, unknown member", w.do(sr).(*kmsg.SyncGroupResponse).ErrorCode, kerr.UnknownMemberID.Code)
	wantCode(t, "sync", w.do(cm.syncReq(nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)

	wantCode(t, "heartbeat, wrong generation", w.do(hbReq("g", cm.id, cm.gen+1)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.IllegalGeneration.Code)
	// A consumer-protocol member does not speak the classic protocol.
	wantCode(t, "heartbeat of a consumer-protocol member", w.do(hbReq("g", c.id, c.epoch)).(*kmsg.HeartbeatResponse).ErrorCode, kerr.UnknownMemberID.Code)
	commit := commitReq("g", 9, c.id, c.epoch, map[string][]int32{"t": c.own["t"]})
	allCodes(t, "consumer-protocol commit", commitCodes(w.do(commit).(*kmsg.OffsetCommitResponse)), 0)

	// The classic member leaves with LeaveGroup.
	lr := kmsg.NewPtrLeaveGroupRequest()
	lr.Version = 3
	lr.Group = "g"
	lr.Members = []kmsg.LeaveGroupRequestMember{{MemberID: cm.id}}
	resp := w.do(lr).(*kmsg.LeaveGroupResponse)
	if resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %+v", resp)
	}
	if d := w.cgDescribe(1, "g").Groups[0]; len(d.Members) != 1 || d.Members[0].MemberID != c.id {
		t.Fatalf("after the classic leave: %+v", d.Members)
	}
}

// A conversion and the classic members of a mixed group survive a crash (the broker's
// data copied while it runs, before any checkpoint: the journal's replay brings them
// back): the classic members keep their epochs and assignments and go on.
func TestMigrationSurvivesCrash(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(4, "t")
	cs := w.classicGroup("g", 2, 4, "t")
	c := w.join("g", "t")
	before := w.settleMixed("g", 4, cs, []*member{c})
	crash := func(first bool) {
		img := t.TempDir()
		brokertest.CopyTree(t, w.cfg.DataDir, img)
		// The first image has no group file yet (a load from the journal writes one).
		if _, err := os.Stat(filepath.Join(offsets.Dir(img), offsets.FileName("g"))); first && !os.IsNotExist(err) {
			t.Fatalf("the group file was written before its checkpoint (%v): the journal is not what is tested", err)
		}
		w.cfg.DataDir = img
		w.b = brokertest.StartWith(t, w.cfg)
	}
	crash(true)
	after := w.cgDescribe(1, "g").Groups[0]
	wantCode(t, "describe after the crash", after.ErrorCode, 0)
	if after.Epoch != before.Epoch || len(after.Members) != 3 {
		t.Fatalf("after the crash: epoch %d, %d members; before %d", after.Epoch, len(after.Members), before.Epoch)
	}
	for _, cm := range cs {
		dm := describedMember(after, cm.id)
		if dm == nil || dm.MemberType != 0 || dm.MemberEpoch != cm.gen {
			t.Fatalf("classic member %s after the crash: %+v", cm.id, dm)
		}
		wantCode(t, "classic heartbeat after the crash", cm.hb(), 0)
		wantCode(t, "classic sync after the crash", w.do(cm.syncReq(nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	}
	c.beat()
	w.settleMixed("g", 4, cs, []*member{c})

	// And the downgrade.
	wantCode(t, "leave", w.cgh("g", hbOpts{member: c.id, epoch: -1}).ErrorCode, 0)
	crash(false)
	dg := describe(w, 5, "g").Groups[0]
	if dg.ErrorCode != 0 || len(dg.Members) != 2 || dg.ProtocolType != "consumer" {
		t.Fatalf("classic group after the crash: %+v", dg)
	}
	wantCode(t, "ConsumerGroupDescribe of the classic group", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
}

// What Apache's validateOnlineUpgrade refuses is GROUP_ID_NOT_FOUND, and a join the
// converted group would refuse (a full group) leaves the classic group as it was.
func TestMigrationUpgradeRefusals(t *testing.T) {
	t.Run("not the consumer embedded protocol", func(t *testing.T) {
		w := startWire(t, migrationProfile(""))
		m, ch := w.dynJoin("g", joinOpts{ptype: "connect", session: 10000})
		j := wait[*kmsg.JoinGroupResponse](t, ch, 10*time.Second)
		wantCode(t, "sync", w.do(syncReq("g", m, j.Generation, map[string][]byte{m: {}})).(*kmsg.SyncGroupResponse).ErrorCode, 0)
		wantCode(t, "join", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupIDNotFound.Code)
	})
	t.Run("malformed subscription", func(t *testing.T) {
		w := startWire(t, migrationProfile(""))
		m := w.stable1("g") // protocol type consumer, empty metadata
		wantCode(t, "join", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupIDNotFound.Code)
		wantCode(t, "classic heartbeat", w.do(hbReq("g", m, 1)).(*kmsg.HeartbeatResponse).ErrorCode, 0)
	})
	t.Run("a custom assignor's user data", func(t *testing.T) {
		w := startWire(t, migrationProfile(""))
		w.createTopics(2, "t")
		m := w.newClassicMember("g", "t")
		j := w.do(m.joinReq()).(*kmsg.JoinGroupResponse)
		wantCode(t, "join", j.ErrorCode, 0)
		m.gen = j.Generation
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0, 1}}}
		a.UserData = []byte("custom")
		wantCode(t, "sync", w.do(m.syncReq(map[string][]byte{m.id: a.AppendTo(nil)})).(*kmsg.SyncGroupResponse).ErrorCode, 0)
		r := w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}})
		wantCode(t, "join", r.ErrorCode, kerr.GroupIDNotFound.Code)
		if r.ErrorMessage == nil || !strings.Contains(*r.ErrorMessage, "custom assignor") {
			t.Fatalf("refusal message %v", r.ErrorMessage)
		}
		wantCode(t, "classic heartbeat", m.hb(), 0)
	})
	t.Run("larger than group.consumer.max.size", func(t *testing.T) {
		w := startWire(t, func(c *config.Config) { migrationProfile("")(c); c.GroupConsumerMaxSize = 1 })
		w.createTopics(2, "t")
		w.classicGroup("g", 2, 2, "t")
		wantCode(t, "join", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupIDNotFound.Code)
	})
	t.Run("no room for the joiner", func(t *testing.T) {
		w := startWire(t, func(c *config.Config) { migrationProfile("")(c); c.GroupConsumerMaxSize = 2 })
		w.createTopics(2, "t")
		cs := w.classicGroup("g", 2, 2, "t")
		wantCode(t, "join", w.cgh("g", hbOpts{member: newMemberID(), topics: []string{"t"}}).ErrorCode, kerr.GroupMaxSizeReached.Code)
		wantCode(t, "describe", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
		for _, cm := range cs {
			wantCode(t, "classic heartbeat", cm.hb(), 0)
		}
		if dg := describe(w, 5, "g").Groups[0]; dg.State != "Stable" || len(dg.Members) != 2 {
			t.Fatalf("classic group after the refused join: %+v", dg)
		}
	})
}

// A classic member that does not send the SyncGroup after its join, or the JoinGroup
// after a REBALANCE_IN_PROGRESS, within its rebalance timeout is fenced (Apache's sync
// and join timeouts).
func TestMigrationClassicTimeouts(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(2, "t")
	c := w.join("g", "t")
	w.settle("g", c)
	gone := func(id string) {
		t.Helper()
		testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
			if describedMember(w.cgDescribe(1, "g").Groups[0], id) != nil {
				return fmt.Errorf("%s still a member", id)
			}
			return nil
		})
	}
	newClassic := func() *cmember {
		cm := &cmember{w: w, group: "g", own: map[string][]int32{}, topics: []string{"t"}}
		cm.id = w.do(cm.joinReq()).(*kmsg.JoinGroupResponse).MemberID
		return cm
	}
	short := func(cm *cmember) *kmsg.JoinGroupRequest {
		r := cm.joinReq()
		r.RebalanceTimeoutMillis = 200
		return r
	}
	// No SyncGroup after the join.
	a := newClassic()
	wantCode(t, "join", w.do(short(a)).(*kmsg.JoinGroupResponse).ErrorCode, 0)
	gone(a.id)
	// No JoinGroup after REBALANCE_IN_PROGRESS.
	b := newClassic()
	j := w.do(short(b)).(*kmsg.JoinGroupResponse)
	wantCode(t, "join", j.ErrorCode, 0)
	b.gen = j.Generation
	wantCode(t, "sync", w.do(b.syncReq(nil)).(*kmsg.SyncGroupResponse).ErrorCode, 0)
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		c.beat() // the consumer-protocol member gives up what b's target has
		if code := b.hb(); code != kerr.RebalanceInProgress.Code {
			return fmt.Errorf("b's heartbeat: %s", codeName(code))
		}
		return nil
	})
	gone(b.id)
}

// The last consumer-protocol member fenced at its session timeout downgrades the group
// as a leave does.
func TestMigrationDowngradeOnSessionExpiry(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		migrationProfile("")(c)
		c.GroupConsumerSessionTimeout = 300 * time.Millisecond
	})
	w.createTopics(2, "t")
	cs := w.classicGroup("g", 1, 2, "t")
	c := w.join("g", "t")
	w.settleMixed("g", 2, cs, []*member{c})
	// c falls silent; the classic member keeps heartbeating.
	testwait.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		cs[0].hb()
		if dg := describe(w, 5, "g").Groups[0]; dg.ErrorCode != 0 || dg.State == "Dead" {
			return fmt.Errorf("still a consumer-protocol group (%s)", codeName(dg.ErrorCode))
		}
		return nil
	})
	wantCode(t, "ConsumerGroupDescribe", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
	wantCode(t, "classic heartbeat", cs[0].hb(), kerr.RebalanceInProgress.Code)
}

// A static classic member's instance id is taken over by a consumer-protocol member
// joining with it (Apache replaces a static member of the other protocol without the
// UNRELEASED_INSTANCE_ID check), inheriting its assignment; the classic member id is
// gone.
func TestMigrationStaticTakeover(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(2, "t")
	c := w.join("g", "t")
	w.settle("g", c)
	s := &cmember{w: w, group: "g", own: map[string][]int32{}, topics: []string{"t"}, inst: "i1"}
	s.id = "static-classic"
	wantCode(t, "static classic join", s.rejoin(), 0)
	w.settleMixed("g", 2, []*cmember{s}, []*member{c})
	if count(s.own) != 1 {
		t.Fatalf("static classic member owns %v", s.own)
	}
	n := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i1")}
	r := w.cgh("g", hbOpts{member: n.id, instance: n.inst, topics: []string{"t"}})
	wantCode(t, "consumer join with the classic member's instance id", r.ErrorCode, 0)
	n.apply(r)
	if !samePartitions(n.own, s.own) {
		t.Fatalf("the new member got %v, the classic one had %v", n.own, s.own)
	}
	d := w.cgDescribe(1, "g").Groups[0]
	if describedMember(d, s.id) != nil || describedMember(d, n.id).MemberType != 1 {
		t.Fatalf("after the take-over: %+v", d.Members)
	}
	hb := hbReq("g", s.id, s.gen)
	hb.InstanceID = kmsg.StringPtr("i1")
	wantCode(t, "the replaced classic member's heartbeat", w.do(hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.FencedInstanceID.Code)
	wantCode(t, "the replaced classic member's heartbeat without its instance", s.hb(), kerr.UnknownMemberID.Code)
}

// A static classic member replacing the last consumer-protocol member (the same
// instance id) takes its assignment and the group goes back to the classic protocol
// without a rebalance (Apache convertToClassicGroup with a joining member).
func TestMigrationDowngradeByStaticReplacement(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	w.createTopics(2, "t")
	cs := w.classicGroup("g", 1, 2, "t")
	n := &member{w: w, group: "g", id: newMemberID(), own: map[string][]int32{}, inst: strp("i2")}
	r := w.cgh("g", hbOpts{member: n.id, instance: n.inst, topics: []string{"t"}})
	wantCode(t, "static consumer-protocol join", r.ErrorCode, 0)
	n.apply(r)
	d := w.settleMixed("g", 2, cs, []*member{n})
	s := &cmember{w: w, group: "g", own: map[string][]int32{}, topics: []string{"t"}, inst: "i2"}
	j := w.do(s.joinReq()).(*kmsg.JoinGroupResponse)
	wantCode(t, "static classic join replacing it", j.ErrorCode, 0)
	s.id, s.gen = j.MemberID, j.Generation
	if j.Generation != d.Epoch {
		t.Fatalf("generation %d, group epoch %d", j.Generation, d.Epoch)
	}
	dg := describe(w, 5, "g").Groups[0]
	if dg.ErrorCode != 0 || dg.State != "Stable" || len(dg.Members) != 2 {
		t.Fatalf("after the replacement: %+v", dg)
	}
	sy := w.do(s.syncReq(nil)).(*kmsg.SyncGroupResponse)
	wantCode(t, "sync", sy.ErrorCode, 0)
	if got := readAssignment(sy.MemberAssignment); !samePartitions(got, n.own) {
		t.Fatalf("the static classic member got %v, the replaced one had %v", got, n.own)
	}
	wantCode(t, "the other classic member's heartbeat", cs[0].hb(), 0)
	wantCode(t, "ConsumerGroupDescribe", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
}
