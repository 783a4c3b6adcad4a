package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"kaas/storage"
)

// The aborted-transaction index of a segment on disk: `<base>.txnindex` beside
// `<base>.log`, Apache's TransactionIndex format (one 34-byte entry per abort marker in
// the segment: version int16 0, producer id, first offset, last offset (the marker's),
// LSO once decided, all big-endian), in marker order. The log is its authority: recovery
// rebuilds the entries from the markers it walks and writes the file again when it is
// missing, behind or different (partition_txn_index_rebuilt). An entry is written when
// its abort marker is appended and fsynced with the segment, before the marker is
// answered; the file goes with its segment (retention, DeleteRecords, compaction), and
// one whose segment is gone is deleted at open.

const (
	txnIndexSuffix    = ".txnindex"
	txnIndexEntrySize = 34
)

func txnIndexPath(segPath string) string { return strings.TrimSuffix(segPath, ".log") + txnIndexSuffix }

func encodeAborted(out []byte, a abortedTxn) []byte {
	out = binary.BigEndian.AppendUint16(out, 0)
	out = binary.BigEndian.AppendUint64(out, uint64(a.producerID))
	out = binary.BigEndian.AppendUint64(out, uint64(a.first))
	out = binary.BigEndian.AppendUint64(out, uint64(a.last))
	return binary.BigEndian.AppendUint64(out, uint64(a.lso))
}

// writeAborted appends s's newest entry to its index file (made on first use). The
// file is fsynced by the next fsync of the log (syncTxnIndexes).
func (l *segmentLog) writeAborted(s *segment) error {
	if s.txnFile == nil {
		f, err := l.cfg.fs.OpenFile(txnIndexPath(s.path), os.O_RDWR|os.O_CREATE)
		if err != nil {
			return fmt.Errorf("open %s: %w", txnIndexPath(s.path), err)
		}
		s.txnFile = f
	}
	n := len(s.aborted) - 1
	if _, err := s.txnFile.WriteAt(encodeAborted(nil, s.aborted[n]), int64(n)*txnIndexEntrySize); err != nil {
		return fmt.Errorf("write %s: %w", txnIndexPath(s.path), err)
	}
	s.txnDirty = true
	return nil
}

// dirtyTxnIndexes hands the index files written since their last fsync to a sync job
// (the log's fsync, or a roll's).
func (l *segmentLog) dirtyTxnIndexes() []storage.RWFile {
	var out []storage.RWFile
	for _, s := range l.segs {
		if s.txnDirty && s.txnFile != nil {
			out = append(out, s.txnFile)
			s.txnDirty = false
		}
	}
	return out
}

// syncTxnIndexes fsyncs index files (a sync job, off the turn). A failure does not fail
// the markers: the log holds them, and recovery writes the index again from it.
func syncTxnIndexes(files []storage.RWFile) error {
	var errs []error
	for _, f := range files {
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", f.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// closeTxnIndex closes s's index file. It stays open while its segment is in the log
// (an idle close leaves it: a sync job may hold it), and closes with the log, or when
// its segment goes.
func (s *segment) closeTxnIndex() {
	if s.txnFile != nil {
		s.txnFile.Close()
		s.txnFile, s.txnDirty = nil, false
	}
}

// removeTxnIndex deletes s's index file with its segment.
func (l *segmentLog) removeTxnIndex(s *segment) {
	s.closeTxnIndex()
	if err := l.cfg.fs.Remove(txnIndexPath(s.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.cfg.log.Warn().Err(err).Str("file", txnIndexPath(s.path)).Msg("partition_txn_index_delete_failed")
	}
}

// rewriteTxnIndex writes s's whole index file from its entries (recovery, and the
// segment a compaction pass put in place). Without entries the file is removed. sync
// fsyncs it (recovery; a compaction's is rebuilt at open if lost).
func (l *segmentLog) rewriteTxnIndex(s *segment, sync bool) error {
	s.closeTxnIndex()
	path := txnIndexPath(s.path)
	if len(s.aborted) == 0 {
		if err := l.cfg.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}
	var b []byte
	for _, a := range s.aborted {
		b = encodeAborted(b, a)
	}
	f, err := l.cfg.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	return nil
}

// checkTxnIndex compares s's index file with the entries recovery rebuilt from its
// markers and writes it again when it is missing, behind or different.
func (l *segmentLog) checkTxnIndex(s *segment) error {
	path := txnIndexPath(s.path)
	got, err := l.cfg.fs.ReadFile(path)
	missing := errors.Is(err, os.ErrNotExist)
	if err != nil && !missing {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var want []byte
	for _, a := range s.aborted {
		want = encodeAborted(want, a)
	}
	if bytes.Equal(got, want) {
		return nil
	}
	reason := "differs"
	switch {
	case missing:
		reason = "missing"
	case len(got) < len(want) && bytes.Equal(got, want[:len(got)/txnIndexEntrySize*txnIndexEntrySize]):
		reason = "behind"
	}
	if len(want) > 0 || !missing {
		l.cfg.log.Warn().Str("file", path).Str("reason", reason).Int("entries", len(s.aborted)).
			Int("file_bytes", len(got)).Msg("partition_txn_index_rebuilt")
	}
	return l.rewriteTxnIndex(s, true)
}

// removeStrayTxnIndexes deletes index files whose segment is not in the log (moved
// aside, deleted by a crash between the two removals, replaced by a compaction).
func (l *segmentLog) removeStrayTxnIndexes() error {
	names, err := l.cfg.fs.ReadDirNames(l.dir)
	if err != nil {
		return fmt.Errorf("list log dir %s: %w", l.dir, err)
	}
	have := map[string]bool{}
	for _, s := range l.segs {
		have[txnIndexPath(s.path)] = true
	}
	for _, name := range names {
		path := filepath.Join(l.dir, name)
		if !strings.HasSuffix(name, txnIndexSuffix) || have[path] {
			continue
		}
		if err := l.cfg.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		l.cfg.log.Warn().Str("file", path).Msg("partition_stray_txn_index_deleted")
	}
	return nil
}
