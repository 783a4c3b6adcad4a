package partition

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// indexInterval is how many log bytes lie between two entries of a segment's offset and
// time index (Apache's index.interval.bytes default).
const indexInterval = 4096

// indexEntry locates the batch starting at byte pos whose base offset is segment base +
// rel; ts is the largest timestamp of every batch before pos in the segment, so a search
// by time can start from the last entry whose ts is below the target.
type indexEntry struct {
	offset int64
	pos    int64
	ts     int64
}

// segment is one log file, named like Apache's: the 20-digit base offset + ".log".
type segment struct {
	base        int64
	next        int64 // offset after the segment's last batch
	size        int64
	maxTS       int64 // largest batch max timestamp, -1 when empty
	maxTSOffset int64
	firstTS     int64 // the first batch's max timestamp, once size > 0 (segment.ms)
	index       []indexEntry
	sinceIndex  int64
	path        string
	fs          storage.FS
	f           storage.RWFile // nil while closed (idle); reopened on the next read
	// readers are the fetches reading f outside the actor (readplan.go); nil: none yet.
	readers *fileReaders
	// aborted is the segment's aborted-transaction index (Apache's .txnindex): one
	// entry per abort marker in the segment, in offset order (txn.go). Rebuilt from the
	// log at open, and gone with the segment.
	aborted []abortedTxn
	// txnFile is the open .txnindex file entries are appended to (txnindex.go), nil
	// while closed; txnDirty says it was written since its last fsync.
	txnFile  storage.RWFile
	txnDirty bool
	// staleAt (cluster) is the position of a batch recovery found written by a replaced
	// leader (an older epoch than the one in force at its offset; -1: none). Nothing
	// from there on is served, and new batches go to a segment of their own.
	staleAt int64
}

func segmentName(base int64) string { return fmt.Sprintf("%020d.log", base) }

func (s *segment) file() (storage.RWFile, error) {
	if s.f == nil {
		f, err := s.fs.OpenFile(s.path, os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("open segment %s: %w", s.path, err)
		}
		s.f = f
	}
	return s.f, nil
}

func (s *segment) close() {
	if s.f != nil {
		if s.readers == nil || !s.readers.orphan() {
			s.f.Close() // else the last fetch reading it closes it
		}
		s.f = nil
		s.readers = nil
	}
}

// track records a batch that starts at pos in the index and the segment's bounds.
func (s *segment) track(h *header, pos int64) {
	if pos == 0 {
		s.firstTS = h.MaxTimestamp
	}
	if len(s.index) == 0 || s.sinceIndex >= indexInterval {
		s.index = append(s.index, indexEntry{offset: h.BaseOffset, pos: pos, ts: s.maxTS})
		s.sinceIndex = 0
	}
	s.sinceIndex += h.Size()
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSOffset = h.MaxTimestamp, h.BaseOffset
	}
	s.next = h.LastOffset() + 1
	s.size = pos + h.Size()
}

// epochStart says that leader epoch Epoch wrote its first batch at Offset (Apache's
// leader-epoch checkpoint, rebuilt here from the batches themselves).
type epochStart struct {
	Epoch  int32
	Offset int64
}

// logConfig is what a segmentLog needs to know.
type logConfig struct {
	segmentBytes int64
	log          zerolog.Logger
	truncated    func() // counts a recovery truncation; may be nil
	corrupted    func() // counts a corrupt range found; may be nil
	stale        func() // counts a replaced leader's late write found; may be nil
	// rollOnOpen (cluster): after recovery, new batches go to a segment of their own. A
	// broker that led the partition before and was paused mid-write may still finish
	// that write, into the old segment past where this leader found its end; a segment
	// is never read past the next one's base offset, so such bytes are never served.
	rollOnOpen bool
	// epochs is the partition's leader-epoch file as read (epochs.go), epochsFound false
	// when there is none that could be read. Recovery checks it against every batch it
	// walks and trusts it only while it matches them (segmentLog.lateWrite).
	epochs      []epochEntry
	epochsFound bool
	// fs does every file step of the log (nil: storage.OSFS).
	fs storage.FS
}

// segmentLog is a partition's segments (the actor's p.disk). It is plain Go, owned by
// exactly one partition actor, and never touched from anywhere else.
type segmentLog struct {
	dir    string
	cfg    logConfig
	segs   []*segment
	epochs []epochStart

	recoveryPoint int64          // every offset below was on disk (recovery.go)
	rpFile        storage.RWFile // the recovery point file, nil while closed
	corrupt       []corruptRange // quarantined: never served, never cut, never reused
	accepted      [][2]int64     // offset ranges whose loss an operator accepted
	// distrust says how the leader-epoch file (cfg.epochs) contradicts the batches (""
	// it matches them, or there is none); epochHint is the index of the entry of the
	// last batch's epoch (-1: none yet), so a walk checks each batch in constant time.
	distrust  string
	epochHint int
	// start is the log start offset DeleteRecords moved inside the first segment
	// (deleterecords.go); StartOffset is the larger of it and the first segment's base.
	start int64
}

// openLog opens (creating if needed) the log in dir and recovers it: every batch of every
// segment is walked to rebuild the index, and the newest segment, the only one that can
// hold a write never fsynced, is checked batch by batch (length, magic, CRC-32C,
// contiguous offsets). A bad batch at or past the recovery point that nothing valid
// follows is a torn tail and is cut off; any other bad batch is quarantined
// (recovery.go). visit sees every surviving batch in offset order (producer state is
// rebuilt from it).
func openLog(dir string, cfg logConfig, visit visitFunc) (*segmentLog, error) {
	if cfg.fs == nil {
		cfg.fs = storage.OSFS{}
	}
	if err := cfg.fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("create log dir %s: %w", dir, err)
	}
	if err := recoverCleaning(cfg.fs, dir, cfg.log); err != nil {
		return nil, err
	}
	entries, err := cfg.fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list log dir %s: %w", dir, err)
	}
	var bases []int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		base, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"), 10, 64)
		if err != nil || base < 0 {
			cfg.log.Warn().Str("file", name).Msg("partition_stray_file_ignored")
			continue
		}
		bases = append(bases, base)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	rp, _, err := readRecoveryPoint(cfg.fs, dir)
	if err != nil {
		return nil, err
	}
	if n := len(bases); n > 0 && bases[n-1] > rp {
		rp = bases[n-1] // rolling fsynced every older segment
	}
	accepted, err := readAcceptedLoss(cfg.fs, dir, cfg.log)
	if err != nil {
		return nil, err
	}
	l := &segmentLog{dir: dir, cfg: cfg, recoveryPoint: rp, accepted: accepted, epochHint: -1}
	for i, base := range bases {
		s := &segment{base: base, next: base, maxTS: -1, maxTSOffset: -1, staleAt: -1, path: filepath.Join(dir, segmentName(base)), fs: cfg.fs}
		if len(l.segs) > 0 && base < l.segs[len(l.segs)-1].next {
			// Segments never overlap; the later file cannot be served in line, but it
			// is moved aside for the operator rather than deleted (offsets it alone held
			// are quarantined as missing).
			aside := s.path + ".overlapping"
			err := cfg.fs.Rename(s.path, aside)
			cfg.log.Error().Err(err).Str("segment", s.path).Str("moved_to", aside).
				Int64("previous_end_offset", l.segs[len(l.segs)-1].next).Msg("partition_overlapping_segment_moved_aside")
			if err != nil {
				l.closeFiles()
				return nil, fmt.Errorf("move overlapping segment %s aside: %w", s.path, err)
			}
			continue
		}
		upTo := rp // where offsets lost at the end of this segment end
		if i < len(bases)-1 {
			upTo = bases[i+1]
		}
		if err := l.recover(s, i == len(bases)-1, upTo, visit); err != nil {
			s.close()
			l.closeFiles()
			return nil, err
		}
		if s.staleAt == 0 {
			// A segment a replaced leader rolled after its successor began: none of it
			// is the log. Moved aside for the operator, never deleted.
			s.close()
			aside := s.path + ".stale"
			err := cfg.fs.Rename(s.path, aside)
			cfg.log.Error().Err(err).Str("segment", s.path).Str("moved_to", aside).Msg("partition_stale_segment_moved_aside")
			if err != nil {
				l.closeFiles()
				return nil, fmt.Errorf("move stale segment %s aside: %w", s.path, err)
			}
			continue
		}
		if err := l.checkTxnIndex(s); err != nil {
			s.close()
			l.closeFiles()
			return nil, err
		}
		l.segs = append(l.segs, s)
	}
	if err := l.removeStrayTxnIndexes(); err != nil {
		l.closeFiles()
		return nil, err
	}
	// Offsets lost without a bad byte: a segment that ends before the next begins (its
	// file cut at a batch boundary, or a whole file gone), or a log that ends below the
	// recovery point.
	for i, s := range l.segs {
		to := rp
		if i+1 < len(l.segs) {
			to = l.segs[i+1].base
		}
		if s.next < to && l.corruptAt(s.next) == nil {
			l.quarantine(corruptRange{seg: s, from: s.next, to: to, pos: s.size, end: s.size}, "at_open")
		}
	}
	switch {
	case len(l.segs) == 0:
		if rp > 0 {
			// Every segment is gone: the log starts again past every offset handed out.
			cfg.log.Error().Str("dir", dir).Int64("recovery_point", rp).Msg("partition_segments_missing")
			if cfg.corrupted != nil {
				cfg.corrupted()
			}
		}
		if _, err := l.roll(rp); err != nil {
			return nil, err
		}
	case l.EndOffset() < rp || (len(l.corrupt) > 0 && l.corrupt[len(l.corrupt)-1].seg == l.active()) || l.active().staleAt >= 0:
		// New batches go to a segment of their own, past every offset handed out, and
		// the damaged file is left as it is for the operator.
		if base := max(l.EndOffset(), rp); base > l.active().base {
			if _, err := l.roll(base); err != nil {
				l.closeFiles()
				return nil, err
			}
		}
	}
	if cfg.rollOnOpen {
		if err := l.rollOwn(); err != nil {
			l.closeFiles()
			return nil, err
		}
	}
	if last, ok := lastEpoch(cfg.epochs); ok && l.trustsEpochs() && last.StartOffset > l.EndOffset() {
		// An epoch begins at the log end recovery found, never past it.
		l.distrust = fmt.Sprintf("epoch %d begins at offset %d, past the log end %d", last.Epoch, last.StartOffset, l.EndOffset())
	}
	// Recovery made everything it kept durable. In a cluster the point is written to a
	// new file renamed into place: a former leader that still has the old one open
	// writes into a file nobody reads again.
	save := l.saveRecoveryPoint
	if cfg.rollOnOpen {
		save = l.replaceRecoveryPoint
	}
	if err := save(l.EndOffset(), false); err != nil {
		cfg.log.Warn().Err(err).Msg("partition_recovery_point_write_failed")
	}
	return l, nil
}

// rollOwn (cluster) starts this leader's own segment at the log end, created exclusively:
// a former leader's late append into its own segment then lands past this leader's start
// and is never served. An empty newest segment, which a former leader may have just
// rolled and may still write into, is unlinked and made again, so such a write goes to a
// file nobody reads.
func (l *segmentLog) rollOwn() error {
	a := l.active()
	if a.size > 0 || slices.ContainsFunc(l.corrupt, func(c corruptRange) bool { return c.seg == a }) {
		_, err := l.roll(l.EndOffset())
		return err
	}
	a.close()
	if err := l.cfg.fs.Remove(a.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove empty segment %s: %w", a.path, err)
	}
	l.segs = l.segs[:len(l.segs)-1]
	_, err := l.roll(a.base)
	return err
}

// recover walks one segment. check verifies every batch's CRC (the newest segment, the
// only one that may hold bytes never fsynced); an older segment is walked by headers,
// and a batch whose successor does not line up is CRC-checked before it is trusted. A
// bad batch is a torn tail only in the newest segment, at or past the recovery point,
// with no valid batch after it: that is cut off with a Warn. Any other is quarantined:
// the walk goes on from the next valid batch, and offsets lost at the end of the
// segment (up to upTo: the next segment's base, or the recovery point) are never
// handed out again.
// visitFunc sees a batch recovery walked (b: the whole batch, for a control batch only)
// and returns the aborted-index entry of an abort marker.
type visitFunc func(h *header, b []byte) (abortedTxn, bool)

func (l *segmentLog) recover(s *segment, check bool, upTo int64, visit visitFunc) error {
	f, err := s.file()
	if err != nil {
		return err
	}
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("stat segment %s: %w", s.path, err)
	}
	w := walker{f: f, end: size}
	pos := int64(0)
	expect := s.base
	torn := false
	// unsynced is where the batches past the recovery point begin (-1: none), and clean
	// says none of the segment was quarantined: those bytes are written again before
	// the fsync below (repair.go).
	unsynced, clean := int64(-1), true
	for pos < size {
		h, ok, err := w.batch(pos, check)
		if err != nil {
			return fmt.Errorf("read segment %s: %w", s.path, err)
		}
		// Offsets only ever grow by whole batches; a segment may start past its name.
		good := ok && h.LastOffsetDelta >= 0 && (h.BaseOffset == expect || (pos == 0 && h.BaseOffset > expect))
		if ok && !good && h.LastOffsetDelta >= 0 && h.BaseOffset > expect {
			// A gap compaction left (compact.go): taken only whole, its CRC holding.
			if _, good, err = w.batch(pos, true); err != nil {
				return fmt.Errorf("read segment %s: %w", s.path, err)
			}
		}
		if good && !check && h.BaseOffset >= upTo {
			// Past the next segment's base: bytes a former leader wrote after this
			// segment was closed by its successor (cluster). Never served.
			l.cfg.log.Warn().Str("segment", s.path).Int64("offset", h.BaseOffset).Int64("next_segment", upTo).
				Int64("ignored_bytes", size-pos).Msg("partition_stale_tail_ignored")
			if l.cfg.stale != nil {
				l.cfg.stale()
			}
			break
		}
		if good && !check && !w.plausibleNext(pos+h.Size(), &h) {
			_, good, err = w.batch(pos, true)
			if err != nil {
				return fmt.Errorf("read segment %s: %w", s.path, err)
			}
		}
		if good {
			newer, late, err := l.lateWrite(&w, check, pos, &h)
			if err != nil {
				return fmt.Errorf("read segment %s: %w", s.path, err)
			}
			if late {
				// Written by a leader already replaced at this offset: it was never
				// acknowledged, and what its successor wrote from here on is the log.
				l.cfg.log.Warn().Str("segment", s.path).Int64("offset", h.BaseOffset).Int32("batch_epoch", h.LeaderEpoch).
					Int32("epoch_in_force", newer).Int64("ignored_bytes", size-pos).
					Msg("partition_stale_epoch_ignored")
				if l.cfg.stale != nil {
					l.cfg.stale()
				}
				s.staleAt = pos
				break
			}
		}
		if good {
			if check && unsynced < 0 && h.LastOffset() >= l.recoveryPoint {
				unsynced = pos
			}
			s.track(&h, pos)
			l.noteEpoch(h.LeaderEpoch, h.BaseOffset)
			if visit != nil {
				var b []byte
				if h.Attributes&attrControl != 0 {
					if b, err = w.bytes(pos, h.Size()); err != nil {
						return fmt.Errorf("read segment %s: %w", s.path, err)
					}
				}
				if a, ok := visit(&h, b); ok {
					s.aborted = append(s.aborted, a)
				}
			}
			expect = h.LastOffset() + 1
			pos += h.Size()
			continue
		}
		next, nh, found, err := w.scan(pos+1, pos, expect)
		if err != nil {
			return fmt.Errorf("scan segment %s: %w", s.path, err)
		}
		clean = false
		if found {
			l.quarantine(corruptRange{seg: s, from: expect, to: nh.BaseOffset, pos: pos, end: next}, "at_open")
			s.sinceIndex = indexInterval // reads after the range start from an entry past it
			pos, expect = next, nh.BaseOffset
			continue
		}
		if check && expect >= l.recoveryPoint {
			torn = true
			break
		}
		l.quarantine(corruptRange{seg: s, from: expect, to: max(upTo, expect), pos: pos, end: size}, "at_open")
		break
	}
	if torn {
		l.cfg.log.Warn().Str("segment", s.path).Int64("valid_bytes", pos).Int64("file_bytes", size).
			Int64("recovery_point", l.recoveryPoint).Msg("partition_torn_tail_truncated")
		if l.cfg.truncated != nil {
			l.cfg.truncated()
		}
		if err := f.Truncate(pos); err != nil {
			return fmt.Errorf("truncate segment %s: %w", s.path, err)
		}
	}
	if check {
		// What a killed process wrote may still be only in the page cache: make it
		// durable before it is served as such. Past the recovery point it is written
		// again first: after a failed fsync the cache may hold it marked clean, and an
		// fsync alone would not write it (repair.go).
		var err error
		if clean && unsynced >= 0 {
			err = rewriteTail(f, unsynced, pos)
		} else {
			err = f.Sync()
		}
		if err != nil {
			return fmt.Errorf("sync segment %s: %w", s.path, err)
		}
	}
	if !torn && pos < size {
		pos = size // the quarantined or stale bytes stay; nothing is written over them
	}
	s.size = pos
	return nil
}

// lateWrite says whether the batch h at byte pos (newest: of the newest segment) was
// written by a leader already replaced at its offset, and the newer epoch that shows
// it. The evidence is the leader-epoch file while it matches the batches (an entry of a
// newer epoch begins at or before h), else the batches themselves (one before h carries
// a newer epoch). Either way a batch counts as such a write only where one can land,
// so an acknowledged batch never does: in the newest segment (an older one is not read
// past the next one's base, where a replaced leader's writes go), at or past the
// recovery point, and with no batch of the newer epoch after it in the segment (the
// newer leader writes in a segment of its own, never after a late write). A file that
// would say otherwise, or that has no entry for h's epoch at or before h, does not
// match the batches: it is not trusted from then on (segmentLog.distrust) and is rebuilt.
func (l *segmentLog) lateWrite(w *walker, newest bool, pos int64, h *header) (int32, bool, error) {
	if h.LeaderEpoch < 0 {
		return -1, false, nil
	}
	if e, i := l.cfg.epochs, l.epochHint; l.trustsEpochs() {
		if i < 0 || e[i].Epoch != h.LeaderEpoch {
			i = slices.IndexFunc(e, func(x epochEntry) bool { return x.Epoch == h.LeaderEpoch })
			l.epochHint = i
		}
		if i >= 0 && e[i].StartOffset <= h.BaseOffset && (i+1 == len(e) || e[i+1].StartOffset > h.BaseOffset) {
			return h.LeaderEpoch, false, nil // the epoch in force here: the usual case
		}
	}
	if l.trustsEpochs() && !describes(l.cfg.epochs, h.LeaderEpoch, h.BaseOffset) {
		l.distrust = fmt.Sprintf("the batch at offset %d has epoch %d, which no entry begins at or before it", h.BaseOffset, h.LeaderEpoch)
	}
	for {
		fromFile := l.trustsEpochs()
		newer := int32(-1)
		if n := len(l.epochs); n > 0 {
			newer = l.epochs[n-1].Epoch
		}
		if fromFile {
			newer = epochAt(l.cfg.epochs, h.BaseOffset)
		}
		if h.LeaderEpoch >= newer {
			return newer, false, nil
		}
		why := ""
		switch last, _ := lastEpoch(l.cfg.epochs); {
		case !newest:
			why = "a segment that others follow"
		case h.BaseOffset < l.recoveryPoint:
			why = "below the recovery point"
		case fromFile && last.StartOffset > h.BaseOffset:
			why = fmt.Sprintf("before epoch %d's start %d", last.Epoch, last.StartOffset)
		default:
			later, err := w.reaches(pos+h.Size(), h.LastOffset()+1, newer)
			if err != nil {
				return newer, false, err
			}
			if !later {
				return newer, true, nil
			}
			why = fmt.Sprintf("followed by a batch of epoch %d or newer", newer)
		}
		if !fromFile {
			return newer, false, nil // the batches alone never cut the log there
		}
		l.distrust = fmt.Sprintf("epoch %d from the file would make the batch of epoch %d at offset %d stale, %s", newer, h.LeaderEpoch, h.BaseOffset, why)
	}
}

// trustsEpochs says whether there is a leader-epoch file and nothing walked so far
// contradicts it.
func (l *segmentLog) trustsEpochs() bool { return l.cfg.epochsFound && l.distrust == "" }

func (l *segmentLog) noteEpoch(epoch int32, offset int64) {
	if epoch < 0 {
		return
	}
	if n := len(l.epochs); n == 0 || l.epochs[n-1].Epoch < epoch {
		l.epochs = append(l.epochs, epochStart{Epoch: epoch, Offset: offset})
	}
}

// walker reads batch headers (and, when checking, whole batches) through a read-ahead
// window, so walking a segment of small batches costs one read per window.
type walker struct {
	f      io.ReaderAt
	end    int64
	buf    []byte
	bufPos int64
	window int64 // bytes read at a time, at least; zero: walkWindow
}

// walkWindow is what a walk over a whole segment reads at a time (recovery, compaction).
const walkWindow = 256 << 10

// batch returns the batch header at pos; ok is false when what lies there is not a whole,
// valid batch (with check, its CRC is verified too).
func (w *walker) batch(pos int64, check bool) (header, bool, error) {
	if w.end-pos < batchHeaderSize {
		return header{}, false, nil
	}
	hb, err := w.bytes(pos, batchHeaderSize)
	if err != nil {
		return header{}, false, err
	}
	h := parseHeader(hb)
	if h.Magic != 2 || h.Length < batchHeaderSize-logOverhead || pos+h.Size() > w.end {
		return h, false, nil
	}
	if check {
		b, err := w.bytes(pos, h.Size())
		if err != nil {
			return h, false, err
		}
		if !checkStored(b) {
			return h, false, nil
		}
	}
	return h, true, nil
}

func (w *walker) bytes(pos, n int64) ([]byte, error) {
	if pos >= w.bufPos && pos+n <= w.bufPos+int64(len(w.buf)) {
		return w.buf[pos-w.bufPos : pos-w.bufPos+n], nil
	}
	window := w.window
	if window == 0 {
		window = walkWindow
	}
	size := max(n, window)
	if pos+size > w.end {
		size = w.end - pos
	}
	if int64(cap(w.buf)) < size {
		w.buf = make([]byte, size)
	}
	w.buf = w.buf[:size]
	if _, err := w.f.ReadAt(w.buf, pos); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	w.bufPos = pos
	return w.buf[:n], nil
}

func (l *segmentLog) active() *segment { return l.segs[len(l.segs)-1] }

// StartOffset is the first offset still kept.
func (l *segmentLog) StartOffset() int64 { return max(l.segs[0].base, l.start) }

// EndOffset is the offset the next batch gets (the log end offset).
func (l *segmentLog) EndOffset() int64 { return l.active().next }

// Size is the bytes of every segment.
func (l *segmentLog) Size() int64 {
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// roll starts a new segment at base, after making the current one durable: only the
// active segment may ever hold unsynced bytes, which keeps recovery to one file. The
// partition actor rolls off its turn (roll.go): rollDue, makeSegment in the background,
// then addSegment.
func (l *segmentLog) roll(base int64) (*segment, error) {
	var prev storage.RWFile
	if len(l.segs) > 0 {
		prev = l.active().f
	}
	s, err := l.makeSegment(prev, base)
	if err != nil {
		return nil, err
	}
	l.addSegment(s)
	return s, nil
}

// rollDue says whether a batch of n bytes goes to a new segment.
func (l *segmentLog) rollDue(n int) bool {
	s := l.active()
	return s.size > 0 && s.size+int64(n) > l.cfg.segmentBytes
}

// makeSegment is the I/O of a roll: it syncs prev (the active segment's file; nil: none
// open) and creates the file of a segment beginning at base. It reads only the log's
// settings, so it may run off the actor's turn while the log is not appended to.
func (l *segmentLog) makeSegment(prev storage.RWFile, base int64) (*segment, error) {
	if prev != nil {
		if err := prev.Sync(); err != nil {
			return nil, fmt.Errorf("sync segment before %s: %w", segmentName(base), err)
		}
	}
	s := &segment{base: base, next: base, maxTS: -1, maxTSOffset: -1, staleAt: -1, path: filepath.Join(l.dir, segmentName(base)), fs: l.cfg.fs}
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if l.cfg.rollOnOpen {
		// Never over a file another broker made (cluster): a former leader that rolls
		// late must fail, not empty its successor's segment.
		flags = os.O_RDWR | os.O_CREATE | os.O_EXCL
	}
	f, err := l.cfg.fs.OpenFile(s.path, flags)
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w", s.path, err)
	}
	s.f = f
	if err := l.cfg.fs.SyncDir(l.dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("sync dir %s: %w", l.dir, err)
	}
	return s, nil
}

// addSegment makes s, made by makeSegment, the active segment.
func (l *segmentLog) addSegment(s *segment) { l.segs = append(l.segs, s) }

// append writes one validated batch at the log end, stamping its base offset and leader
// epoch, and returns the base offset. On a failed write the segment is cut back so a
// partial batch is never left behind.
func (l *segmentLog) append(batch []byte, h *header, leaderEpoch int32) (int64, error) {
	s := l.active()
	if s.size > 0 && s.size+int64(len(batch)) > l.cfg.segmentBytes {
		var err error
		if s, err = l.roll(s.next); err != nil {
			return 0, err
		}
	}
	f, err := s.file()
	if err != nil {
		return 0, err
	}
	base := s.next
	stamp(batch, base, leaderEpoch)
	h.BaseOffset, h.LeaderEpoch = base, leaderEpoch
	if _, err := f.WriteAt(batch, s.size); err != nil {
		f.Truncate(s.size)
		return 0, fmt.Errorf("write segment %s: %w", s.path, err)
	}
	s.track(h, s.size)
	l.noteEpoch(leaderEpoch, base)
	return base, nil
}

// retain deletes whole segments that retention allows to go: older than retentionMS
// (by their largest timestamp) or, oldest first, while the rest still exceeds
// retentionBytes. The active segment always stays. Returns how many went.
func (l *segmentLog) retain(nowMS, retentionMS, retentionBytes int64) (int, error) {
	total := l.Size()
	n := 0
	for len(l.segs) > 1 {
		s := l.segs[0]
		expired := retentionMS >= 0 && s.maxTS >= 0 && s.maxTS < nowMS-retentionMS
		tooBig := retentionBytes >= 0 && total-s.size >= retentionBytes
		if !expired && !tooBig {
			break
		}
		s.close()
		if err := l.cfg.fs.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("delete segment %s: %w", s.path, err)
		}
		l.removeTxnIndex(s)
		total -= s.size
		l.segs = l.segs[1:]
		n++
		keep := l.corrupt[:0]
		for _, c := range l.corrupt {
			if c.seg != s {
				keep = append(keep, c)
			}
		}
		l.corrupt = keep
	}
	return n, nil
}

// closeIdle closes the segments' files (they reopen on the next read or append); the
// active one only with active, when no fsync is using it.
func (l *segmentLog) closeIdle(active bool) {
	n := len(l.segs) - 1
	if active {
		n++
	}
	for _, s := range l.segs[:n] {
		s.close()
	}
	if active && !l.cfg.rollOnOpen {
		l.closeRecoveryPoint() // kept open in a cluster (replaceRecoveryPoint)
	}
}

// Close syncs the active segment, records the log end as the recovery point and closes
// every file.
func (l *segmentLog) Close() error {
	var err error
	if len(l.segs) > 0 {
		if f := l.active().f; f != nil {
			err = f.Sync()
			// Only through a file still open: a deleted topic's directory has moved
			// aside, and a new one of the same name may stand at the old path.
			if err == nil && l.rpFile != nil {
				if rerr := l.saveRecoveryPoint(l.EndOffset(), true); rerr != nil {
					l.cfg.log.Warn().Err(rerr).Msg("partition_recovery_point_write_failed")
				}
			}
		}
	}
	l.closeFiles()
	return err
}

// closeFiles closes every file, recording nothing.
func (l *segmentLog) closeFiles() {
	for _, s := range l.segs {
		s.close()
		s.closeTxnIndex()
	}
	l.closeRecoveryPoint()
}
