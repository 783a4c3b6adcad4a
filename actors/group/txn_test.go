package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor/actortest"
	"kaas/actors/offsets"
)

// Transactional offsets as the group sees them (KIP-447).

func TestTxnCommitCheck(t *testing.T) {
	unknown, fenced := kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code
	for _, c := range []struct {
		name     string
		exists   bool
		s        state
		gen      int32
		member   string
		instance string
		check    int16
		v6       bool
		want     int16
	}{
		{"unknown group, simple", false, stateEmpty, -1, "", "", unknown, false, 0},
		{"unknown group, generation", false, stateEmpty, 1, "m", "", unknown, false, kerr.IllegalGeneration.Code},
		{"unknown group, generation, v6", false, stateEmpty, 1, "m", "", unknown, true, kerr.GroupIDNotFound.Code},
		{"empty, simple", true, stateEmpty, -1, "x", "i", unknown, false, 0},
		{"dead", true, stateDead, -1, "", "", 0, false, kerr.CoordinatorNotAvailable.Code},
		{"stable, zombie member", true, stateStable, 3, "x", "", unknown, false, unknown},
		{"stable, fenced instance", true, stateStable, 3, "x", "i", fenced, false, fenced},
		{"stable, zombie generation", true, stateStable, 2, "m", "", 0, false, kerr.IllegalGeneration.Code},
		{"stable, ok", true, stateStable, 3, "m", "", 0, false, 0},
		// v0-2 carry no member or generation: accepted whatever the state.
		{"stable, v0-2", true, stateStable, -1, "", "", unknown, false, 0},
		{"completing, v0-2", true, stateCompletingRebalance, -1, "", "", unknown, false, 0},
		// A transactional commit is not refused during CompletingRebalance.
		{"completing, current generation", true, stateCompletingRebalance, 3, "m", "", 0, false, 0},
		{"completing, old generation", true, stateCompletingRebalance, 2, "m", "", 0, false, kerr.IllegalGeneration.Code},
	} {
		if got := txnCommitCheck(c.exists, c.s, 3, c.gen, c.member, c.instance, c.check, c.v6); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

func txnEntry(topic string, p int32, offset int64) []offsets.Entry {
	return []offsets.Entry{{TopicPartition: offsets.TopicPartition{Topic: topic, Partition: p},
		Committed: offsets.Committed{Offset: offset, LeaderEpoch: -1}}}
}

// A stable group's member commits transactionally; a zombie of an earlier generation is
// fenced; the pending offset is unstable to require_stable, survives a restart of the
// whole coordinator, and the commit marker applies it (retried: 0).
func TestTxnOffsetsThroughGroup(t *testing.T) {
	dir := t.TempDir()
	tp := offsets.TopicPartition{Topic: "t", Partition: 0}
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, dir, nil)
		js := stableGroup(t, h, "g", 2, 10*time.Second)
		m := js[0]
		zombie := &TxnCommitOffsets{Group: "g", ProducerID: 7, MemberID: m.MemberID, Generation: m.Generation - 1,
			Entries: txnEntry("t", 0, 99)}
		if c := call[*offsets.CommitResult](h, zombie); c.Codes[0] != kerr.IllegalGeneration.Code {
			t.Fatalf("zombie generation: %s", codeName(c.Codes[0]))
		}
		gone := &TxnCommitOffsets{Group: "g", ProducerID: 7, MemberID: "gone", Generation: m.Generation,
			Entries: txnEntry("t", 0, 99)}
		if c := call[*offsets.CommitResult](h, gone); c.Codes[0] != kerr.UnknownMemberID.Code {
			t.Fatalf("unknown member: %s", codeName(c.Codes[0]))
		}
		ok := &TxnCommitOffsets{Group: "g", ProducerID: 7, MemberID: m.MemberID, Generation: m.Generation,
			Entries: txnEntry("t", 0, 10)}
		if c := call[*offsets.CommitResult](h, ok); c.Codes[0] != 0 {
			t.Fatalf("txn commit: %s", codeName(c.Codes[0]))
		}
		f := call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if !f.Unstable[tp] || len(f.Offsets) != 0 {
			t.Fatalf("fetch with require_stable: %+v", f)
		}
		h.stop()

		h = newHarness(t, dir, nil)
		defer h.stop()
		f = call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if !f.Unstable[tp] {
			t.Fatalf("pending offset lost in the restart: %+v", f)
		}
		if r := call[*TxnOffsetMarked](h, &TxnOffsetMarker{Group: "g", ProducerID: 7, Commit: true}); r.ErrorCode != 0 {
			t.Fatalf("commit marker: %s", codeName(r.ErrorCode))
		}
		if r := call[*TxnOffsetMarked](h, &TxnOffsetMarker{Group: "g", ProducerID: 7, Commit: true}); r.ErrorCode != 0 {
			t.Fatalf("retried commit marker: %s", codeName(r.ErrorCode))
		}
		f = call[*offsets.FetchResult](h, &FetchOffsets{Group: "g", Partitions: []offsets.TopicPartition{tp}, RequireStable: true})
		if f.Unstable != nil || f.Offsets[tp].Offset != 10 {
			t.Fatalf("after the commit marker: %+v", f)
		}
		// A marker for a group that never existed: nothing pending, and no group made.
		if r := call[*TxnOffsetMarked](h, &TxnOffsetMarker{Group: "nobody", ProducerID: 7}); r.ErrorCode != 0 {
			t.Fatalf("marker for an unknown group: %s", codeName(r.ErrorCode))
		}
		for _, g := range h.list().Groups {
			if g.Group == "nobody" {
				t.Fatal("a marker made a group")
			}
		}
	})
}

// Offset expiry keeps an Empty group whose only state is a pending transactional
// offset; the abort marker then drops it and the group goes at the next expiry.
func TestTxnPendingKeepsGroupFromExpiry(t *testing.T) {
	bubble(t, func(s *Settings) { s.OffsetsRetention = time.Hour; s.RetentionCheck = time.Minute },
		func(t *testing.T, h *harness) {
			c := call[*offsets.CommitResult](h, &TxnCommitOffsets{Group: "g", ProducerID: 5, Generation: -1,
				Entries: txnEntry("t", 0, 1)})
			if c.Codes[0] != 0 {
				t.Fatalf("txn commit: %s", codeName(c.Codes[0]))
			}
			time.Sleep(3 * time.Hour)
			if !listed(h, "g") {
				t.Fatal("expiry removed a group with a pending transactional offset")
			}
			if r := call[*TxnOffsetMarked](h, &TxnOffsetMarker{Group: "g", ProducerID: 5}); r.ErrorCode != 0 {
				t.Fatalf("abort marker: %s", codeName(r.ErrorCode))
			}
			time.Sleep(2 * time.Minute)
			if listed(h, "g") {
				t.Fatal("the group outlived its last pending offset's abort")
			}
		})
}

func listed(h *harness, g string) bool {
	for _, l := range h.list().Groups {
		if l.Group == g {
			return true
		}
	}
	return false
}
