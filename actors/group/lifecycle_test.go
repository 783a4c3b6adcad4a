package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
	"kaas/storage"
)

func commitMsg(g string, gen int32, member string, tps ...offsets.TopicPartition) *CommitOffsets {
	c := &CommitOffsets{Group: g, Generation: gen, MemberID: member}
	for i, tp := range tps {
		e := offsets.Entry{TopicPartition: tp}
		e.Offset = int64(10 + i)
		e.LeaderEpoch = -1
		c.Entries = append(c.Entries, e)
	}
	return c
}

func fetchAll(h *harness, g string) map[offsets.TopicPartition]offsets.Committed {
	r := call[*offsets.FetchResult](h, &FetchOffsets{Group: g})
	return r.Offsets
}

// An idle Empty group's actor stops after group.idle.passivation.ms; its offsets stay on
// disk and the next touch brings the group back with its generation and protocol type.
func TestPassivation(t *testing.T) {
	bubble(t, func(s *Settings) { s.InitialRebalanceDelay = 0; s.IdlePassivation = time.Minute }, func(t *testing.T, h *harness) {
		j := call[*JoinResult](h, joinMsg("g", "", time.Minute, time.Minute))
		call[*SyncResult](h, &SyncGroup{Group: "g", MemberID: j.MemberID, Generation: j.Generation})
		tp := offsets.TopicPartition{Topic: "t", Partition: 0}
		if r := call[*offsets.CommitResult](h, commitMsg("g", j.Generation, j.MemberID, tp)); r.Codes[0] != 0 {
			t.Fatalf("commit %d", r.Codes[0])
		}
		call[*LeaveResult](h, &LeaveGroup{Group: "g", Members: []LeaveMember{{MemberID: j.MemberID}}})
		time.Sleep(2 * time.Minute)
		if n := h.liveActors(); n != 0 {
			t.Fatalf("%d group actors live after passivation", n)
		}
		d := call[*Description](h, &DescribeGroup{Group: "g"})
		if d.State != "Empty" || d.ProtocolType != "consumer" {
			t.Fatalf("after passivation %+v", d)
		}
		if got := fetchAll(h, "g"); got[tp].Offset != 10 {
			t.Fatalf("offsets after passivation %+v", got)
		}
		j2 := call[*JoinResult](h, joinMsg("g", "", time.Minute, time.Minute))
		if j2.Generation != 3 {
			t.Fatalf("generation after passivation %d, want 3 (1 stable, 2 empty)", j2.Generation)
		}
		// Lookups of unknown groups do not leave actors behind.
		for _, id := range []string{"x", "y", "z"} {
			call[*Description](h, &DescribeGroup{Group: id})
			call[*Result](h, &Heartbeat{Group: id, MemberID: "m"})
		}
		time.Sleep(time.Millisecond)
		if n := h.liveActors(); n != 1 {
			t.Fatalf("%d group actors live, want 1", n)
		}
	})
}

// §5.3 with a short retention, on the fake clock: a simple group's offsets expire and the
// group with them; a Stable consumer group keeps the offsets of its subscribed topics
// and loses the others; groups that exist only on disk expire too (via the manager).
func TestOffsetExpiry(t *testing.T) {
	bubble(t, func(s *Settings) {
		s.InitialRebalanceDelay = 0
		s.OffsetsRetention = time.Minute
		s.RetentionCheck = 10 * time.Second
		s.IdlePassivation = 20 * time.Second
	}, func(t *testing.T, h *harness) {
		foo, bar := offsets.TopicPartition{Topic: "foo"}, offsets.TopicPartition{Topic: "bar"}
		call[*offsets.CommitResult](h, commitMsg("simple", -1, "", foo))
		call[*offsets.CommitResult](h, commitMsg("dormant", -1, "", foo))

		jm := joinMsg("consumer", "", 10*time.Minute, time.Minute)
		jm.Protocols[0].Metadata = subscriptionTo("foo")
		j := call[*JoinResult](h, jm)
		call[*SyncResult](h, &SyncGroup{Group: "consumer", MemberID: j.MemberID, Generation: j.Generation})
		call[*offsets.CommitResult](h, commitMsg("consumer", j.Generation, j.MemberID, foo, bar))

		// "dormant" passivates; only its file is left.
		time.Sleep(30 * time.Second)
		for range 4 {
			time.Sleep(15 * time.Second)
			call[*Result](h, &Heartbeat{Group: "consumer", MemberID: j.MemberID, Generation: j.Generation})
		}
		// 90s later: the simple and dormant groups are gone.
		for _, g := range []string{"simple", "dormant"} {
			if d := call[*Description](h, &DescribeGroup{Group: g}); d.ErrorCode != kerr.GroupIDNotFound.Code {
				t.Fatalf("%s after retention: %+v", g, d)
			}
		}
		got := fetchAll(h, "consumer")
		if _, ok := got[foo]; !ok {
			t.Fatal("subscribed topic's offset expired")
		}
		if _, ok := got[bar]; ok {
			t.Fatal("unsubscribed topic's offset kept")
		}
		l := h.list()
		if len(l.Groups) != 1 || l.Groups[0].Group != "consumer" {
			t.Fatalf("listing %+v", l.Groups)
		}
	})
}

func subscriptionTo(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

// Each retention sweep drops the tombstones of deleted groups older than the offsets
// retention (in a cluster, where the broker sets DropTombstones).
func TestSweepDropsTombstones(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		calls := make(chan time.Time, 4)
		h := newHarnessWith(t, dir, storage.OSFS{}, func(s *Settings) { s.RetentionCheck = time.Minute },
			func(c *ManagerConfig) {
				c.DropTombstones = func(before time.Time) (int, error) {
					calls <- before
					return 0, nil
				}
			})
		for i := 0; i < 2; i++ {
			before := <-calls // the fake clock runs to the next sweep
			if d := time.Since(before); d != h.cfg.Settings.OffsetsRetention {
				t.Errorf("sweep %d dropped tombstones older than %v, want the retention %v", i, d, h.cfg.Settings.OffsetsRetention)
			}
		}
		h.stop()
	})
}
