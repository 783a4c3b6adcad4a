package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"kaas/actors/actor"
)

// The leader lock (cluster). A partition's leader holds <partition>/leader.lock (flock)
// for its whole life and names itself in it, so two live processes never write one log
// at once, whatever their views of ownership say. The kernel lets the lock go when its
// process dies (kill -9 included) or closes it (a graceful hand-over).
//
// A paused process keeps its locks. A lock that names a broker whose lease has lapsed is
// broken by replacing the file: the new leader unlinks it and takes the lock of a new
// leader.lock, so the paused broker holds the lock of a file nobody opens again and the
// new leader holds the partition's real lock like any other leader. A third broker that
// also believes it leads (views move at different moments) then waits for the new leader
// as it would for any, even after the paused one resumes and lets its old lock go.
//
// Taking, naming and breaking a lock are done under a second lock,
// <partition>/leader.lock.guard, held only for those few calls: a broker that breaks a
// lock reads the name of the lock's current holder, never a name a new holder is about to
// write over, and two brokers never both break one lock.

// lockRetry is how often a new leader tries the previous one's lock again (a graceful
// hand-over releases it as the old actor stops).
const lockRetry = 20 * time.Millisecond

// lockRetryTick tells the actor to try the partition's lock again.
type lockRetryTick struct{ actor.Tick }

// takeLock, in a cluster, takes the partition's lock before the log is opened. While
// another process holds it (the previous leader stopping, or paused and not yet lapsed)
// the partition parks produces and answers NOT_LEADER_OR_FOLLOWER, which clients retry,
// and the lock is tried again every lockRetry, never blocking the actor.
func (p *partitionActor) takeLock(ctx actor.Context) {
	if p.leaderLock == nil {
		held, holder, known, err := p.lockLeader()
		if err != nil {
			p.broken = err
			p.cfg.Metrics.writeFailed("open")
			p.log.Error().Err(err).Msg("partition_leader_lock_failed")
			return
		}
		if !held {
			if p.lockWaitSince.IsZero() {
				p.log.Warn().Int32("holder", holder).Bool("holder_known", known).
					Msg("partition_leader_lock_held_elsewhere_waiting")
			}
			p.waitForLock(ctx)
			return
		}
	}
	if err := p.open(ctx); err != nil {
		// The leader-epoch file could not be written: nothing is served under an epoch
		// not on disk. Tried again like a lock.
		p.cfg.Metrics.writeFailed("open")
		p.log.Error().Err(err).Msg("partition_leader_epoch_write_failed")
		p.waitForLock(ctx)
		return
	}
	if p.disk == nil {
		return // the log could not be opened: tried again (onOpenRetry)
	}
	if !p.lockWaitSince.IsZero() {
		p.log.Info().Dur("waited", time.Since(p.lockWaitSince)).Msg("partition_leader_lock_taken")
		p.lockWaitSince = time.Time{}
	}
}

// waitForLock answers NOT_LEADER_OR_FOLLOWER until the next try.
func (p *partitionActor) waitForLock(ctx actor.Context) {
	if p.lockWaitSince.IsZero() {
		p.lockWaitSince = time.Now()
	}
	p.lockCancel = actor.After(ctx, lockRetry, &lockRetryTick{})
}

// lockLeader tries to take the partition's lock, breaking it when it names a broker
// whose lease has lapsed. held is false while another process holds it (or the guard);
// holder then names it, when known.
func (p *partitionActor) lockLeader() (held bool, holder int32, known bool, err error) {
	if err := p.cfg.FS.MkdirAll(p.cfg.Dir); err != nil {
		return false, 0, false, err
	}
	guardPath := filepath.Join(p.cfg.Dir, "leader.lock.guard")
	guard, gheld, err := p.cfg.FS.Lock(guardPath)
	if err != nil {
		return false, 0, false, fmt.Errorf("lock %s: %w", guardPath, err)
	}
	if !gheld {
		return false, 0, false, nil // another broker is taking or breaking the lock
	}
	defer guard.Close()
	path := filepath.Join(p.cfg.Dir, "leader.lock")
	f, held, err := p.cfg.FS.Lock(path)
	if err != nil {
		return false, 0, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		holder, known = p.lockHolder()
		if !known || holder == p.cfg.NodeID || p.cfg.Lapsed == nil || !p.cfg.Lapsed(holder) {
			return false, holder, known, nil
		}
		// Broken: the lapsed broker keeps the lock of a file nobody opens again.
		if err := p.cfg.FS.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, holder, known, fmt.Errorf("break lock %s: %w", path, err)
		}
		if f, held, err = p.cfg.FS.Lock(path); err != nil {
			return false, holder, known, fmt.Errorf("lock %s after breaking it: %w", path, err)
		}
		if !held {
			return false, 0, false, nil // taken by a broker that does not use the guard
		}
		p.cfg.Metrics.lockBroken()
		p.log.Warn().Int32("holder", holder).Msg("partition_leader_lock_broken")
	}
	// Who holds it, for a successor that finds it held: a lock whose holder is not known
	// is waited for, so a lock is kept only once it names this broker. Written to a
	// paused broker's lock and never named, its successor would wait for the whole
	// pause. Not written: let go and tried again like a lock held elsewhere.
	id := []byte(strconv.Itoa(int(p.cfg.NodeID)))
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(id, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		p.log.Warn().Err(err).Msg("partition_leader_lock_holder_write_failed")
		return false, p.cfg.NodeID, false, nil
	}
	p.leaderLock = f
	return true, p.cfg.NodeID, true, nil
}

// lockHolder is the broker the partition's lock names (known false: none readable).
func (p *partitionActor) lockHolder() (int32, bool) {
	b, err := p.cfg.FS.ReadFile(filepath.Join(p.cfg.Dir, "leader.lock"))
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || id < 0 {
		return 0, false
	}
	return int32(id), true
}

func (p *partitionActor) unlockLeader() {
	if p.leaderLock != nil {
		p.leaderLock.Close() // closing the file lets the lock go
		p.leaderLock = nil
	}
}
