package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"kaas/storage"
)

// Where the last compaction pass stopped is kept across restarts, as Apache keeps it in
// its cleaner-offset-checkpoint: per partition directory, the file
// cleaner-offset-checkpoint, 16 bytes ("KCO1", the offset as a big-endian int64, the
// CRC-32C of those 12 bytes), replaced atomically by the pass's swap job once its
// cleaned segments are in place. The next pass maps keys from there instead of from
// the log start.
//
// Any value is safe: a pass drops only records whose key it saw again at a newer
// offset, so a checkpoint that is missing, unreadable or stale costs a pass that maps
// more of the log (or cleans less), never a record that should have stayed. One past
// the log end (the log lost its tail, or the topic was made again under its name) is
// not used.

const (
	cleanerCkptName  = "cleaner-offset-checkpoint"
	cleanerCkptMagic = "KCO1"
	cleanerCkptSize  = 16
)

func encodeCleanerCkpt(off int64) []byte {
	b := make([]byte, cleanerCkptSize)
	copy(b, cleanerCkptMagic)
	binary.BigEndian.PutUint64(b[4:], uint64(off))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32c))
	return b
}

func decodeCleanerCkpt(b []byte) (int64, bool) {
	if len(b) != cleanerCkptSize || string(b[:4]) != cleanerCkptMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], crc32c) {
		return 0, false
	}
	off := int64(binary.BigEndian.Uint64(b[4:]))
	return off, off >= 0
}

// writeCleanerCkpt records upTo as where the next pass starts (the swap job).
func writeCleanerCkpt(fsys storage.FS, dir string, upTo int64) error {
	if err := storage.WriteFileAtomic(fsys, dir, cleanerCkptName, encodeCleanerCkpt(upTo)); err != nil {
		return fmt.Errorf("write cleaner checkpoint in %s: %w", dir, err)
	}
	return nil
}

// loadCleanerCkpt is where the last pass stopped, 0 when unknown (open).
func (p *partitionActor) loadCleanerCkpt(l *segmentLog) int64 {
	b, err := p.cfg.FS.ReadFile(filepath.Join(p.cfg.Dir, cleanerCkptName))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	off, ok := decodeCleanerCkpt(b)
	if err != nil || !ok || off > l.EndOffset() {
		p.log.Warn().AnErr("read_error", err).Bool("decoded", ok).Int64("log_end_offset", l.EndOffset()).
			Msg("partition_cleaner_checkpoint_ignored")
		return 0
	}
	return off
}
