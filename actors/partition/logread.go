package partition

import (
	"sort"
)

// The read side of a partition's log: the segment that holds an offset, reads, the
// offset for a timestamp (ListOffsets), the end of a leader epoch (OffsetForLeaderEpoch).

// find returns the segment holding offset, skipping a gap to the next segment.
func (l *segmentLog) find(offset int64) *segment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	if i < 0 {
		return nil
	}
	for i < len(l.segs)-1 && offset >= l.segs[i].next {
		i++
	}
	return l.segs[i]
}

// read returns whole batches from the one holding offset up to maxBytes, never a batch
// at or past limit (the high watermark). With minOne the first batch is returned even
// when it is larger than maxBytes, so a consumer always progresses (KIP-74).
//
// Every batch read is CRC-checked: an older segment was not at start, and a disk may
// rot after. A batch that fails is quarantined and never served; reading inside a
// corrupt range answers errCorruptRange, and a read stops short of one. The partition
// actor plans reads and leaves the reading to the fetch (readplan.go); read does both
// in one go.
func (l *segmentLog) read(offset, limit int64, maxBytes int32, minOne bool) ([]byte, error) {
	p, err := l.planRead(offset, limit, maxBytes, minOne)
	if p == nil {
		return nil, err
	}
	defer p.hold.release()
	return p.read(func(c corruptRange) { l.onCorruptRead(&corruptRead{seg: p.seg, c: c}) })
}

// offsetForTime is the first offset whose batch holds a timestamp at or after ts, and
// that batch's max timestamp; -1, -1 when there is none (ListOffsets by timestamp). The
// partition actor plans it and reads it off its turn (timeplan.go); this does both.
func (l *segmentLog) offsetForTime(ts, limit int64) (int64, int64, error) {
	p, err := l.planTime(ts, limit)
	if err != nil {
		return -1, -1, err
	}
	return p.run()
}

// maxTimestamp is the largest timestamp in the log and the offset of the first record
// that carries it (KIP-734).
func (l *segmentLog) maxTimestamp(limit int64) (int64, int64, error) {
	p, err := l.planMaxTime(limit)
	if err != nil || p == nil {
		return -1, -1, err
	}
	off, ts, err := p.run()
	return ts, off, err
}

// epochEnd answers OffsetForLeaderEpoch as Apache's LeaderEpochFileCache.endOffsetFor:
// the largest epoch at most the asked one and the offset where the next epoch began (the
// log end for the current epoch); an epoch older than any kept gets itself and the first
// kept epoch's start; one newer than the current gets -1, -1.
func (l *segmentLog) epochEnd(epoch, current int32) (int32, int64) {
	if epoch > current || epoch < 0 {
		return -1, -1
	}
	if epoch == current {
		return epoch, l.EndOffset()
	}
	i := sort.Search(len(l.epochs), func(i int) bool { return l.epochs[i].Epoch > epoch }) - 1
	switch {
	case len(l.epochs) == 0:
		return epoch, l.EndOffset()
	case i < 0:
		return epoch, l.epochs[0].Offset
	case i == len(l.epochs)-1:
		// The current epoch has written nothing yet: it starts at the log end.
		return l.epochs[i].Epoch, l.EndOffset()
	}
	return l.epochs[i].Epoch, l.epochs[i+1].Offset
}
