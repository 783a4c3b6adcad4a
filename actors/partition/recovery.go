package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// The recovery point is Apache's recovery-point-offset-checkpoint, kept per partition
// directory: an offset below which every batch was on disk when the point was written.
// At start a bad batch at or past it that nothing valid follows is a write a crash cut
// short (a torn tail) and is cut off; a bad batch below it, or one that valid later
// batches follow, is the disk losing data: it is never cut off and its offsets are
// never handed out again.
//
// The file is 16 bytes, overwritten in place: "KRP1", the offset (big-endian int64) and
// the CRC-32C of those 12 bytes. It is rewritten without an fsync after each fsync of
// the log (the page cache carries it to disk), and with one at a clean close. A lost or
// torn write, or a lost file, only leaves an older point, which is safe: it can make
// recovery take too much for a torn tail, never too little. Without a file the point is
// the newest segment's base, since rolling a segment fsyncs the one before.
const (
	recoveryPointName  = "recovery-point"
	recoveryPointMagic = "KRP1"
	recoveryPointSize  = 16
)

func encodeRecoveryPoint(off int64) []byte {
	b := make([]byte, recoveryPointSize)
	copy(b, recoveryPointMagic)
	binary.BigEndian.PutUint64(b[4:], uint64(off))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32c))
	return b
}

// readRecoveryPoint returns the partition's recovery point; ok is false when there is
// no usable file (absent, short, or failing its CRC).
func readRecoveryPoint(fsys storage.FS, dir string) (off int64, ok bool, err error) {
	b, err := fsys.ReadFile(filepath.Join(dir, recoveryPointName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read recovery point in %s: %w", dir, err)
	}
	if len(b) != recoveryPointSize || string(b[:4]) != recoveryPointMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], crc32c) {
		return 0, false, nil
	}
	off = int64(binary.BigEndian.Uint64(b[4:]))
	return off, off >= 0, nil
}

// saveRecoveryPoint records that every offset below off is on disk. With sync the file
// is fsynced too (not its directory entry: a file lost with it is safe, see above).
func (l *segmentLog) saveRecoveryPoint(off int64, sync bool) error {
	if off < l.recoveryPoint || (off == l.recoveryPoint && !sync && l.rpFile != nil) {
		return nil
	}
	if l.rpFile == nil {
		f, err := l.cfg.fs.OpenFile(filepath.Join(l.dir, recoveryPointName), os.O_RDWR|os.O_CREATE)
		if err != nil {
			return fmt.Errorf("open recovery point in %s: %w", l.dir, err)
		}
		l.rpFile = f
	}
	if _, err := l.rpFile.WriteAt(encodeRecoveryPoint(off), 0); err != nil {
		return fmt.Errorf("write recovery point in %s: %w", l.dir, err)
	}
	l.recoveryPoint = off
	if !sync {
		return nil
	}
	if err := l.rpFile.Sync(); err != nil {
		return fmt.Errorf("sync recovery point in %s: %w", l.dir, err)
	}
	return nil
}

// replaceRecoveryPoint (cluster) records off in a new file renamed over the old one (not
// fsynced: a lost file is safe, see above), and keeps that file open for every write after
// (closeIdle leaves it open): a former leader that still has the old file open writes
// into one nobody reads again, and this leader never opens the path again, where a
// successor's file would be.
func (l *segmentLog) replaceRecoveryPoint(off int64, _ bool) error {
	path := filepath.Join(l.dir, recoveryPointName)
	tmp := path + ".tmp"
	f, err := l.cfg.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("create recovery point in %s: %w", l.dir, err)
	}
	if _, err := f.WriteAt(encodeRecoveryPoint(off), 0); err != nil {
		f.Close()
		return fmt.Errorf("write recovery point in %s: %w", l.dir, err)
	}
	if err := l.cfg.fs.Rename(tmp, path); err != nil {
		f.Close()
		return fmt.Errorf("replace recovery point in %s: %w", l.dir, err)
	}
	l.closeRecoveryPoint()
	l.rpFile = f
	l.recoveryPoint = off
	return nil
}

func (l *segmentLog) closeRecoveryPoint() {
	if l.rpFile != nil {
		l.rpFile.Close()
		l.rpFile = nil
	}
}

// errCorruptRange is what reading an offset of a corrupt range answers: the partition
// turns it into KAFKA_STORAGE_ERROR (retriable) until an operator restores the segment.
var errCorruptRange = errors.New("offset in a corrupt range of the log")

// corruptRange is a stretch of a segment that holds no batch the log can serve: the
// bytes [pos, end) of seg, where offsets [from, to) were. It stays in the file, untouched,
// for an operator to restore or examine.
type corruptRange struct {
	seg      *segment
	from, to int64
	pos, end int64
	accepted bool // listed in acceptedLossName: reads skip it
}

// acceptedLossName lists, one "<from> <to>" per line, the offset ranges (as the
// partition_corrupt_batch log gives them) whose loss an operator has accepted: a fetch
// there gets the next batch after the range, as after a gap, instead of
// KAFKA_STORAGE_ERROR. Read when the partition opens its log.
const acceptedLossName = "accepted-loss"

// readAcceptedLoss reads the accepted ranges; a line it cannot parse is logged and
// ignored (the range stays quarantined).
func readAcceptedLoss(fsys storage.FS, dir string, log zerolog.Logger) ([][2]int64, error) {
	b, err := fsys.ReadFile(filepath.Join(dir, acceptedLossName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", acceptedLossName, dir, err)
	}
	var out [][2]int64
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var from, to int64
		if n, err := fmt.Sscanf(line, "%d %d", &from, &to); n != 2 || err != nil || from < 0 || to < from {
			log.Warn().Int("line", i+1).Msg("partition_accepted_loss_line_ignored")
			continue
		}
		out = append(out, [2]int64{from, to})
	}
	return out, nil
}

// corruptAt is the corrupt range holding offset, or nil.
func (l *segmentLog) corruptAt(offset int64) *corruptRange {
	for i := range l.corrupt {
		if c := &l.corrupt[i]; offset >= c.from && offset < c.to {
			return c
		}
	}
	return nil
}

// corruptFrom is the corrupt range of s that starts at byte pos, or nil.
func (l *segmentLog) corruptFrom(s *segment, pos int64) *corruptRange {
	for i := range l.corrupt {
		if c := &l.corrupt[i]; c.seg == s && c.pos == pos {
			return c
		}
	}
	return nil
}

// quarantine records a corrupt range, logs it once at Error and counts it; one whose
// loss an operator accepted is logged at Warn and skipped by reads.
func (l *segmentLog) quarantine(c corruptRange, found string) {
	for _, a := range l.accepted {
		if a[0] <= c.from && c.to <= a[1] {
			c.accepted = true
		}
	}
	l.corrupt = append(l.corrupt, c)
	ev, msg := l.cfg.log.Error(), "partition_corrupt_batch"
	if c.accepted {
		ev, msg = l.cfg.log.Warn(), "partition_corrupt_batch_loss_accepted"
	}
	ev.Str("segment", c.seg.path).Int64("position", c.pos).Int64("end_position", c.end).
		Int64("from_offset", c.from).Int64("to_offset", c.to).Int64("recovery_point", l.recoveryPoint).
		Str("found", found).Msg(msg)
	if !c.accepted && l.cfg.corrupted != nil {
		l.cfg.corrupted()
	}
}

// scan looks for the first whole, valid batch (CRC-checked) at or after byte from whose
// offsets follow expect. Offsets cannot outgrow bytes (a record takes at least one), so
// a candidate more offsets ahead than bytes skipped since bad is not one.
func (w *walker) scan(from, bad, expect int64) (int64, header, bool, error) {
	for p := from; p+batchHeaderSize <= w.end; p++ {
		hb, err := w.bytes(p, batchHeaderSize)
		if err != nil {
			return 0, header{}, false, err
		}
		if hb[offMagic] != 2 {
			continue
		}
		h := parseHeader(hb)
		if h.BaseOffset < expect || h.BaseOffset-expect > p-bad || h.LastOffsetDelta < 0 {
			continue
		}
		if _, ok, err := w.batch(p, true); err != nil {
			return 0, header{}, false, err
		} else if ok {
			return p, h, true, nil
		}
	}
	return 0, header{}, false, nil
}

// reaches says whether a valid batch (CRC-checked) at or after byte pos, its offsets
// following expect, carries epoch or a newer one; corrupt bytes are skipped as recovery
// skips them.
func (w *walker) reaches(pos, expect int64, epoch int32) (bool, error) {
	for pos < w.end {
		h, ok, err := w.batch(pos, true)
		if err != nil {
			return false, err
		}
		if !ok || h.LastOffsetDelta < 0 || h.BaseOffset != expect {
			next, nh, found, err := w.scan(pos+1, pos, expect)
			if err != nil || !found {
				return false, err
			}
			pos, h = next, nh
		}
		if h.LeaderEpoch >= epoch {
			return true, nil
		}
		expect = h.LastOffset() + 1
		pos += h.Size()
	}
	return false, nil
}

// plausibleNext says whether the bytes at pos could start the batch after prev: what
// walking an older segment by headers alone checks before trusting prev's length and
// offsets. A segment's last batch has no successor to vouch for it (and the next
// segment's base is judged by its offsets), so it is never taken on trust.
func (w *walker) plausibleNext(pos int64, prev *header) bool {
	if w.end-pos < batchHeaderSize {
		return false
	}
	hb, err := w.bytes(pos, batchHeaderSize)
	if err != nil {
		return false
	}
	h := parseHeader(hb)
	return h.Magic == 2 && h.BaseOffset == prev.LastOffset()+1 && h.Length >= batchHeaderSize-logOverhead &&
		pos+h.Size() <= w.end
}
