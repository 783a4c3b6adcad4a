package journal

import (
	"cmp"

	"kaas/actors/actor"
	"kaas/logs"
)

// onUnsaved keeps the state a key's user could not save (the newest, by seq) and arms
// the retry.
func (j *journalActor) onUnsaved(ctx actor.Context, m *Unsaved) {
	if old := j.unsaved[m.Key]; old != nil && m.Seq < old.Seq {
		return
	}
	if j.unsaved == nil {
		j.unsaved = map[string]*Unsaved{}
	}
	j.unsaved[m.Key] = m
	j.armRetry(ctx)
}

func (j *journalActor) armRetry(ctx actor.Context) {
	if j.retryCancel == nil && !j.stopped {
		j.retryCancel = actor.After(ctx, j.cfg.UnsavedRetry, &retryUnsaved{})
	}
}

// answerClaim hands a key's unsaved state, if any, to the key's new user.
func (j *journalActor) answerClaim(m *Claim) {
	u := j.unsaved[m.Key]
	if u != nil {
		if j.handed == nil {
			j.handed = map[string]*Unsaved{}
		}
		j.handed[m.Key] = u
	}
	m.Reply.Resolve(&Claimed{Unsaved: u, Hold: j.held[m.Key]})
}

// retryRound saves, one after another on a goroutine, the unsaved states no user has
// claimed.
func (j *journalActor) retryRound(ctx actor.Context) {
	if j.retriesDone != nil || j.stopped {
		return
	}
	round := j.retryable()
	if len(round) == 0 {
		return
	}
	if j.retrying == nil {
		j.retrying, j.deferred = map[string]*Unsaved{}, map[string][]*Claim{}
	}
	for _, u := range round {
		j.retrying[u.Key] = u
	}
	done := make(chan struct{})
	j.retriesDone = done
	actor.Background(ctx, func() any {
		defer close(done)
		errs := make([]error, len(round))
		for i, u := range round {
			errs[i] = j.cfg.Save(u.Key, u.Data)
		}
		return &unsavedRound{round: round, errs: errs}
	})
}

// onUnsavedRound unpins what a retry round wrote, answers the claims that waited for it
// and arms the next round if anything is left.
func (j *journalActor) onUnsavedRound(ctx actor.Context, m *unsavedRound) {
	j.retriesDone = nil
	var failed []string
	var firstErr error
	for i, u := range m.round {
		delete(j.retrying, u.Key)
		if err := m.errs[i]; err != nil {
			failed = append(failed, u.Key)
			firstErr = cmp.Or(firstErr, err)
		} else if j.unsaved[u.Key] == u {
			delete(j.unsaved, u.Key)
			j.checkpointed(u.Key, u.Seq)
			j.log.Info().Str("group", logs.ID(u.Key)).Msg("offsets_unsaved_state_written")
		}
		for _, c := range j.deferred[u.Key] {
			j.answerClaim(c)
		}
		delete(j.deferred, u.Key)
	}
	if len(failed) > 0 {
		j.log.Error().Err(firstErr).Int("groups_failing", len(failed)).Strs("groups", logs.IDs(failed)).Dur("retry_ms", j.cfg.UnsavedRetry).
			Msg("offsets_unsaved_group_files_still_failing")
	}
	if len(j.retryable()) > 0 {
		j.armRetry(ctx)
	}
}

// retryable is the unsaved state no user has claimed, which the journal saves itself.
func (j *journalActor) retryable() []*Unsaved {
	var out []*Unsaved
	for k, u := range j.unsaved {
		if j.cfg.Save != nil && j.handed[k] != u {
			out = append(out, u)
		}
	}
	return out
}
