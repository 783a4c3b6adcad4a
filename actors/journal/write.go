package journal

import (
	"fmt"
	"time"

	"kaas/actors/actor"
)

// flush writes every queued record with one write and one fsync, then answers each.
func (j *journalActor) flush(ctx actor.Context) {
	batch := j.queue
	j.queue = nil
	if len(batch) == 0 {
		return
	}
	// Until answered, the batch is j.writing: a panic answers what is left of it.
	j.writing = batch
	start := time.Now()
	// One frame for the whole batch: a write cut short never leaves some of its records
	// valid, so a batch answered with an error is not replayed in part.
	// The frame carries the sequence number of its first record, so that replay can tell
	// damage in the middle of a segment from a torn tail (ScanSegment).
	j.buf = StartFrame(j.buf)
	records := 0
	for _, a := range batch {
		j.buf = AppendRecord(j.buf, a.Data)
		if len(a.Then) > 0 {
			j.buf = AppendRecord(j.buf, a.Then)
		}
		records += a.records()
	}
	FinishFrame(j.buf, j.next)
	if j.f != nil && j.prealloc && j.size > 0 && j.size+int64(len(j.buf)) > j.cfg.SegmentBytes {
		j.closeActive() // full: the batch goes to the next segment
	}
	if err := j.open(ctx); err != nil {
		j.writeFailedLog.Event(j.log.Error()).Err(err).Int("records", records).Msg("offsets_journal_write_failed")
		j.cfg.Metrics.Wrote(err, 0, records)
		j.writing = nil
		j.fail(batch, err)
		return
	}
	seq := j.next
	j.next += uint64(records)
	_, err := j.f.Write(j.buf)
	if err != nil {
		err = fmt.Errorf("write %s: %w", j.active.name, err)
	} else if err = j.f.Datasync(); err != nil {
		err = fmt.Errorf("fdatasync %s: %w", j.active.name, err)
	}
	j.cfg.Metrics.Wrote(err, time.Since(start), records)
	if err != nil {
		// What was written may be cut short or not durable: the segment ends here and
		// the next write starts a new one (a retried fsync can report success for
		// pages a failed one dropped).
		j.writeFailedLog.Event(j.log.Error()).Err(err).Int("records", len(batch)).Msg("offsets_journal_write_failed")
		j.writing = nil
		j.closeActive()
		j.fail(batch, err)
		return
	}
	j.size += int64(len(j.buf))
	if cap(j.buf) > 4<<20 {
		j.buf = nil // a huge meta went through: do not keep its buffer
	}
	for i, a := range batch {
		done := &Appended{Seq: seq}
		if len(a.Then) > 0 {
			seq++
			done.ThenSeq = seq
		}
		j.active.keys[a.Key] = seq
		seq++
		j.writing = batch[i+1:]
		a.answer(done)
	}
	if !j.prealloc && j.size >= j.cfg.SegmentBytes {
		j.closeActive()
	}
	if j.size >= j.cfg.SegmentBytes/2 {
		// Zero-filling the next segment writes as much as a whole segment of records:
		// done once the active one is half full, not while the disk is busy with the
		// first appends after a roll, it is ready in time and out of the way.
		j.prepareSpare(ctx)
	}
}

func (j *journalActor) fail(batch []*Append, err error) {
	for _, a := range batch {
		a.answer(&Appended{Err: err})
	}
}
