package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/offsets"
)

// The offset APIs as the group sees them: it validates each request against its
// membership (§4.7, §4.8, §4.13 of the reference) and hands what passes to its offsets
// actor. Every question to the offsets actor goes through ask, so the group knows what is
// in flight: it never passivates with a request unanswered, and a restart answers them.

// OffsetCommit: fencing by generation, member and instance; simple commits (generation
// -1) to an Empty or unknown group; REBALANCE_IN_PROGRESS in CompletingRebalance.
func (g *groupActor) handleCommit(ctx actor.Context, r *CommitOffsets) {
	code := commitCheck(g.exists, g.state, g.generation, r.Generation, r.MemberID, r.InstanceID,
		g.checkMember(r.MemberID, r.InstanceID), r.UnknownGroupIsNotFound)
	if code != 0 {
		r.fail(code)
		return
	}
	g.exists = true
	if m := g.members[r.MemberID]; m != nil && r.Generation >= 0 {
		// A commit keeps the session like a heartbeat (GCT::testCommitMaintainsSession).
		m.deadline = time.Now().Add(m.sessionTimeout)
	}
	g.commitDirect(ctx, r.Entries, r.Reply)
}

// commitDirect hands a validated commit to the offsets actor with the client's own
// promise: the offsets actor answers the connection once the write holding it is on
// disk, without a turn of the group in between (the group has nothing to add to the
// answer). The offsets actor answers every request it takes, by its write, its stop or
// its restart; one held while it passivates is answered by shutdown if the group stops
// first. It is not one of the group's ops: the offsets actor's own queue keeps it from
// passivating with the commit unanswered (it stays when Passivate finds work).
func (g *groupActor) commitDirect(ctx actor.Context, entries []offsets.Entry, reply actor.Promise) {
	g.toOffsets(ctx, &offsets.Commit{Entries: entries, Reply: reply})
}

// TxnOffsetCommit: the transactional commit's checks (txnCommitCheck); what passes goes
// to the producer's pending layer. An unknown group with no generation becomes a simple
// group, as for OffsetCommit.
func (g *groupActor) handleTxnCommit(ctx actor.Context, r *TxnCommitOffsets) {
	code := txnCommitCheck(g.exists, g.state, g.generation, r.Generation, r.MemberID, r.InstanceID,
		g.checkMember(r.MemberID, r.InstanceID), r.UnknownGroupIsNotFound)
	if code != 0 {
		r.fail(code)
		return
	}
	g.exists = true
	g.ask(ctx, r, func(p actor.Promise) any {
		return &offsets.TxnCommit{ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Entries: r.Entries, Reply: p}
	}, func(v any) {
		if res, ok := v.(*offsets.CommitResult); ok {
			r.Reply.Resolve(res)
			return
		}
		r.fail(notAvailable)
	})
}

// The transaction coordinator's marker: whatever the group's state (Apache replays
// the end-transaction marker into the offsets alone), the producer's pending offsets
// are applied or dropped. A group that is only a name has nothing pending.
func (g *groupActor) handleTxnMarker(ctx actor.Context, r *TxnOffsetMarker) {
	if !g.exists {
		r.Reply.Resolve(&TxnOffsetMarked{})
		return
	}
	g.ask(ctx, r, func(p actor.Promise) any {
		return &offsets.TxnEnd{ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Commit: r.Commit, Reply: p}
	}, func(v any) {
		res, ok := v.(*offsets.Result)
		if !ok {
			res = &offsets.Result{ErrorCode: notAvailable}
		}
		r.Reply.Resolve(&TxnOffsetMarked{ErrorCode: res.ErrorCode})
	})
}

// OffsetFetch answers from the file whatever the group's state; an unknown group has no
// offsets (-1 with no error, as Apache does for classic groups).
func (g *groupActor) handleFetch(ctx actor.Context, r *FetchOffsets) {
	g.ask(ctx, r, func(p actor.Promise) any {
		return &offsets.Fetch{Partitions: r.Partitions, RequireStable: r.RequireStable, Reply: p}
	},
		func(v any) {
			if res, ok := v.(*offsets.FetchResult); ok {
				r.Reply.Resolve(res)
				return
			}
			r.fail(notAvailable)
		})
}

// OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a group with
// members that is not a consumer group, GROUP_SUBSCRIBED_TO_TOPIC for the topics its
// members subscribe to; the rest is deleted (Apache 4.0 checks subscriptions in every state).
func (g *groupActor) handleDeleteOffsets(ctx actor.Context, r *DeleteOffsets) {
	if !g.exists || g.state == stateDead {
		r.fail(kerr.GroupIDNotFound.Code)
		return
	}
	if len(g.members) > 0 && g.protocolType != consumerProtocol {
		r.fail(kerr.NonEmptyGroup.Code)
		return
	}
	known := g.topicsKnown || len(g.members) == 0
	codes := make([]int16, len(r.Partitions))
	var del []offsets.TopicPartition
	for i, tp := range r.Partitions {
		if subscribedTo(g.protocolType, g.topics, known, tp.Topic) {
			codes[i] = kerr.GroupSubscribedToTopic.Code
			continue
		}
		del = append(del, tp)
	}
	if len(del) == 0 {
		r.Reply.Resolve(&OffsetDeleteResult{Codes: codes})
		return
	}
	g.ask(ctx, r, func(p actor.Promise) any { return &offsets.Delete{Partitions: del, Reply: p} },
		func(v any) {
			res, ok := v.(*offsets.Result)
			if !ok {
				res = &offsets.Result{ErrorCode: notAvailable}
			}
			if res.ErrorCode != 0 {
				r.Reply.Resolve(&OffsetDeleteResult{ErrorCode: res.ErrorCode})
				return
			}
			r.Reply.Resolve(&OffsetDeleteResult{Codes: codes})
		})
}

// expire runs offset expiry (every offsets.retention.check.interval.ms, or at once for a
// group the manager woke because it exists only on disk). A group left Empty with no
// offsets is removed, as Apache does at the end of its cleanup (§5.3 rule 7).
func (g *groupActor) expire(ctx actor.Context, woken bool) {
	if !g.exists || g.loading || g.broken != 0 {
		if woken {
			g.maybeForget(ctx)
		}
		return
	}
	rule, ok := expiryRule(g.state, g.protocolType, g.topics, g.topicsKnown, g.cfg.Settings.OffsetsRetention)
	if g.cg != nil {
		rule, ok = g.consumerExpiryRule(), true
	}
	if !ok {
		return
	}
	g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.Expire{Now: time.Now(), Rule: rule, Reply: p} },
		func(v any) {
			st, ok := v.(*offsets.Status)
			if !ok || st.ErrorCode != 0 {
				return
			}
			// Anything else in flight (a commit) would be lost to a DeleteAll sent after it;
			// pending transactional offsets keep the group (Apache: "we don't want to
			// remove the group if there are ongoing transactions"), and so do a
			// consumer-protocol group's members.
			if st.Count > 0 || st.Pending > 0 || g.state != stateEmpty || len(g.members) > 0 || len(g.pending) > 0 || g.ops.Len() > 0 ||
				(g.cg != nil && len(g.cg.members) > 0) {
				if woken && g.idle() {
					ctx.Send(ctx.Parent(), &passivate{group: g.id, pid: ctx.Self()})
				}
				return
			}
			if !st.Exists {
				g.log().Info().Msg("empty_group_removed")
				g.reset()
				g.maybeForget(ctx)
				return
			}
			g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.DeleteAll{Reply: p} }, func(v any) {
				if res, ok := v.(*offsets.Result); ok && res.ErrorCode == 0 && g.state == stateEmpty &&
					len(g.members) == 0 && g.ops.Len() == 0 && (g.cg == nil || len(g.cg.members) == 0) {
					g.log().Info().Msg("group_expired_no_offsets_left")
					g.reset()
					g.maybeForget(ctx)
				}
			})
		})
}

// handleDropTopics: a DeleteTopics removes the topics' committed offsets from every group,
// whatever its state or subscriptions (GroupCoordinator.onPartitionsDeleted). The group
// itself stays; one left Empty with no offsets goes at the next expiry run, as in Apache.
func (g *groupActor) handleDropTopics(ctx actor.Context, m *dropTopics) {
	if !g.exists {
		return // nothing on disk; maybeForget passivates a mere name
	}
	g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.DropTopics{Topics: m.topics, Reply: p} },
		func(v any) {
			if r, ok := v.(*offsets.Result); !ok || r.ErrorCode != 0 {
				g.log().Error().Strs("topics", m.topics).Msg("deleted_topics_offsets_not_dropped")
			}
			if m.woken && g.idle() {
				ctx.Send(ctx.Parent(), &passivate{group: g.id, pid: ctx.Self()})
			}
		})
}
