package partition

import (
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// ListOffsets by timestamp (and KIP-734's max timestamp) reads batch headers, and for the
// batch found its records: disk reads, so the partition plans the lookup in its turn and
// a background job reads it, as a fetch's read plan does (readplan.go). The plan pins the
// files of the segments that may hold the timestamp, with where in each to begin (the
// index entry before it), each one's size and next offset, and its quarantined ranges;
// nothing in them changes under it (a log only appends past a segment's end). The job's
// answer comes back to the actor, which answers the request.

// timeSeg is one segment of a time lookup.
type timeSeg struct {
	hold       *readHold
	path       string
	from, size int64
	next       int64
	corrupt    []corruptRange
}

// timePlan is a ListOffsets-by-time lookup, read off the actor's turn.
type timePlan struct {
	ts, limit int64
	segs      []timeSeg
	// fallback: the answer when no batch reads at or after ts (max timestamp: the
	// segment's own record of it).
	fallbackTS, fallbackOff int64
}

// listedByTime is a time lookup's result, back in the actor's turn.
type listedByTime struct {
	m       *listOffset
	off, ts int64
	err     error
}

// planTime makes the lookup of the first offset whose batch holds a timestamp at or
// after ts, below limit.
func (l *segmentLog) planTime(ts, limit int64) (*timePlan, error) {
	p := &timePlan{ts: ts, limit: limit, fallbackTS: -1, fallbackOff: -1}
	for _, s := range l.segs {
		if s.maxTS < ts || s.size == 0 {
			continue
		}
		fr, err := s.pin()
		if err != nil {
			p.release()
			return nil, err
		}
		i := sort.Search(len(s.index), func(i int) bool { return s.index[i].ts >= ts }) - 1
		from := int64(0)
		if i >= 0 {
			from = s.index[i].pos
		}
		t := timeSeg{hold: &readHold{file: fr}, path: s.path, from: from, size: s.size, next: s.next}
		for _, c := range l.corrupt {
			if c.seg == s {
				c.seg = nil
				t.corrupt = append(t.corrupt, c)
			}
		}
		p.segs = append(p.segs, t)
	}
	return p, nil
}

// planMaxTime makes the lookup of the largest timestamp below limit and the first offset
// that carries it (KIP-734); nil when the log has none.
func (l *segmentLog) planMaxTime(limit int64) (*timePlan, error) {
	var best *segment
	for _, s := range l.segs {
		if s.maxTS >= 0 && s.maxTSOffset < limit && (best == nil || s.maxTS > best.maxTS) {
			best = s
		}
	}
	if best == nil {
		return nil, nil
	}
	p, err := l.planTime(best.maxTS, limit)
	if err != nil {
		return nil, err
	}
	p.fallbackTS, p.fallbackOff = best.maxTS, best.maxTSOffset
	return p, nil
}

func (p *timePlan) release() {
	for _, s := range p.segs {
		s.hold.release()
	}
}

// run reads the lookup (off the actor's turn) and lets the files go.
func (p *timePlan) run() (off, ts int64, err error) {
	defer p.release()
	for _, s := range p.segs {
		off, ts, done, err := s.lookup(p.ts, p.limit)
		if err != nil || done {
			if err == nil && off < 0 && p.fallbackOff >= 0 {
				return p.fallbackOff, p.fallbackTS, nil
			}
			return off, ts, err
		}
	}
	if p.fallbackOff >= 0 {
		return p.fallbackOff, p.fallbackTS, nil
	}
	return -1, -1, nil
}

// lookup walks one segment from its index entry; done says the answer is final (found,
// or the limit reached), else the next segment is tried.
func (s *timeSeg) lookup(ts, limit int64) (int64, int64, bool, error) {
	w := walker{f: s.hold.file.f, end: s.size}
	for pos := s.from; pos < s.size; {
		if c := corruptIn(s.corrupt, pos); c != nil {
			pos = c.end
			continue
		}
		h, ok, err := w.batch(pos, false)
		if err != nil || !ok {
			return -1, -1, true, fmt.Errorf("segment %s: bad batch at %d: %v", s.path, pos, err)
		}
		if h.BaseOffset >= limit {
			return -1, -1, true, nil
		}
		if h.BaseOffset >= s.next {
			break // stale bytes past the segment's end
		}
		if h.MaxTimestamp >= ts {
			b, err := w.bytes(pos, h.Size())
			if err != nil {
				return -1, -1, true, fmt.Errorf("read segment %s: %w", s.path, err)
			}
			off, at := firstRecordAt(b, ts)
			return off, at, true, nil
		}
		pos += h.Size()
	}
	return -1, -1, false, nil
}

// corruptIn is the range of cs that begins at pos, if any (as segmentLog.corruptFrom).
func corruptIn(cs []corruptRange, pos int64) *corruptRange {
	for i := range cs {
		if cs[i].pos == pos {
			return &cs[i]
		}
	}
	return nil
}

// startTimeLookup runs plan in the background and answers m when it is read.
func (p *partitionActor) startTimeLookup(ctx actor.Context, m *listOffset, plan *timePlan) {
	actor.HandedOn(ctx) // answered by onListedByTime, or by Stopping or Restarting
	if p.lookups == nil {
		p.lookups = map[*listOffset]struct{}{}
	}
	p.lookups[m] = struct{}{}
	actor.Background(ctx, func() any {
		off, ts, err := plan.run()
		return &listedByTime{m: m, off: off, ts: ts, err: err}
	})
}

// onListedByTime answers a time lookup. The log may have moved on meanwhile: an offset
// below the start now answers the start, and the epoch is the one that wrote it.
func (p *partitionActor) onListedByTime(r *listedByTime) {
	delete(p.lookups, r.m) // one of an incarnation before a restart was answered then
	out := &Listed{Timestamp: -1, Offset: -1, LeaderEpoch: -1}
	switch {
	case r.err != nil:
		p.log.Error().Err(r.err).Msg("partition_read_failed")
		out.ErrorCode = kerr.KafkaStorageError.Code
	case p.disk == nil:
		out.ErrorCode = p.closedCode()
	default:
		out.Offset, out.Timestamp = p.atOrPastStart(r.off, r.ts)
		if r.m.timestamp == maxTimestamp {
			out.Offset, out.Timestamp = r.off, r.ts
		}
		if out.Offset >= 0 {
			out.LeaderEpoch = p.epochFor(out.Offset)
		}
	}
	r.m.reply.Resolve(out)
}

// answerLookups answers the time lookups still reading NOT_LEADER_OR_FOLLOWER (the actor
// stops or restarts; a later answer of the job does nothing).
func (p *partitionActor) answerLookups() {
	for m := range p.lookups {
		m.reply.Resolve(&Listed{ErrorCode: kerr.NotLeaderForPartition.Code, Timestamp: -1, Offset: -1, LeaderEpoch: -1})
	}
	p.lookups = nil
}
