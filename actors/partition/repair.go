package partition

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/storage"
)

// After a failed fsync. A failed fsync may leave the bytes it did not write in the page
// cache marked clean (Linux reports a writeback error once): the next fsync then
// succeeds without writing them, and a produce retried after the failure would be
// acknowledged, as a duplicate, for a batch that is not on disk. So once an fsync of a
// segment has failed, the next one of that segment is a repair (rewriteTail): the bytes
// written since the last good fsync are read back, checked batch by batch (CRC), written
// again in place, which makes them dirty again, and only then fsynced. Bytes that no
// longer read back as written (the cache dropped them, and the disk has what it had)
// mean the log in memory is ahead of the disk: the partition closes it and opens it
// again, and recovery keeps what the disk holds (its newest segment's unsynced tail is
// rewritten the same way before recovery's own fsync).

// errTailLost: bytes written since the last good fsync no longer read back as written.
var errTailLost = errors.New("bytes written since the last good fsync no longer read back as written")

// rewriteTail reads [from, to) of f as whole batches, checks each one's CRC, writes each
// back where it was and fsyncs f. It holds one batch (and a read window) at a time.
func rewriteTail(f storage.RWFile, from, to int64) error {
	w := walker{f: f, end: to}
	for pos := from; pos < to; {
		h, ok, err := w.batch(pos, true)
		if err != nil {
			return fmt.Errorf("read back at %d: %w", pos, err)
		}
		if !ok {
			return fmt.Errorf("at byte %d: %w", pos, errTailLost)
		}
		b, err := w.bytes(pos, h.Size())
		if err != nil {
			return fmt.Errorf("read back at %d: %w", pos, err)
		}
		if _, err := f.WriteAt(b, pos); err != nil {
			return fmt.Errorf("write again at %d: %w", pos, err)
		}
		pos += h.Size()
	}
	return f.Sync()
}

// syncedTo is where the last good fsync of the active segment reached.
type syncedTo struct {
	seg  *segment
	size int64
}

// repairFrom is where a sync of s must start rewriting: -1 when no fsync has failed
// since the last good one (a plain fsync does).
func (p *partitionActor) repairFrom(s *segment) int64 {
	if !p.repair {
		return -1
	}
	if p.synced.seg == s {
		return p.synced.size
	}
	return 0 // rolled to since: the whole segment
}

// dropLog closes a log whose tail was lost (errTailLost) and opens it again at once:
// every produce waiting for an fsync is answered KAFKA_STORAGE_ERROR (their producers
// retry, and recovery's producer state decides what is a duplicate).
func (p *partitionActor) dropLog(ctx actor.Context, err error) {
	p.cfg.Metrics.writeFailed("fsync")
	p.log.Error().Err(err).Msg("partition_unsynced_tail_lost")
	p.reopenLog(ctx, err)
}

// reopenLog closes the log, answering what waits on it KAFKA_STORAGE_ERROR, and opens
// it again at once: recovery keeps what the disk holds.
func (p *partitionActor) reopenLog(ctx actor.Context, err error) {
	for _, w := range p.pending {
		w.fail(kerr.KafkaStorageError.Code)
	}
	p.pending = nil
	for _, w := range p.rollQueue {
		w.fail(kerr.KafkaStorageError.Code)
	}
	p.rollQueue = nil
	if p.stopRetention != nil {
		p.stopRetention()
		p.stopRetention = nil
	}
	p.releaseWatchers(ctx, false)
	p.disk.closeFiles()
	p.disk = nil
	p.repair, p.synced = false, syncedTo{}
	p.broken = err
	p.openRetryIn = openRetryFirst
	p.openCancel = actor.After(ctx, 0, &openRetryTick{})
}
