package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
)

// A TxnOffsetCommit to a consumer-protocol group is checked by member epoch (Apache
// ConsumerGroup.validateOffsetCommit, transactional): an unknown member, an epoch above
// the member's are refused; the member's own epoch goes to the producer's pending layer.
func TestTxnCommitToConsumerGroup(t *testing.T) {
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, t.TempDir(), func(s *Settings) {
			s.Consumer = ConsumerSettings{Enabled: true, SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
				MaxSize: 10, Assignors: []string{"uniform", "range"}}
		})
		defer h.stop()
		hb := call[*ConsumerHeartbeatResult](h, &ConsumerHeartbeat{Group: "g", Version: 1, MemberID: "m", RebalanceTimeout: 1000,
			Subscribed: []string{}, Owned: []OwnedTopic{}})
		if hb.ErrorCode != 0 || hb.MemberEpoch != 1 {
			t.Fatalf("join: %+v", hb)
		}
		txn := func(member string, epoch int32) int16 {
			return call[*offsets.CommitResult](h, &TxnCommitOffsets{Group: "g", ProducerID: 7, MemberID: member, Generation: epoch,
				Entries: txnEntry("t", 0, 10)}).Codes[0]
		}
		if c := txn("x", 1); c != kerr.UnknownMemberID.Code {
			t.Fatalf("unknown member: %s", codeName(c))
		}
		if c := txn("m", 2); c != kerr.StaleMemberEpoch.Code {
			t.Fatalf("epoch above: %s", codeName(c))
		}
		if c := txn("", -1); c != kerr.UnknownMemberID.Code {
			t.Fatalf("no member, group with members: %s", codeName(c))
		}
		if c := txn("m", 1); c != 0 {
			t.Fatalf("member's epoch: %s", codeName(c))
		}
		tp := offsets.TopicPartition{Topic: "t", Partition: 0}
		f := call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if !f.Unstable[tp] {
			t.Fatalf("the transactional offset is not pending: %+v", f)
		}
	})
}
