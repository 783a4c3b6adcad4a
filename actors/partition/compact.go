package partition

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/storage"
)

// Log compaction (cleanup.policy=compact), as Apache's LogCleaner does it:
//
//  1. a key map of the dirty range (from where the last pass stopped to the end of the
//     cleanable segments: all but the active one, and none holding a record younger
//     than min.compaction.lag.ms) maps each key's hash (MD5, as Apache's SkimpyOffsetMap)
//     to the newest offset holding it. The map is bounded (log.cleaner.dedupe.buffer.size
//     semantics): when it fills, the pass maps only up to the batch where it filled;
//  2. every cleanable segment from the log start up to there is rewritten, in groups of
//     at most segment.bytes, keeping a record unless the map holds a newer offset for its
//     key (shouldRetainRecord). A tombstone is kept until delete.retention.ms after the
//     pass that first kept it (KIP-534: the batch carries its delete horizon as its base
//     timestamp, attribute bit 6). A record without a key is dropped, and so is an
//     aborted transaction's (txnFilter); markers are kept whole. Each batch keeps
//     its base offset, last offset delta, producer id, epoch and base sequence, with only
//     its kept records (compressed again with its own codec) and a new CRC; a batch left empty is
//     dropped unless it is its producer's last or the group's last (kept as a header:
//     the first keeps sequence checks, the second the group's end offset on disk);
//  3. a group's replacement is written aside as <base>.log.cleaned and fsynced, then
//     swapped in: renamed to <base>.log.swap, directory fsynced, the group's old
//     segments deleted, .swap renamed to <base>.log, directory fsynced. openLog finishes
//     or undoes a swap a crash interrupted (recoverCleaning): a .cleaned file is
//     deleted (the old segments are whole), a .swap file replaces every old segment whose
//     base lies in its offset range, so a crash leaves either the old segments or the new
//     one, never a mix.
//
// Steps 1-2 and the file steps of 3 run as background jobs (cleaner.go holds the
// actor's side); offsets never change, so gaps are left where records went (readers
// and recovery take a batch whose base lies past the previous one's end, once its CRC
// holds).

const (
	cleanedSuffix = ".cleaned"
	swapSuffix    = ".swap"
	// attrDeleteHorizon (KIP-534): the batch's base timestamp is the time after which its
	// tombstones may be removed.
	attrDeleteHorizon = 0x40
)

// keyHash is a record key's MD5, what the key map holds (Apache's SkimpyOffsetMap).
type keyHash [md5.Size]byte

// cleanSeg is one segment a pass reads: it is immutable (never the active one).
type cleanSeg struct {
	base, next, size int64
	path             string
}

// cleanJob is one cleaning pass: what the actor planned and what the job made.
type cleanJob struct {
	dir  string
	fs   storage.FS
	log  zerolog.Logger
	segs []cleanSeg // every cleanable segment from the log start, oldest first
	// dirtyFrom is the first offset not cleaned by an earlier pass.
	dirtyFrom         int64
	maxKeys           int
	nowMS             int64
	deleteRetentionMS int64
	segmentBytes      int64
	// lastOfProducer is each idempotent producer's last batch (its last offset).
	lastOfProducer map[int64]int64
	// aborted is every aborted transaction of the log (the segments' aborted-transaction
	// indexes, the active one's too), by first offset: its batches map no key and are
	// dropped.
	aborted []abortedTxn
	// throttle bounds what the pass reads and writes (log.cleaner.io.max.bytes.per.second).
	throttle *Throttle

	// Made by the job.
	upTo    int64 // the key map covers [dirtyFrom, upTo): the next pass starts there
	groups  []*cleanGroup
	scratch recordScratch
}

// cleanGroup is consecutive segments replaced by one cleaned file.
type cleanGroup struct {
	olds []cleanSeg
	seg  *segment // the replacement, once swapped in (its file open)
}

func (g *cleanGroup) base() int64 { return g.olds[0].base }

// readSegment walks a segment file the job reads through its own descriptor, every
// batch CRC-checked: a pass never rewrites what it cannot trust.
func readSegment(fs storage.FS, path string, fn func(pos int64, h *header, b []byte) error) error {
	return readSegmentWith(fs, path, nil, fn)
}

// readSegmentWith is readSegment reading through *buf, kept for the next segment: a
// pass reads every segment twice, and a window made for each was most of what it left
// to the garbage collector.
func readSegmentWith(fs storage.FS, path string, buf *[]byte, fn func(pos int64, h *header, b []byte) error) error {
	f, err := fs.OpenFile(path, os.O_RDONLY)
	if err != nil {
		return fmt.Errorf("open segment %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("stat segment %s: %w", path, err)
	}
	w := walker{f: f, end: size}
	if buf != nil {
		w.buf = *buf
		defer func() { *buf = w.buf[:0] }()
	}
	for pos := int64(0); pos < size; {
		h, ok, err := w.batch(pos, false)
		if err != nil {
			return fmt.Errorf("read segment %s: %w", path, err)
		}
		if !ok {
			return fmt.Errorf("segment %s: bad batch at %d", path, pos)
		}
		b, err := w.bytes(pos, h.Size())
		if err != nil {
			return fmt.Errorf("read segment %s: %w", path, err)
		}
		if !checkStored(b) {
			return fmt.Errorf("segment %s: batch at %d fails its CRC", path, pos)
		}
		if err := fn(pos, &h, b); err != nil {
			return err
		}
		pos += h.Size()
	}
	return nil
}

// batchRecords decodes the records of a stored batch (decompressed if needed).
func batchRecords(h *header, b []byte) ([]kmsg.Record, error) { return decodeRecords(h, b, nil) }

// recordScratch is a cleaning pass's room for decoding one batch's records at a time,
// reused from batch to batch: a pass decodes every batch it reads, and a copy and a
// slice made for each kept the garbage collector running several times a second while
// a partition was cleaned, its pauses and assists falling on the broker's producers
// (BenchmarkCleanerProduce).
type recordScratch struct {
	raw    []byte
	recs   []kmsg.Record
	window []byte // the segment reader's (readSegmentWith)
}

// decodeRecords is batchRecords; with s, the records (and, for a compressed batch, the
// bytes they point into) are s's and hold only until its next use, and an uncompressed
// batch's records point into b.
func decodeRecords(h *header, b []byte, s *recordScratch) ([]kmsg.Record, error) {
	recs := b[batchHeaderSize:]
	if codec := h.Attributes & attrCompression; codec != codecNone {
		st := streamPool.Get().(*recordStream)
		defer st.release()
		if err := st.open(codec, recs, minDecompressLimit); err != nil {
			return nil, fmt.Errorf("decompress batch at offset %d: %w", h.BaseOffset, err)
		}
		var raw []byte
		var err error
		if s == nil {
			raw, err = io.ReadAll(&st.lim)
		} else {
			raw, err = readAllInto(s.raw[:0], &st.lim)
			s.raw = raw
		}
		if err != nil || st.lim.over {
			return nil, fmt.Errorf("decompress batch at offset %d: %v", h.BaseOffset, err)
		}
		recs = raw
	} else if s == nil {
		recs = append([]byte(nil), recs...)
	}
	var out []kmsg.Record
	if s != nil {
		out = s.recs[:0]
	} else {
		out = make([]kmsg.Record, 0, h.RecordCount)
	}
	for len(recs) > 0 {
		length, n := binary.Varint(recs)
		if n <= 0 || length < 0 || int64(n)+length > int64(len(recs)) {
			return nil, fmt.Errorf("batch at offset %d: bad record length", h.BaseOffset)
		}
		var r kmsg.Record
		if err := r.ReadFrom(recs[:int64(n)+length]); err != nil {
			return nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		out = append(out, r)
		recs = recs[int64(n)+length:]
	}
	if s != nil {
		s.recs = out
	}
	return out, nil
}

// readAllInto is io.ReadAll appending to buf.
func readAllInto(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// buildKeyMap maps every key of [dirtyFrom, the end of the cleanable segments) to the
// newest offset holding it, stopping at the batch where the map would hold more than
// maxKeys keys. upTo is where the map ends.
func (j *cleanJob) buildKeyMap() (map[keyHash]int64, error) {
	keys := map[keyHash]int64{}
	txns := txnFilter{q: j.aborted}
	j.upTo = j.dirtyFrom
	full := errors.New("full")
	for _, s := range j.segs {
		if s.next <= j.dirtyFrom {
			continue
		}
		err := readSegmentWith(j.fs, s.path, &j.scratch.window, func(_ int64, h *header, b []byte) error {
			j.pace(len(b))
			aborted := txns.aborted(h)
			if h.LastOffset() < j.dirtyFrom {
				return nil
			}
			// A marker maps no key, nor does an aborted transaction's record: it must
			// never shadow an older value. A committed one maps its keys as any.
			if h.Attributes&attrControl == 0 && !aborted {
				recs, err := decodeRecords(h, b, &j.scratch)
				if err != nil {
					return err
				}
				fresh := 0
				for i := range recs {
					if recs[i].Key != nil {
						if _, ok := keys[md5.Sum(recs[i].Key)]; !ok {
							fresh++
						}
					}
				}
				if len(keys)+fresh > j.maxKeys {
					return full
				}
				for i := range recs {
					if off := h.BaseOffset + int64(recs[i].OffsetDelta); recs[i].Key != nil && off >= j.dirtyFrom {
						keys[md5.Sum(recs[i].Key)] = off
					}
				}
			}
			j.upTo = h.LastOffset() + 1
			return nil
		})
		if errors.Is(err, full) {
			break
		}
		if err != nil {
			return nil, err
		}
		j.upTo = max(j.upTo, s.next)
	}
	return keys, nil
}

// run is the job's first part: the key map, then each group's cleaned file written
// aside and fsynced. Nothing the log serves is touched.
func (j *cleanJob) run() error {
	keys, err := j.buildKeyMap()
	if err != nil {
		return err
	}
	var g *cleanGroup
	var size int64
	for _, s := range j.segs {
		if s.base >= j.upTo {
			break
		}
		if g == nil || size+s.size > j.segmentBytes {
			g = &cleanGroup{}
			j.groups = append(j.groups, g)
			size = 0
		}
		g.olds = append(g.olds, s)
		size += s.size
	}
	for _, g := range j.groups {
		if err := j.writeCleaned(g, keys); err != nil {
			j.removeCleaned()
			return err
		}
	}
	return nil
}

// cleanedPath is where a group's replacement is written.
func (j *cleanJob) cleanedPath(g *cleanGroup) string {
	return filepath.Join(j.dir, segmentName(g.base())+cleanedSuffix)
}

// removeCleaned deletes the cleaned files of a pass that is not swapped in.
func (j *cleanJob) removeCleaned() {
	for _, g := range j.groups {
		if err := j.fs.Remove(j.cleanedPath(g)); err != nil && !errors.Is(err, os.ErrNotExist) {
			j.log.Warn().Err(err).Str("file", j.cleanedPath(g)).Msg("partition_cleaned_file_remove_failed")
		}
	}
}

func (j *cleanJob) writeCleaned(g *cleanGroup, keys map[keyHash]int64) error {
	path := j.cleanedPath(g)
	f, err := j.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	var pos int64
	var pend []byte // a batch kept is written once the next one is read
	var last header // the group's last batch, read so far
	seen := false
	txns := txnFilter{q: j.aborted}
	for _, s := range g.olds {
		err := readSegmentWith(j.fs, s.path, &j.scratch.window, func(_ int64, h *header, b []byte) error {
			j.pace(len(b) + len(pend)) // this batch read, the one before written
			if pend != nil {
				if _, err := f.WriteAt(pend, pos); err != nil {
					return fmt.Errorf("write %s: %w", path, err)
				}
				pos += int64(len(pend))
				pend = nil
			}
			out, err := j.cleanBatch(h, b, keys, txns.aborted(h))
			if err != nil {
				return err
			}
			if len(out) > 0 && &out[0] == &b[0] {
				out = bytes.Clone(out) // b is the walker's window, read over next
			}
			pend = out
			last, seen = *h, true
			return nil
		})
		if err != nil {
			return err
		}
	}
	if pend == nil && seen {
		// The group's end stays on disk (a .swap file's range is its batches'): its last
		// batch, emptied, is kept, as Apache keeps the last batch of a cleaning round.
		pend = emptyBatch(&last)
	}
	if pend != nil {
		if _, err := f.WriteAt(pend, pos); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// cleanBatch is the batch with only the records kept (nil: dropped whole). aborted: the
// batch belongs to an aborted transaction.
func (j *cleanJob) cleanBatch(h *header, b []byte, keys map[keyHash]int64, aborted bool) ([]byte, error) {
	if h.Attributes&attrControl != 0 {
		// Markers are kept whole: recovery rebuilds each partition's transactions and
		// its aborted-transaction index from them.
		return b, nil
	}
	if aborted {
		// No reader ever gets an aborted transaction's records (Apache's cleaner drops
		// them): only a header stays when it holds its producer's last sequence.
		if last, ok := j.lastOfProducer[h.ProducerID]; ok && last == h.LastOffset() {
			return emptyBatch(h), nil
		}
		return nil, nil
	}
	recs, err := decodeRecords(h, b, &j.scratch)
	if err != nil {
		return nil, err
	}
	horizon := h.Attributes&attrDeleteHorizon != 0
	kept := recs[:0]
	tombstones := false
	for _, r := range recs {
		if r.Key == nil {
			continue // Apache's cleaner drops a record without a key
		}
		off := h.BaseOffset + int64(r.OffsetDelta)
		if newest, ok := keys[md5.Sum(r.Key)]; ok && newest > off {
			continue
		}
		if r.Value == nil {
			if horizon && h.BaseTimestamp <= j.nowMS {
				continue // delete.retention.ms has passed since a pass first kept it
			}
			tombstones = true
		}
		kept = append(kept, r)
	}
	if len(kept) == len(recs) && (horizon || !tombstones) {
		return b, nil // nothing to drop, no delete horizon to set: the batch as it is
	}
	if len(kept) == 0 {
		if last, ok := j.lastOfProducer[h.ProducerID]; ok && h.ProducerID >= 0 && last == h.LastOffset() {
			return emptyBatch(h), nil // its producer's sequence continues from it
		}
		return nil, nil
	}
	base := h.BaseTimestamp
	attrs := h.Attributes
	if tombstones && !horizon {
		base = j.nowMS + j.deleteRetentionMS
		attrs |= attrDeleteHorizon
	}
	var recBytes []byte
	for i := range kept {
		r := &kept[i]
		ts := h.BaseTimestamp + r.TimestampDelta64
		r.TimestampDelta64 = ts - base
		r.TimestampDelta = int32(r.TimestampDelta64)
		r.Length = 0
		body := r.AppendTo(nil)[1:] // what Length counts (a zero length is one byte)
		r.Length = int32(len(body))
		recBytes = r.AppendTo(recBytes)
	}
	// The kept records are compressed again with the batch's own codec, as Apache's
	// cleaner writes a retained batch's records with its original compression.
	payload, err := compress(attrs&attrCompression, recBytes)
	if err != nil {
		return nil, fmt.Errorf("compress cleaned batch at offset %d: %w", h.BaseOffset, err)
	}
	return encodeBatch(h, attrs, base, int32(len(kept)), payload), nil
}

// emptyBatch is h's batch with no records: its offsets, producer and sequence only.
func emptyBatch(h *header) []byte {
	return encodeBatch(h, h.Attributes&^attrCompression, h.BaseTimestamp, 0, nil)
}

// encodeBatch encodes a batch with h's offsets, epoch and producer fields around recs,
// with its length and CRC-32C computed.
func encodeBatch(h *header, attrs int16, baseTS int64, n int32, recs []byte) []byte {
	rb := kmsg.RecordBatch{
		FirstOffset: h.BaseOffset, PartitionLeaderEpoch: h.LeaderEpoch, Magic: 2,
		Attributes: attrs, LastOffsetDelta: h.LastOffsetDelta, FirstTimestamp: baseTS,
		MaxTimestamp: h.MaxTimestamp, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		FirstSequence: h.BaseSequence, NumRecords: n, Records: recs,
	}
	rb.Length = int32(len(rb.AppendTo(nil)) - logOverhead)
	rb.CRC = int32(crc32.Checksum(rb.AppendTo(nil)[offAttributes:], crc32c))
	return rb.AppendTo(nil)
}

// swap is the job's second part: each group's cleaned file swapped in for its old
// segments, and the new segment walked to rebuild its index.
func (j *cleanJob) swap() error {
	for _, g := range j.groups {
		s, err := swapIn(j.fs, j.dir, j.cleanedPath(g), g.olds)
		if err != nil {
			return err
		}
		g.seg = s
	}
	return nil
}

// swapIn renames cleaned to .swap, deletes olds and makes the .swap the segment at the
// first old base, each step made durable before the next; then it opens and indexes it.
func swapIn(fs storage.FS, dir, cleaned string, olds []cleanSeg) (*segment, error) {
	base := olds[0].base
	swap := filepath.Join(dir, segmentName(base)+swapSuffix)
	if err := storage.RenameDurably(fs, dir, cleaned, swap); err != nil {
		return nil, fmt.Errorf("rename %s: %w", cleaned, err)
	}
	paths := make([]string, len(olds))
	for i, o := range olds {
		paths[i] = o.path
	}
	return completeSwap(fs, dir, swap, base, paths)
}

// completeSwap deletes the old segments, renames the .swap file into place, fsyncs the
// directory and indexes the new segment (its file left open).
func completeSwap(fs storage.FS, dir, swap string, base int64, olds []string) (*segment, error) {
	for _, path := range olds {
		if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("delete cleaned segment %s: %w", path, err)
		}
	}
	// The deletions are durable before the new segment takes the name: a crash never
	// leaves it beside an old segment it replaced.
	if err := fs.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("sync dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, segmentName(base))
	if err := storage.RenameDurably(fs, dir, swap, path); err != nil {
		return nil, fmt.Errorf("rename %s: %w", swap, err)
	}
	s := &segment{base: base, next: base, maxTS: -1, maxTSOffset: -1, staleAt: -1, path: path, fs: fs}
	err := readSegment(fs, path, func(pos int64, h *header, _ []byte) error {
		s.track(h, pos)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// recoverCleaning finishes or undoes what a crash left of a cleaning pass, before the
// segments are listed: a .cleaned file is deleted (its old segments are all there); a
// .swap file was fsynced before it was named so, and replaces every segment whose base
// lies in its offset range.
func recoverCleaning(fs storage.FS, dir string, log zerolog.Logger) error {
	entries, err := fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list log dir %s: %w", dir, err)
	}
	var logs []int64
	var swaps []int64
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".log"+cleanedSuffix):
			if err := fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("delete %s: %w", name, err)
			}
			log.Warn().Str("file", name).Msg("partition_cleaned_file_deleted")
		case strings.HasSuffix(name, ".log"+swapSuffix):
			if b, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"+swapSuffix), 10, 64); err == nil && b >= 0 {
				swaps = append(swaps, b)
			}
		case strings.HasSuffix(name, ".log"):
			if b, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"), 10, 64); err == nil && b >= 0 {
				logs = append(logs, b)
			}
		}
	}
	for _, base := range swaps {
		swap := filepath.Join(dir, segmentName(base)+swapSuffix)
		end := base
		err := readSegment(fs, swap, func(_ int64, h *header, _ []byte) error {
			end = h.LastOffset() + 1
			return nil
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", swap, err)
		}
		var olds []string
		for _, b := range logs {
			if b >= base && b < end {
				olds = append(olds, filepath.Join(dir, segmentName(b)))
			}
		}
		if _, err := completeSwap(fs, dir, swap, base, olds); err != nil {
			return err
		}
		log.Warn().Str("file", segmentName(base)+swapSuffix).Int("replaced", len(olds)).Msg("partition_cleaning_swap_completed")
	}
	return nil
}

// cleanPolicy is a compacted topic's cleaning settings.
type cleanPolicy struct {
	minDirtyRatio     float64 // min.cleanable.dirty.ratio
	minLagMS          int64   // min.compaction.lag.ms
	maxLagMS          int64   // max.compaction.lag.ms
	deleteRetentionMS int64   // delete.retention.ms
	maxKeys           int     // the key map's bound (log.cleaner.dedupe.buffer.size)
}

// planClean is the pass due now (in the actor's turn), or nil: the cleanable segments
// are every one but the active one up to the first holding a record younger than
// min.compaction.lag.ms; a pass is due once the bytes past dirtyFrom are at least
// min.cleanable.dirty.ratio of them, or once a segment past dirtyFrom other than the
// active one has a first batch older than max.compaction.lag.ms (Apache's
// maxCompactionDelay: its first batch's max timestamp, when it has one). A log with a
// quarantined range is not cleaned.
//
// Nothing at or past firstUnstable (-1: none), the first offset of a transaction not
// decided, is cleaned (Apache's cleanable range ends at the first unstable offset): a
// segment is cleanable only when it ends at or before it.
func (l *segmentLog) planClean(pol cleanPolicy, dirtyFrom, nowMS, firstUnstable int64) *cleanJob {
	if len(l.corrupt) > 0 {
		return nil
	}
	j := &cleanJob{dir: l.dir, fs: l.cfg.fs, log: l.cfg.log, dirtyFrom: dirtyFrom, maxKeys: max(1, pol.maxKeys),
		nowMS: nowMS, deleteRetentionMS: pol.deleteRetentionMS, segmentBytes: l.cfg.segmentBytes}
	var dirty, total int64
	for _, s := range l.segs[:len(l.segs)-1] {
		if pol.minLagMS > 0 && s.maxTS > nowMS-pol.minLagMS || firstUnstable >= 0 && s.next > firstUnstable {
			break
		}
		j.segs = append(j.segs, cleanSeg{base: s.base, next: s.next, size: s.size, path: s.path})
		total += s.size
		if s.next > dirtyFrom {
			dirty += s.size
		}
	}
	if dirty == 0 || float64(dirty) < pol.minDirtyRatio*float64(total) && !l.compactionOverdue(pol.maxLagMS, dirtyFrom, nowMS) {
		return nil
	}
	for _, s := range l.segs {
		j.aborted = append(j.aborted, s.aborted...)
	}
	slices.SortFunc(j.aborted, func(a, b abortedTxn) int { return cmp.Compare(a.first, b.first) })
	return j
}

// compactionOverdue says whether a segment past dirtyFrom, other than the active one,
// began with a batch older than max.compaction.lag.ms.
func (l *segmentLog) compactionOverdue(maxLagMS, dirtyFrom, nowMS int64) bool {
	if maxLagMS <= 0 || maxLagMS == math.MaxInt64 {
		return false
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.next > dirtyFrom && s.size > 0 && s.firstTS > 0 && s.firstTS < nowMS-maxLagMS {
			return true
		}
	}
	return false
}

// installCleaned puts each swapped-in group's segment in place of the old ones (the
// actor's turn). An old segment's open file stays readable to the fetches that pinned it.
func (l *segmentLog) installCleaned(j *cleanJob) {
	for _, g := range j.groups {
		if g.seg == nil {
			continue
		}
		i := 0
		for i < len(l.segs) && l.segs[i].base < g.base() {
			i++
		}
		n := 0
		g.seg.aborted = nil
		for i+n < len(l.segs)-1 && n < len(g.olds) && l.segs[i+n].base == g.olds[n].base {
			l.segs[i+n].close()
			// Control batches are kept whole, so the abort markers stay in the group.
			g.seg.aborted = append(g.seg.aborted, l.segs[i+n].aborted...)
			l.removeTxnIndex(l.segs[i+n])
			n++
		}
		if err := l.rewriteTxnIndex(g.seg, false); err != nil {
			// Written again from the log at the next open.
			l.cfg.log.Warn().Err(err).Msg("partition_txn_index_write_failed")
		}
		segs := append([]*segment{}, l.segs[:i]...)
		segs = append(segs, g.seg)
		l.segs = append(segs, l.segs[i+n:]...)
	}
}

// requireKeys refuses a batch holding a record without a key for a compacted topic
// (INVALID_RECORD), as Apache's LogValidator does: the cleaner could only drop it.
// The batch passed validateProduced, so its records decode.
func requireKeys(h *header, b []byte, topic string, partition int32) *produceError {
	recs, err := batchRecords(h, b)
	if err != nil {
		return &produceError{kerr.CorruptMessage.Code, "record batch does not decode"}
	}
	for i := range recs {
		if recs[i].Key == nil {
			return invalidRecord(int32(i), fmt.Sprintf("Compacted topic cannot accept message without key in topic partition %s-%d.", topic, partition))
		}
	}
	return nil
}

// txnFilter tells, batch by batch in offset order, whether a transactional batch
// belongs to an aborted transaction (Apache's CleanedTransactionMetadata): q is the log's
// aborted transactions by first offset, each known from its first offset on until its
// marker.
type txnFilter struct {
	q  []abortedTxn
	on map[int64]abortedTxn // by producer: the aborted transaction it may be in
}

func (f *txnFilter) aborted(h *header) bool {
	for len(f.q) > 0 && f.q[0].first <= h.LastOffset() {
		if f.on == nil {
			f.on = map[int64]abortedTxn{}
		}
		f.on[f.q[0].producerID] = f.q[0]
		f.q = f.q[1:]
	}
	if h.Attributes&attrTransactional == 0 || h.Attributes&attrControl != 0 {
		return false
	}
	a, ok := f.on[h.ProducerID]
	return ok && h.BaseOffset >= a.first && h.BaseOffset <= a.last
}
