package partition

// The cleaner's metrics (metrics.Cleaner): a compacted partition publishes its dirty
// ratio at every retention tick and after every pass, and the time of its last pass;
// its series go when the actor stops or the topic stops being compacted.

// publishCleaner publishes the dirty ratio of a compacted partition (or withdraws the
// series of one that no longer is).
func (p *partitionActor) publishCleaner() {
	cc := p.cfg.Cleaner
	if cc == nil || p.disk == nil {
		p.unpublishCleaner()
		return
	}
	if p.cleanerMt == nil {
		p.cleanerMt = p.cfg.Metrics.cleanerMetrics().Partition(p.cfg.Topic, p.cfg.Partition)
	}
	p.cleanerMt.SetDirtyRatio(p.disk.dirtyRatio(cc.MinLagMS, max(p.cleanedTo, p.disk.StartOffset()), p.cfg.Now().UnixMilli()))
}

// noteCleaned counts a pass swapped in (in the actor's turn, after installCleaned).
func (p *partitionActor) noteCleaned(before, after int64) {
	p.cfg.Metrics.cleanerMetrics().Cleaned(before, after)
	p.publishCleaner()
	p.cleanerMt.SetCleaned(p.cfg.Now().UnixMilli())
}

// unpublishCleaner withdraws the partition's cleaner series.
func (p *partitionActor) unpublishCleaner() {
	p.cleanerMt.Remove()
	p.cleanerMt = nil
}

// dirtyRatio is the share of the cleanable segments' bytes past dirtyFrom, as planClean
// measures it against min.cleanable.dirty.ratio (Apache's cleanable ratio): the
// cleanable segments are every one but the active one, up to the first holding a record
// younger than min.compaction.lag.ms.
func (l *segmentLog) dirtyRatio(minLagMS, dirtyFrom, nowMS int64) float64 {
	var dirty, total int64
	for _, s := range l.segs[:len(l.segs)-1] {
		if minLagMS > 0 && s.maxTS > nowMS-minLagMS {
			break
		}
		total += s.size
		if s.next > dirtyFrom {
			dirty += s.size
		}
	}
	if total == 0 {
		return 0
	}
	return float64(dirty) / float64(total)
}
