package journal

import (
	"cmp"
	"errors"

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

// armRetry arms the next round of saves: WriteBehindPause away while replayed state is
// left to write and the last round saved everything it took, else UnsavedRetry.
func (j *journalActor) armRetry(ctx actor.Context) {
	if j.retryCancel != nil || j.stopped {
		return
	}
	d := j.cfg.UnsavedRetry
	if !j.roundFailed && j.behindLeft() {
		d = j.cfg.WriteBehindPause
	}
	j.retryCancel = actor.After(ctx, d, &retryUnsaved{})
}

// behindLeft says whether some replayed state (Unsaved.Replayed) is left for the journal
// to write.
func (j *journalActor) behindLeft() bool {
	for k, u := range j.unsaved {
		if u.Replayed && j.handed[k] != u {
			return true
		}
	}
	return false
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

// retryRound saves on a goroutine the unsaved states no user has claimed, at most
// WriteBehindBatch of them (SaveMany, or Save one after another).
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
	save, saveMany := j.cfg.Save, j.cfg.SaveMany
	actor.Background(ctx, func() any {
		defer close(done)
		errs := make([]error, len(round))
		var keys []string
		var data [][]byte
		var at []int // the index in round of each of keys
		for i, u := range round {
			b, err := u.Bytes()
			switch {
			case err != nil:
				errs[i] = err
			case saveMany != nil:
				keys, data, at = append(keys, u.Key), append(data, b), append(at, i)
			default:
				errs[i] = save(u.Key, b)
			}
		}
		if len(keys) > 0 {
			for k, err := range saveMany(keys, data) {
				errs[at[k]] = err
			}
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
	behind := 0
	for i, u := range m.round {
		delete(j.retrying, u.Key)
		var err error
		if i < len(m.errs) {
			err = m.errs[i]
		} else {
			err = errors.New("no outcome for this key")
		}
		if err != nil {
			failed = append(failed, u.Key)
			firstErr = cmp.Or(firstErr, err)
		} else if j.unsaved[u.Key] == u {
			delete(j.unsaved, u.Key)
			j.saved(u.Key)
			j.checkpointed(u.Key, u.Seq)
			if u.Replayed {
				behind++
			} else {
				j.log.Info().Str("group", logs.ID(u.Key)).Msg("offsets_unsaved_state_written")
			}
		}
		for _, c := range j.deferred[u.Key] {
			j.answerClaim(c)
		}
		delete(j.deferred, u.Key)
	}
	j.roundFailed = len(failed) > 0
	if behind > 0 {
		j.log.Debug().Int("groups", behind).Msg("offsets_group_files_written_behind")
		if !j.behindLeft() {
			j.log.Info().Msg("offsets_group_files_written_behind_all")
		}
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
	if j.cfg.Save == nil && j.cfg.SaveMany == nil {
		return nil
	}
	for k, u := range j.unsaved {
		if j.handed[k] != u {
			out = append(out, u)
			if len(out) == j.cfg.WriteBehindBatch {
				break
			}
		}
	}
	return out
}

// saved tells Config.Saved that key's unsaved state is saved.
func (j *journalActor) saved(key string) {
	if j.cfg.Saved != nil {
		j.cfg.Saved(key)
	}
}
