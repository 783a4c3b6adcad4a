package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
)

// The online upgrade of a classic group in a rebalance, driven through the group's
// mailbox on the fake clock, so that which requests are parked when the
// ConsumerGroupHeartbeat arrives is certain: those JoinGroups (PreparingRebalance) and
// SyncGroups (CompletingRebalance) are answered REBALANCE_IN_PROGRESS by the
// conversion, not before it.

// oneTopic is a catalogue of topic "t" with n partitions.
type oneTopic int32

func (n oneTopic) Topic(name string) (TopicID, int32, bool) {
	if name != "t" {
		return TopicID{}, 0, false
	}
	return TopicID{1}, int32(n), true
}

func (n oneTopic) TopicName(id TopicID) (string, bool) {
	if id != (TopicID{1}) {
		return "", false
	}
	return "t", true
}

func (oneTopic) TopicNames() ([]string, uint64) { return []string{"t"}, 1 }
func (oneTopic) TopicsGen() uint64              { return 1 }

func migrationSettings(s *Settings) {
	// The first round waits for every JoinGroup sent at once (the fake clock passes the
	// delay once they are all parked): without it the round could complete with the
	// first member alone before the second reached the group, which then rebalanced
	// again (a SyncGroup at generation 1 from the second: UNKNOWN_MEMBER_ID).
	s.InitialRebalanceDelay = 3 * time.Second
	s.Consumer = ConsumerSettings{Enabled: true, SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
		MaxSize: 10, Assignors: []string{"uniform", "range"}, Topics: oneTopic(6)}
}

// classicJoin is member's JoinGroup of the consumer embedded protocol subscribing "t"
// and reporting own.
func classicJoin(member string, own ...int32) *JoinGroup {
	md := kmsg.NewConsumerMemberMetadata()
	md.Version = 1
	md.Topics = []string{"t"}
	if len(own) > 0 {
		md.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: own}}
	}
	r := joinMsg("g", member, 30*time.Second, time.Hour)
	r.Protocols = []Protocol{{Name: "range", Metadata: md.AppendTo(nil)}}
	return r
}

func partsOf(ps ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: ps}}
	return a.AppendTo(nil)
}

// classicPair makes a classic group of two members at generation 1, the leader with
// partitions 0-2, the follower 3-5; it returns their ids, leader first.
func classicPair(t *testing.T, h *harness) (string, string) {
	t.Helper()
	w1, w2 := h.send(classicJoin("")), h.send(classicJoin(""))
	r1, r2 := get[*JoinResult](t, w1), get[*JoinResult](t, w2)
	wantJoin(t, r1, 0)
	wantJoin(t, r2, 0)
	leader, follower := r1.MemberID, r2.MemberID
	if r1.Leader != leader {
		leader, follower = follower, leader
	}
	sl := h.send(&SyncGroup{Group: "g", MemberID: leader, Generation: 1,
		Assignments: map[string][]byte{leader: partsOf(0, 1, 2), follower: partsOf(3, 4, 5)}})
	sf := h.send(&SyncGroup{Group: "g", MemberID: follower, Generation: 1})
	for _, w := range []*actor.Waiter{sl, sf} {
		if r := get[*SyncResult](t, w); r.ErrorCode != 0 {
			t.Fatalf("sync: error %d", r.ErrorCode)
		}
	}
	return leader, follower
}

func wantJoin(t *testing.T, r *JoinResult, code int16) {
	t.Helper()
	if r.ErrorCode != code {
		t.Fatalf("JoinGroup of %q: error %d, want %d", r.MemberID, r.ErrorCode, code)
	}
}

// upgradeJoin is the ConsumerGroupHeartbeat join of a consumer-protocol member: it is
// accepted at the epoch after gen, with nothing (the classic members hold everything).
func upgradeJoin(t *testing.T, h *harness, gen int32) *ConsumerHeartbeatResult {
	t.Helper()
	hb := call[*ConsumerHeartbeatResult](h, &ConsumerHeartbeat{Group: "g", Version: 1, MemberID: "n", RebalanceTimeout: 60000,
		Subscribed: []string{"t"}, Owned: []OwnedTopic{}})
	if hb.ErrorCode != 0 || hb.MemberEpoch != gen+1 {
		t.Fatalf("consumer-protocol join: %+v, want epoch %d", hb, gen+1)
	}
	if gen > 0 && len(hb.Assignment) != 0 {
		t.Fatalf("consumer-protocol join got %+v while the classic members hold everything", hb.Assignment)
	}
	return hb
}

// PreparingRebalance: a new member's and a known member's JoinGroups are parked, the
// other known member has not rejoined.
func TestUpgradeAnswersParkedJoins(t *testing.T) {
	bubble(t, migrationSettings, func(t *testing.T, h *harness) {
		leader, _ := classicPair(t, h)
		joinNew := h.send(classicJoin(""))
		rejoin := h.send(classicJoin(leader, 0, 1, 2))
		if answered(joinNew) || answered(rejoin) {
			t.Fatal("a JoinGroup of the rebalance was answered before the conversion")
		}
		upgradeJoin(t, h, 1)
		for _, w := range []*actor.Waiter{joinNew, rejoin} {
			wantJoin(t, get[*JoinResult](t, w), kerr.RebalanceInProgress.Code)
		}
		d := call[*ConsumerDescription](h, &ConsumerDescribe{Group: "g"})
		if d.ErrorCode != 0 || len(d.Members) != 4 {
			t.Fatalf("after the upgrade: %+v", d)
		}
	})
}

// CompletingRebalance: the followers' SyncGroups are parked waiting for the leader's.
func TestUpgradeAnswersParkedSyncs(t *testing.T) {
	bubble(t, migrationSettings, func(t *testing.T, h *harness) {
		leader, follower := classicPair(t, h)
		joins := []*actor.Waiter{h.send(classicJoin("")), h.send(classicJoin(leader, 0, 1, 2)), h.send(classicJoin(follower, 3, 4, 5))}
		var syncs []*actor.Waiter
		for _, w := range joins {
			r := get[*JoinResult](t, w)
			wantJoin(t, r, 0)
			if r.Generation != 2 {
				t.Fatalf("round at generation %d", r.Generation)
			}
			if r.MemberID != r.Leader {
				syncs = append(syncs, h.send(&SyncGroup{Group: "g", MemberID: r.MemberID, Generation: 2}))
			}
		}
		for _, w := range syncs {
			if answered(w) {
				t.Fatal("a follower's SyncGroup was answered before the leader's")
			}
		}
		upgradeJoin(t, h, 2)
		for _, w := range syncs {
			if r := get[*SyncResult](t, w); r.ErrorCode != kerr.RebalanceInProgress.Code {
				t.Fatalf("parked SyncGroup: error %d, want REBALANCE_IN_PROGRESS", r.ErrorCode)
			}
		}
	})
}

// The first rebalance of a new group, before any generation chose a protocol (the
// initial delay running): the subscriptions are read from the protocol the round would
// choose, the members start with nothing, and everybody settles in the consumer group
// with every partition owned once.
func TestUpgradeDuringFirstRebalance(t *testing.T) {
	bubble(t, func(s *Settings) { migrationSettings(s); s.InitialRebalanceDelay = 3 * time.Second }, func(t *testing.T, h *harness) {
		joins := []*actor.Waiter{h.send(classicJoin("")), h.send(classicJoin(""))}
		for _, w := range joins {
			if answered(w) {
				t.Fatal("a JoinGroup was answered within the initial delay")
			}
		}
		// Nobody holds anything yet: the joiner may be given partitions at once.
		first := upgradeJoin(t, h, 0)
		classic := map[string]*struct {
			epoch int32
			own   []int32
		}{}
		for _, w := range joins {
			r := get[*JoinResult](t, w)
			wantJoin(t, r, kerr.RebalanceInProgress.Code)
			classic[r.MemberID] = &struct {
				epoch int32
				own   []int32
			}{}
		}
		var nOwn []int32
		for _, a := range first.Assignment {
			nOwn = append(nOwn, a.Partitions...)
		}
		nEpoch := first.MemberEpoch
		settled := func() bool {
			seen := map[int32]bool{}
			all := append([]int32{}, nOwn...)
			for _, c := range classic {
				all = append(all, c.own...)
			}
			for _, p := range all {
				if seen[p] {
					t.Fatalf("partition %d owned twice", p)
				}
				seen[p] = true
			}
			return len(seen) == 6 && len(nOwn) > 0
		}
		for i := 0; ; i++ {
			if i == 50 {
				t.Fatal("the group did not settle")
			}
			// Each classic member rejoins when told, revoking what its sync leaves out.
			for id, c := range classic {
				if hb := call[*Result](h, &Heartbeat{Group: "g", MemberID: id, Generation: c.epoch}); hb.ErrorCode == 0 && i > 0 {
					continue
				}
				j := call[*JoinResult](h, classicJoin(id, c.own...))
				wantJoin(t, j, 0)
				if j.Leader != "" {
					t.Fatalf("classic member %s answered with leader %q", id, j.Leader)
				}
				c.epoch = j.Generation
				s := call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: id, Generation: c.epoch})
				if s.ErrorCode != 0 {
					continue // the group moved on: rejoin next time
				}
				var a kmsg.ConsumerMemberAssignment
				if err := a.ReadFrom(s.Assignment); err != nil {
					t.Fatal(err)
				}
				c.own = nil
				for _, tp := range a.Topics {
					c.own = append(c.own, tp.Partitions...)
				}
			}
			hb := call[*ConsumerHeartbeatResult](h, &ConsumerHeartbeat{Group: "g", Version: 1, MemberID: "n", MemberEpoch: nEpoch,
				RebalanceTimeout: -1, Owned: []OwnedTopic{{ID: TopicID{1}, Partitions: nOwn}}})
			if hb.ErrorCode != 0 {
				t.Fatalf("consumer-protocol heartbeat: %+v", hb)
			}
			nEpoch = hb.MemberEpoch
			if hb.HasAssignment {
				nOwn = nil
				for _, a := range hb.Assignment {
					nOwn = append(nOwn, a.Partitions...)
				}
			}
			if settled() {
				return
			}
		}
	})
}
