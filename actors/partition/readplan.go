package partition

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// A Fetch's read of a partition is served in two steps, so that the disk reads and CRC
// checks of cold consumers never hold the partition's producers:
//
//  1. the partition actor plans it (planRead): it checks the leader epoch and the
//     range, finds the segment and the index entry at or before the offset, takes the
//     high watermark as the limit, and pins the segment's open file (fileReaders);
//  2. whoever asked reads it (readPlan.run): a connection serving the Fetch, in its own
//     turn. It walks from the index entry to the offset's batch, reads up to maxBytes,
//     cuts at the limit and at the segment's end on batch boundaries, checks every
//     batch's CRC, and lets the file go.
//
// What a plan reads never changes under it: a log only ever appends after a segment's
// end (a failed write cuts back only its own bytes), and nothing at or past the limit
// is served. A batch found corrupt is reported back to the actor (corruptRead), which
// quarantines it as a read in its own turn would have.

// fileReaders counts the plans reading a segment's open file. A segment that lets its
// file go (idle close, retention, stop) while plans still read it leaves the closing to
// the last of them; a segment deleted by retention stays readable to them (the inode
// lives until its last descriptor is closed).
type fileReaders struct {
	f        storage.RWFile
	mu       sync.Mutex
	n        int
	orphaned bool // the segment let f go: the last reader closes it
}

// pin is one more reader of s's file (the actor's turn only), opened if it was closed.
func (s *segment) pin() (*fileReaders, error) {
	f, err := s.file()
	if err != nil {
		return nil, err
	}
	if s.readers == nil || s.readers.f != f {
		s.readers = &fileReaders{f: f}
	}
	s.readers.mu.Lock()
	s.readers.n++
	s.readers.mu.Unlock()
	return s.readers, nil
}

// unpin ends one reader; the last one closes a file its segment let go.
func (r *fileReaders) unpin() {
	r.mu.Lock()
	r.n--
	last := r.n == 0 && r.orphaned
	r.mu.Unlock()
	if last {
		r.f.Close()
	}
}

// orphan is the segment letting its file go: false when no reader holds it (the
// segment closes it), true when the last reader will.
func (r *fileReaders) orphan() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return false
	}
	r.orphaned = true
	return true
}

// readHold is a plan's pin, let go once: by run, or, for a plan dropped unread (its
// fetch abandoned, its connection gone), when the plan is collected.
type readHold struct {
	file *fileReaders
	done atomic.Bool
}

func (h *readHold) release() {
	if h.done.CompareAndSwap(false, true) {
		h.file.unpin()
	}
}

// readPlan is one partition's part of a Fetch, planned by the partition actor and read
// by the fetch's host (readPlan.run). Never changed once made.
type readPlan struct {
	out  Fetched // the high watermark and log start offset; run adds the records
	hold *readHold
	seg  *segment // identity only, for corruptRead: never touched outside the actor
	path string
	// from is the index entry's position at or before offset; size the segment's
	// bytes and next its next offset when planned: nothing at or past either is read.
	from, size, next int64
	offset, limit    int64
	maxBytes         int32
	minOne           bool
	corrupt          []corruptRange // the segment's quarantined ranges (seg unset)
	partition        *actor.PID     // told of a batch found corrupt
	met              *Metrics
	log              zerolog.Logger
}

// corruptRead tells the partition actor that a plan found the batch c of seg corrupt:
// it is quarantined (logged and counted once), and never served.
type corruptRead struct {
	seg *segment
	c   corruptRange
}

// planRead is segmentLog.read's first step (see above): nil plan and the answer when there is
// nothing to read (recs nil) or the offset lies in a corrupt range (errCorruptRange).
func (l *segmentLog) planRead(offset, limit int64, maxBytes int32, minOne bool) (*readPlan, error) {
	for c := l.corruptAt(offset); c != nil && offset < limit; c = l.corruptAt(offset) {
		if !c.accepted {
			return nil, fmt.Errorf("segment %s: offsets %d-%d at bytes %d-%d: %w", c.seg.path, c.from, c.to-1, c.pos, c.end, errCorruptRange)
		}
		offset = c.to // an accepted loss reads as a gap
	}
	s := l.find(offset)
	if s == nil || offset >= limit || offset >= s.next {
		return nil, nil
	}
	fr, err := s.pin()
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].offset > offset }) - 1
	from := int64(0)
	if i >= 0 {
		from = s.index[i].pos
	}
	p := &readPlan{hold: &readHold{file: fr}, seg: s, path: s.path, from: from, size: s.size, next: s.next,
		offset: offset, limit: limit, maxBytes: maxBytes, minOne: minOne}
	for _, c := range l.corrupt {
		if c.seg == s {
			c.seg = nil
			p.corrupt = append(p.corrupt, c)
		}
	}
	runtime.AddCleanup(p, func(h *readHold) { h.release() }, p.hold)
	return p, nil
}

// read is the plan's second step: the batches from the one holding offset up to
// maxBytes (the first whole with minOne, KIP-74), never one at or past the limit, each
// CRC-checked. A batch that fails is reported (report, once) and never served: reading
// at it answers errCorruptRange, and a read stops short of it.
func (p *readPlan) read(report func(corruptRange)) ([]byte, error) {
	recs, _, err := p.readInto(report, func(n int64) ([]byte, *ReadBuffer) { return make([]byte, n), nil })
	return recs, err
}

// readInto is read with the buffer from alloc; buf is alloc's, nil when it read nothing.
func (p *readPlan) readInto(report func(corruptRange), alloc func(n int64) ([]byte, *ReadBuffer)) (recs []byte, buf *ReadBuffer, err error) {
	defer func() {
		if recs == nil && buf != nil {
			buf.Release()
			buf = nil
		}
	}()
	f := p.hold.file.f
	// The walk from the index entry crosses less than indexInterval bytes and one
	// batch: a small window, not walkWindow, which this read used to take and fill
	// for every fetch of every partition.
	w := walker{f: f, end: p.size, window: readWalkWindow}
	pos := p.from
	for pos < p.size {
		if c := p.corruptFrom(pos); c != nil {
			pos = c.end
			continue
		}
		h, ok, err := w.batch(pos, false)
		if err != nil {
			return nil, buf, fmt.Errorf("read segment %s: %w", p.path, err)
		}
		if !ok {
			return nil, buf, fmt.Errorf("segment %s: bad batch at %d", p.path, pos)
		}
		if h.LastOffset() >= p.offset {
			break
		}
		pos += h.Size()
	}
	// One read of what can be served (up to maxBytes, or the first batch with minOne,
	// never into a corrupt range), then cut at the limit and at maxBytes on batch
	// boundaries, checking each batch's CRC in memory.
	stop := p.size
	for _, c := range p.corrupt {
		if c.pos >= pos && c.pos < stop {
			stop = c.pos
		}
	}
	if pos >= stop {
		return nil, buf, nil
	}
	want := int64(p.maxBytes)
	if p.minOne {
		hb, err := w.bytes(pos, batchHeaderSize)
		if err != nil {
			return nil, buf, fmt.Errorf("read segment %s: %w", p.path, err)
		}
		h := parseHeader(hb)
		want = max(want, h.Size())
	}
	want = min(want, stop-pos)
	if want < batchHeaderSize {
		return nil, buf, nil // no room for a batch
	}
	b, buf := alloc(want)
	n, err := f.ReadAt(b, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, buf, fmt.Errorf("read segment %s: %w", p.path, err)
	}
	// A pooled buffer holds an earlier read's bytes past what this one read: never
	// looked at.
	want = int64(n)
	end := int64(0)
	for end+batchHeaderSize <= want {
		h := parseHeader(b[end:])
		if h.Magic != 2 || h.Length < batchHeaderSize-logOverhead || end+h.Size() > want || h.BaseOffset >= p.limit || h.BaseOffset >= p.next {
			break // past the segment's own end are only stale bytes (cluster), never served
		}
		if !checkStored(b[end : end+h.Size()]) {
			if end > 0 {
				break // served up to it; the next read starts there and reports it
			}
			// The header walk at start found it whole; its bytes fail now.
			c := corruptRange{from: h.BaseOffset, to: h.LastOffset() + 1, pos: pos, end: pos + h.Size()}
			report(c)
			return nil, buf, fmt.Errorf("segment %s: offsets %d-%d at bytes %d-%d: %w", p.path, c.from, c.to-1, c.pos, c.end, errCorruptRange)
		}
		end += h.Size()
	}
	if end == 0 {
		return nil, buf, nil
	}
	return b[:end:end], buf, nil
}

// readWalkWindow is what a read's walk to its first batch reads at a time.
const readWalkWindow = 2 * indexInterval

// corruptFrom is the quarantined range of the plan's segment starting at pos, or nil.
func (p *readPlan) corruptFrom(pos int64) *corruptRange {
	for i := range p.corrupt {
		if p.corrupt[i].pos == pos {
			return &p.corrupt[i]
		}
	}
	return nil
}

// run reads the plan in the turn of ctx (the fetch's host) and lets the file go: the
// partition's answer, with its records or KAFKA_STORAGE_ERROR.
func (p *readPlan) run(ctx actor.Context) *Fetched {
	defer p.hold.release()
	out := p.out
	recs, buf, err := p.readInto(func(c corruptRange) {
		ctx.Send(p.partition, &corruptRead{seg: p.seg, c: c})
	}, readBuf)
	switch {
	case errors.Is(err, errCorruptRange):
		// Reported once when found; the consumer retries until an operator restores
		// the segment (docs/data-path.md).
		p.log.Debug().Err(err).Int64("offset", p.offset).Msg("partition_read_corrupt")
		out.ErrorCode = kerr.KafkaStorageError.Code
	case err != nil:
		p.log.Error().Err(err).Int64("offset", p.offset).Msg("partition_read_failed")
		out.ErrorCode = kerr.KafkaStorageError.Code
	default:
		out.Records, out.Buffer = recs, buf
		p.met.fetched(len(recs))
	}
	return &out
}

// dropRead lets go of the file of a read plan nobody will run (v: a partition's answer
// to readLog that arrived too late).
func dropRead(v any) {
	if p, ok := v.(*readPlan); ok {
		p.hold.release()
	}
}

// onCorruptRead quarantines a batch a plan found corrupt, unless its segment is gone
// (retention) or the range is already known.
func (l *segmentLog) onCorruptRead(m *corruptRead) {
	for _, s := range l.segs {
		if s == m.seg {
			if l.corruptFrom(s, m.c.pos) == nil {
				c := m.c
				c.seg = s
				l.quarantine(c, "on_read")
			}
			return
		}
	}
}
