package partition

import (
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// Rolling off the turn. A segment is rolled once the active one is full: the full
// segment is fsynced and the next one's file created and its directory entry fsynced.
// Those run as a background job (actor.Background), so fetches, metadata and every
// other message go on being answered meanwhile. Produces that come while the job runs
// wait in rollQueue, in the order they came, and are appended once the new segment is
// the active one; until then nothing is appended, so the full segment's fsync covers
// all of it and recovery still has one file that may hold unsynced bytes.

// rollJob is one roll in flight. The file it makes is handed over under mu: to the
// actor when its rollDone is handled, or closed by the job itself when the actor has
// stopped or restarted meanwhile (gone), so it is never left open.
type rollJob struct {
	mu   sync.Mutex
	gone bool
	f    storage.RWFile
}

// give hands the job's new file over (job side).
func (j *rollJob) give(f storage.RWFile) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.gone {
		f.Close()
		return
	}
	j.f = f
}

// take is the file the job made (actor side); nil once abandoned.
func (j *rollJob) take() storage.RWFile {
	j.mu.Lock()
	defer j.mu.Unlock()
	f := j.f
	j.f = nil
	return f
}

// abandon closes the job's file, made or still to be made (the actor stops).
func (j *rollJob) abandon() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gone = true
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// rollDone is the background roll's result, sent by the job to its actor.
type rollDone struct {
	job *rollJob
	seg *segment // without its file: job.take
	err error
}

// queueForRoll holds m until the roll in flight (started here if none is) is done.
func (p *partitionActor) queueForRoll(ctx actor.Context, m *appendBatch) {
	p.rollQueue = append(p.rollQueue, m)
	actor.HandedOn(ctx) // answered once appended, or by Stopping or Restarting
	if p.roll == nil {
		p.startRoll(ctx)
	}
}

// startRoll starts the background roll of the active segment.
func (p *partitionActor) startRoll(ctx actor.Context) {
	old := p.disk.active()
	prev, err := old.file()
	job := &rollJob{}
	p.roll = job
	if err != nil {
		p.onRollDone(ctx, &rollDone{job: job, err: err})
		return
	}
	l, base, size, from := p.disk, old.next, old.size, p.repairFrom(old)
	idx := l.dirtyTxnIndexes()
	log := p.log
	actor.Background(ctx, func() any {
		if err := syncTxnIndexes(idx); err != nil {
			log.Warn().Err(err).Msg("partition_txn_index_sync_failed") // the log holds its markers
		}
		if from >= 0 {
			// An fsync of it failed since the last good one (repair.go).
			if err := rewriteTail(prev, from, size); err != nil {
				return &rollDone{job: job, err: err}
			}
		}
		s, err := l.makeSegment(prev, base)
		if err != nil {
			return &rollDone{job: job, err: err}
		}
		f := s.f
		s.f = nil
		job.give(f)
		return &rollDone{job: job, seg: s}
	})
}

// onRollDone makes the new segment the active one and appends the produces that waited
// for it; a roll that failed answers them KAFKA_STORAGE_ERROR (their producers retry).
func (p *partitionActor) onRollDone(ctx actor.Context, m *rollDone) {
	if m.job != p.roll {
		return // from an incarnation that restarted since: its file was closed
	}
	p.roll = nil
	f := m.job.take()
	if m.err == nil && f == nil {
		return // abandoned: the actor is stopping
	}
	if m.err != nil || p.disk == nil {
		if f != nil {
			f.Close()
		}
		if errors.Is(m.err, errTailLost) && p.disk != nil {
			p.dropLog(ctx, m.err)
			return
		}
		p.repair = p.repair || m.err != nil // its fsync may have failed
		p.cfg.Metrics.writeFailed("roll")
		p.log.Error().Err(m.err).Msg("partition_roll_failed")
		for _, w := range p.rollQueue {
			w.fail(p.closedCode())
		}
		clear(p.rollQueue)
		p.rollQueue = p.rollQueue[:0]
		return
	}
	m.seg.f = f
	p.disk.addSegment(m.seg)
	p.repair, p.synced = false, syncedTo{seg: m.seg}
	// Every offset before the new segment is durable: its predecessor was fsynced.
	p.settle(ctx, m.seg.base, nil)
	// One at a time off the queue: a panic in one leaves the rest to Restarting. A
	// batch that fills the new segment too starts the next roll, and the rest wait on.
	for len(p.rollQueue) > 0 && p.roll == nil {
		w := p.rollQueue[0]
		if p.disk.rollDue(len(w.batch.records)) || p.timeRollDue(&w.batch.h) {
			p.startRoll(ctx)
			return
		}
		p.rollQueue[0] = nil
		p.rollQueue = p.rollQueue[1:]
		p.handleAppend(ctx, w)
	}
}

// answerRollQueue answers the produces waiting for a roll NOT_LEADER_OR_FOLLOWER (never
// appended: their producers retry) and lets the roll's file go (the actor stops).
func (p *partitionActor) answerRollQueue() {
	if p.roll != nil {
		p.roll.abandon()
		p.roll = nil
	}
	for _, w := range p.rollQueue {
		w.fail(kerr.NotLeaderForPartition.Code)
	}
	p.rollQueue = nil
}
