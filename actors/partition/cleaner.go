package partition

import (
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"kaas/actors/actor"
)

// The partition actor's side of log compaction (compact.go holds the pass itself).
//
// On the retention tick, a leader whose topic's cleanup.policy holds compact plans a
// pass (planClean) when the dirty ratio reaches min.cleanable.dirty.ratio, and holds
// open the files of every cleanable segment. A background job builds the key map and
// writes each group's cleaned file aside (cleaned). Back in the actor's turn, a fenced
// partition, or one whose log was closed meanwhile, deletes the cleaned files; else a
// second job swaps them in, walking each new file for its index (cleanSwapped), and the
// actor puts the new segments in place of the old ones in its turn. While a pass runs,
// retention and DeleteRecords delete no segment and no segment file is closed as idle:
// every read planned meanwhile reads an old segment through the file it held open, and
// its offsets and positions stay those of that file, even unlinked (readplan.go). A
// swap that fails midway reopens the log: recovery (recoverCleaning) finishes or undoes
// what is on disk.

// CleanerConfig is a compacted topic's settings (cleanup.policy holding compact).
type CleanerConfig struct {
	// Delete: cleanup.policy also holds delete, so retention.ms and retention.bytes
	// delete segments too (compact,delete); without it they delete nothing.
	Delete        bool
	MinDirtyRatio float64 // min.cleanable.dirty.ratio
	MinLagMS      int64   // min.compaction.lag.ms
	// MaxLagMS is max.compaction.lag.ms (KIP-354): a pass is due, whatever the dirty
	// ratio, once a dirty segment's first batch is older than it, and the active
	// segment rolls by age at min(segment.ms, it) so that it becomes cleanable.
	MaxLagMS          int64
	DeleteRetentionMS int64 // delete.retention.ms
	// MaxKeys bounds a pass's key map, as log.cleaner.dedupe.buffer.size does Apache's
	// (0: defaultCleanerKeys).
	MaxKeys int
	// Throttle bounds the bytes a second the pass reads and writes, with every other
	// partition's (log.cleaner.io.max.bytes.per.second; nil: no bound).
	Throttle *Throttle
}

// defaultCleanerKeys is what Apache's default dedupe buffer (128 MiB, 24 bytes a key
// at a load factor of 0.9) holds.
const defaultCleanerKeys = 128 << 20 * 9 / 10 / 24

// cleaning is a pass in flight.
type cleaning struct {
	job  *cleanJob
	gone atomic.Bool // the actor stopped or restarted: the job swaps nothing in
}

// cleaned is the first job's outcome: the cleaned files written aside (or err).
type cleaned struct {
	c   *cleaning
	err error
}

// cleanSwapped is the second job's outcome: the groups swapped in (or err).
type cleanSwapped struct {
	c   *cleaning
	err error
}

// cleanAborted says a pass's cleaned files are deleted, never swapped in.
type cleanAborted struct{ c *cleaning }

// maybeClean starts a pass when one is due (retention tick).
func (p *partitionActor) maybeClean(ctx actor.Context) {
	p.publishCleaner()
	cc := p.cfg.Cleaner
	if cc == nil || p.disk == nil || p.cleaning != nil || p.roll != nil || p.fenced() {
		return
	}
	keys := cc.MaxKeys
	if keys <= 0 {
		keys = defaultCleanerKeys
	}
	pol := cleanPolicy{minDirtyRatio: cc.MinDirtyRatio, minLagMS: cc.MinLagMS, maxLagMS: cc.MaxLagMS,
		deleteRetentionMS: cc.DeleteRetentionMS, maxKeys: keys}
	j := p.disk.planClean(pol, max(p.cleanedTo, p.disk.StartOffset()), p.cfg.Now().UnixMilli(), p.firstUnstable())
	if j == nil {
		return
	}
	j.throttle = cc.Throttle
	// The files of the segments it may replace stay open until it is done: a read
	// planned meanwhile never opens by name a file the swap replaced.
	for _, s := range p.disk.segs[:len(j.segs)] {
		if _, err := s.file(); err != nil {
			p.cfg.Metrics.cleanerMetrics().Failed("clean")
			p.log.Error().Err(err).Msg("partition_clean_failed")
			return
		}
	}
	j.lastOfProducer = make(map[int64]int64, len(p.producers))
	for id, e := range p.producers {
		if n := len(e.batches); n > 0 {
			j.lastOfProducer[id] = e.batches[n-1].lastOffset
		}
	}
	c := &cleaning{job: j}
	p.cleaning = c
	p.log.Info().Int64("dirty_from", j.dirtyFrom).Int("segments", len(j.segs)).Msg("partition_clean_started")
	actor.Background(ctx, func() any {
		err := atLowPriority(j.run)
		if err == nil && c.gone.Load() {
			j.removeCleaned() // the actor is gone: nothing will swap them in
		}
		return &cleaned{c: c, err: err}
	})
}

// onCleaned swaps the cleaned files in, unless the partition was fenced or closed.
func (p *partitionActor) onCleaned(ctx actor.Context, m *cleaned) {
	if m.c != p.cleaning {
		return // of an incarnation gone since; its job removed its files
	}
	if m.err != nil {
		p.cleaning = nil
		p.cfg.Metrics.cleanerMetrics().Failed("clean")
		p.log.Error().Err(m.err).Msg("partition_clean_failed")
		return
	}
	j := m.c.job
	if p.disk == nil || p.fenced() || len(j.groups) == 0 {
		actor.Background(ctx, func() any {
			j.removeCleaned()
			return &cleanAborted{c: m.c}
		})
		return
	}
	c := m.c
	gate := p.cfg.Gate
	actor.Background(ctx, func() any {
		if c.gone.Load() || (gate != nil && !gate()) {
			j.removeCleaned()
			return &cleanAborted{c: c}
		}
		if err := j.swap(); err != nil {
			return &cleanSwapped{c: c, err: err}
		}
		// The segments are in place: losing the checkpoint only costs a longer pass.
		if err := writeCleanerCkpt(j.fs, j.dir, j.upTo); err != nil {
			j.log.Warn().Err(err).Msg("partition_cleaner_checkpoint_write_failed")
		}
		return &cleanSwapped{c: c}
	})
}

// onCleanSwapped puts the new segments in place of the old ones.
func (p *partitionActor) onCleanSwapped(ctx actor.Context, m *cleanSwapped) {
	if m.c != p.cleaning {
		return
	}
	p.cleaning = nil
	j := m.c.job
	if p.disk == nil {
		return
	}
	if m.err != nil {
		p.cfg.Metrics.writeFailed("clean")
		p.cfg.Metrics.cleanerMetrics().Failed("swap")
		p.log.Error().Err(m.err).Msg("partition_clean_swap_failed")
		p.reopenLog(ctx, m.err)
		return
	}
	var before, after int64
	for _, g := range j.groups {
		for _, o := range g.olds {
			before += o.size
		}
		after += g.seg.size
	}
	p.disk.installCleaned(j)
	p.cleanedTo = j.upTo
	p.dropBelowStart() // what DeleteRecords left to delete while the pass ran
	p.noteCleaned(before, after)
	p.log.Info().Int("groups", len(j.groups)).Int64("bytes_before", before).Int64("bytes_after", after).
		Int64("cleaned_to", j.upTo).Msg("partition_log_cleaned")
}

// onCleanAborted ends a pass whose files were deleted.
func (p *partitionActor) onCleanAborted(m *cleanAborted) {
	if m.c == p.cleaning {
		p.cleaning = nil
	}
}

// abandonCleaning (stop, restart) keeps the pass in flight from swapping anything in.
func (p *partitionActor) abandonCleaning() {
	if p.cleaning != nil {
		p.cleaning.gone.Store(true)
		p.cleaning = nil
	}
	p.unpublishCleaner()
}

// cleanerConfig is a topic's CleanerConfig with the broker's log.cleaner.* settings:
// the key map holds the keys Apache's dedupe buffer of that size holds (24 bytes a key
// at its 0.9 load factor), and the passes share the manager's throttle.
func (m *manager) cleanerConfig(overrides map[string]string) *CleanerConfig {
	cc := cleanerConfig(m.defaults(), overrides)
	if cc != nil {
		if size := m.cfg.Broker.LogCleanerDedupeBufferSize; size > 0 {
			cc.MaxKeys = int(min(size/24*9/10, math.MaxInt32))
		}
		cc.Throttle = m.throttle
	}
	return cc
}

// cleanerConfig is a topic's CleanerConfig, nil unless its cleanup.policy holds compact.
func cleanerConfig(c defaults, overrides map[string]string) *CleanerConfig {
	policy := c.of(overrides, "cleanup.policy")
	cc := &CleanerConfig{}
	compact := false
	for _, p := range strings.Split(policy, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		case "delete":
			cc.Delete = true
		}
	}
	if !compact {
		return nil
	}
	cc.MinDirtyRatio, _ = strconv.ParseFloat(c.of(overrides, "min.cleanable.dirty.ratio"), 64)
	cc.MinLagMS = effective(c, overrides, "min.compaction.lag.ms")
	cc.MaxLagMS = effective(c, overrides, "max.compaction.lag.ms")
	cc.DeleteRetentionMS = effective(c, overrides, "delete.retention.ms")
	return cc
}
