package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// DeleteRecords (KIP-107): a partition's log start offset moved forward by a client.
//
// The new start is Apache's log-start-offset checkpoint, kept per partition directory in
// the file log-start-offset: 16 bytes, "KLS1", the offset (big-endian int64) and the
// CRC-32C of those 12 bytes, replaced atomically (tmp, fsync, rename, directory fsync).
// Apache writes its checkpoint lazily and a crash can forget a deletion; kaas answers a
// DeleteRecords only once the file is durable, so a deletion acknowledged is kept across
// restarts and by the next leader in a cluster, which reads the file when it opens the
// log. The file is written off the actor's Receive (actor.Background); before it, when
// the new start is past what is durable (log.flush.interval.messages > 1), the active
// segment is fsynced, so the start never lies past the log a restart recovers. Requests
// that arrive while a write is in flight wait for the next one, which takes the largest
// of them.
//
// Once the file is written the start moves (Log.StartOffset: Fetch below it is
// OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, Produce reports it), every
// segment wholly below it is deleted (the active one stays, as Apache's), and producers
// whose last batch left the log are forgotten, as retention does.
//
// As Apache's Partition.deleteRecordsOnLeader: -1 is the high watermark; an offset past
// the high watermark, or negative, is OFFSET_OUT_OF_RANGE; an offset at or below the
// start changes nothing; the answer is the low watermark, the start after the request.
//
// Limit: the file is written by path. A topic deleted and created again under the same
// name while a write is in flight could find the old topic's start in its new directory;
// at open a start past the log end is taken as the log end, but the file stays.

const (
	logStartName  = "log-start-offset"
	logStartMagic = "KLS1"
	logStartSize  = 16
)

// DeleteRecordsMessage asks a partition actor to move its log start offset to
// q.Offset (-1: the high watermark). reply gets *RecordsDeleted once the new start is
// durable.
func DeleteRecordsMessage(q OffsetQuery, reply actor.Promise) any {
	return &deleteRecords{offset: q.Offset, reply: reply}
}

// deleteRecords moves the log start offset (DeleteRecordsMessage). Reply: *RecordsDeleted.
type deleteRecords struct {
	offset int64
	reply  actor.Promise
}

func (m *deleteRecords) AnswerCrash(*actor.Crashed) {
	m.reply.Resolve(&RecordsDeleted{ErrorCode: crashCode, LowWatermark: -1})
}

// RecordsDeleted is one partition of a DeleteRecords.
type RecordsDeleted struct {
	ErrorCode    int16
	LowWatermark int64
}

// logStartWritten reports the background write of the log-start-offset file (and the
// fsync before it) for start, the partition's own: the actor moves its start once it is
// durable.
type logStartWritten struct {
	start int64
	err   error
	write *struct{} // the write it reports (deletes.write)
}

// pendingDelete is a DeleteRecords waiting for the log-start-offset file.
type pendingDelete struct {
	to    int64
	reply actor.Promise
}

// deletes is the partition actor's DeleteRecords state: the requests waiting for a write
// of the file, and whether one is in flight (and for how many of them).
type deletes struct {
	waiting  []pendingDelete
	inFlight int       // waiting[:inFlight] are answered by the write in flight
	write    *struct{} // the write in flight, nil when none
}

func (p *partitionActor) handleDeleteRecords(ctx actor.Context, m *deleteRecords) {
	if p.disk == nil {
		m.reply.Resolve(&RecordsDeleted{ErrorCode: p.closedCode(), LowWatermark: -1})
		return
	}
	if p.fenced() {
		m.reply.Resolve(&RecordsDeleted{ErrorCode: kerr.NotLeaderForPartition.Code, LowWatermark: -1})
		return
	}
	to, hw := m.offset, p.highWatermark()
	if to == -1 {
		to = hw
	}
	if to < 0 || to > hw {
		m.reply.Resolve(&RecordsDeleted{ErrorCode: kerr.OffsetOutOfRange.Code, LowWatermark: -1})
		return
	}
	if to <= p.disk.StartOffset() && p.deletes.write == nil {
		m.reply.Resolve(&RecordsDeleted{LowWatermark: p.disk.StartOffset()})
		return
	}
	p.deletes.waiting = append(p.deletes.waiting, pendingDelete{to: to, reply: m.reply})
	actor.HandedOn(ctx)
	if p.deletes.write == nil {
		p.startLogStartWrite(ctx)
	}
}

// startLogStartWrite writes the largest start the waiting requests ask for.
func (p *partitionActor) startLogStartWrite(ctx actor.Context) {
	start := p.disk.StartOffset()
	for _, d := range p.deletes.waiting {
		start = max(start, d.to)
	}
	write := &struct{}{}
	p.deletes.write, p.deletes.inFlight = write, len(p.deletes.waiting)
	fsys, dir := p.cfg.FS, p.cfg.Dir
	var active string
	if start > p.durable {
		active = p.disk.active().path
	}
	actor.Background(ctx, func() any {
		if active != "" {
			if err := syncFile(fsys, active); err != nil {
				return &logStartWritten{start: start, err: err, write: write}
			}
		}
		err := storage.WriteFileAtomic(fsys, dir, logStartName, encodeLogStart(start))
		return &logStartWritten{start: start, err: err, write: write}
	})
}

// syncFile fsyncs path through a descriptor of its own: the partition's may be closed
// while idle meanwhile.
func syncFile(fsys storage.FS, path string) error {
	f, err := fsys.OpenFile(path, os.O_RDONLY)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

func (p *partitionActor) onLogStartWritten(ctx actor.Context, m *logStartWritten) {
	var answered []pendingDelete
	if m.write == p.deletes.write {
		answered = p.deletes.waiting[:p.deletes.inFlight]
		p.deletes.waiting = p.deletes.waiting[len(answered):]
		p.deletes.write, p.deletes.inFlight = nil, 0
	}
	// Otherwise the write of an incarnation before a restart, whose requests were
	// answered then: the start on disk moved all the same.
	resolve := func(r *RecordsDeleted) {
		for _, d := range answered {
			d.reply.Resolve(r)
		}
	}
	switch {
	case m.err != nil:
		p.cfg.Metrics.writeFailed("log_start_offset")
		p.log.Error().Err(m.err).Int64("log_start_offset", m.start).Msg("partition_log_start_write_failed")
		resolve(&RecordsDeleted{ErrorCode: kerr.KafkaStorageError.Code, LowWatermark: -1})
	case p.disk == nil || p.fenced():
		// The next leader may have opened the log before the file was written: not
		// acknowledged (a restart's new incarnation has answered the requests already).
		resolve(&RecordsDeleted{ErrorCode: kerr.NotLeaderForPartition.Code, LowWatermark: -1})
	default:
		from := p.disk.StartOffset()
		p.moveStart(m.start)
		resolve(&RecordsDeleted{LowWatermark: p.disk.StartOffset()})
		p.log.Info().Int64("from_offset", from).Int64("log_start_offset", p.disk.StartOffset()).Msg("partition_records_deleted")
	}
	if len(p.deletes.waiting) > 0 && p.deletes.write == nil && p.disk != nil {
		p.startLogStartWrite(ctx)
	}
}

// moveStart makes start the log start offset (never backwards) and deletes the segments
// wholly below it.
func (p *partitionActor) moveStart(start int64) {
	l := p.disk
	if start <= l.start {
		return
	}
	l.start = start
	if p.cleaning == nil { // else once the pass is done (onCleanSwapped)
		p.dropBelowStart()
	}
	for id, e := range p.producers {
		if len(e.batches) > 0 && e.batches[len(e.batches)-1].lastOffset < start {
			delete(p.producers, id) // with a transaction open, all of it went
		}
	}
	p.countOpen()
}

// dropBelowStart deletes the segments wholly below the log start offset (the active
// one stays).
func (p *partitionActor) dropBelowStart() {
	l, start := p.disk, p.disk.start
	n := 0
	for len(l.segs) > 1 && l.segs[1].base <= start {
		s := l.segs[0]
		s.close()
		if err := l.cfg.fs.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			// Kept, and tried again by the next deletion: its offsets are below the
			// start and never served.
			p.log.Error().Err(err).Str("segment", s.path).Msg("partition_segment_delete_failed")
			break
		}
		l.removeTxnIndex(s)
		l.segs = l.segs[1:]
		keep := l.corrupt[:0]
		for _, c := range l.corrupt {
			if c.seg != s {
				keep = append(keep, c)
			}
		}
		l.corrupt = keep
		n++
	}
	if n > 0 {
		p.log.Debug().Int("segments", n).Int64("log_start_offset", start).Msg("partition_segments_deleted")
	}
}

// atOrPastStart keeps a ListOffsets by timestamp at or past the log start offset, as
// Apache searches from it: an answer in a batch the start cut through is the start
// (with the batch's timestamp: the records before the start are not looked at again).
func (p *partitionActor) atOrPastStart(off, ts int64) (int64, int64) {
	if start := p.disk.StartOffset(); off >= 0 && off < start {
		return start, ts
	}
	return off, ts
}

// answerDeletes answers every waiting DeleteRecords with code (the actor stops or
// restarts); a write in flight still moves the start of the log on disk.
func (p *partitionActor) answerDeletes(code int16) {
	for _, d := range p.deletes.waiting {
		d.reply.Resolve(&RecordsDeleted{ErrorCode: code, LowWatermark: -1})
	}
	p.deletes = deletes{}
}

// loadLogStart reads the partition's log-start-offset file into l at open: a start
// past the log end recovery found (data lost below it) is the log end.
func (p *partitionActor) loadLogStart(l *segmentLog) error {
	b, err := p.cfg.FS.ReadFile(filepath.Join(p.cfg.Dir, logStartName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read log start offset in %s: %w", p.cfg.Dir, err)
	}
	start, ok := decodeLogStart(b)
	if !ok {
		// Written atomically, so never torn: the disk lost it. The deleted records
		// are served again rather than the partition left unserved.
		p.log.Error().Str("dir", p.cfg.Dir).Msg("partition_log_start_unreadable")
		p.cfg.Metrics.corrupted()
		return nil
	}
	if end := l.EndOffset(); start > end {
		p.log.Warn().Int64("log_start_offset", start).Int64("log_end_offset", end).Msg("partition_log_start_past_end")
		start = end
	}
	l.start = max(l.start, start)
	return nil
}

func encodeLogStart(off int64) []byte {
	b := make([]byte, logStartSize)
	copy(b, logStartMagic)
	binary.BigEndian.PutUint64(b[4:], uint64(off))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32c))
	return b
}

func decodeLogStart(b []byte) (int64, bool) {
	if len(b) != logStartSize || string(b[:4]) != logStartMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], crc32c) {
		return 0, false
	}
	off := int64(binary.BigEndian.Uint64(b[4:]))
	return off, off >= 0
}
