package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// ReplayJournal brings every group file under offsetsDir up to date with the journal in
// journalDir, then deletes the journal's segments. The broker runs it at start, before
// any offsets actor exists, so it is the one writer of these files. It returns the
// sequence number the journal goes on from.
//
// Each group's records are applied in order over its file (see record): a file that was
// checkpointed after some of them gets those set again to what it already holds. A group
// whose file cannot be read or understood keeps its file untouched (the group answers
// COORDINATOR_NOT_AVAILABLE until an operator repairs it) and its records are saved to
// <journalDir>/unapplied/<file>.<unix ms>.log, one JSON record per line, with an error
// logged: the operator can apply them by hand.
//
// An error (a segment that cannot be read, a record with a good checksum that this
// broker does not understand, a file that cannot be written) stops the broker from
// starting, with the journal left as it was: serving without those offsets would move
// consumers back.
func ReplayJournal(fsys FS, offsetsDir, journalDir string, log zerolog.Logger) (uint64, error) {
	if fsys == nil {
		fsys = OSFS{}
	}
	names, err := fsys.ReadDirNames(journalDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list journal %s: %w", journalDir, err)
	}
	type seg struct {
		name  string
		first uint64
	}
	var segs []seg
	for _, n := range names {
		if first, ok := parseSegmentName(n); ok {
			segs = append(segs, seg{n, first})
		} else if strings.HasPrefix(n, spareMarker) && strings.HasSuffix(n, ".tmp") {
			// A spare segment being zero-filled when the broker stopped.
			if err := fsys.Remove(filepath.Join(journalDir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				log.Warn().Err(err).Str("spare", n).Msg("offsets_journal_spare_cleanup_failed")
			}
		}
	}
	if len(segs) == 0 {
		return 1, nil
	}
	sort.Slice(segs, func(i, k int) bool { return segs[i].first < segs[k].first })
	start := time.Now()
	next := uint64(1)
	var order []string
	records := map[string][][]op{}
	raw := map[string][][]byte{}
	total := 0
	for _, s := range segs {
		path := filepath.Join(journalDir, s.name)
		b, err := fsys.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("read journal segment %s: %w", path, err)
		}
		payloads, end := readFrames(b) // the records
		if end < len(b) && !allZero(b[end:]) {
			log.Warn().Str("segment", s.name).Int("valid_bytes", end).Int("size", len(b)).
				Msg("offsets_journal_tail_ignored")
		}
		for i, p := range payloads {
			group, ops, err := decodeRecord(p)
			if err != nil {
				return 0, fmt.Errorf("journal segment %s record %d: %w", path, i, err)
			}
			if _, ok := records[group]; !ok {
				order = append(order, group)
			}
			records[group] = append(records[group], ops)
			raw[group] = append(raw[group], p)
		}
		total += len(payloads)
		next = max(next, s.first+uint64(len(payloads)))
	}
	unapplied := 0
	var written []string
	for _, group := range order {
		applied, err := replayGroup(fsys, offsetsDir, group, records[group], &written)
		if err != nil {
			return 0, err
		}
		if !applied {
			unapplied++
			saved, err := saveUnapplied(fsys, journalDir, group, raw[group])
			if err != nil {
				return 0, err
			}
			log.Error().Str("group", group).Str("file", FileName(group)).Str("saved_to", saved).
				Int("records", len(raw[group])).Msg("offsets_journal_records_not_applied_file_unusable")
		}
	}
	// The files go without an fsync each (a rewrite costs two filesystem journal commits,
	// about 1,000 a second): they are made durable at once here, before the segments that
	// could redo them are deleted. A crash before this replays again.
	if len(written) > 0 {
		if err := syncWritten(fsys, offsetsDir, written); err != nil {
			return 0, fmt.Errorf("replay offsets journal: %w", err)
		}
	}
	for _, s := range segs {
		if err := fsys.Remove(filepath.Join(journalDir, s.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("remove journal segment %s: %w", s.name, err)
		}
	}
	if err := fsys.SyncDir(journalDir); err != nil {
		return 0, fmt.Errorf("fsync directory %s: %w", journalDir, err)
	}
	log.Info().Int("segments", len(segs)).Int("records", total).Int("groups", len(order)).
		Int("groups_not_applied", unapplied).Dur("took_ms", time.Since(start)).Msg("offsets_journal_replayed")
	return next, nil
}

// replayGroup applies recs to group's file. It reports false, touching nothing, when the
// file cannot be read or understood.
func replayGroup(fsys FS, dir, group string, recs [][]op, written *[]string) (bool, error) {
	name := FileName(group)
	path := filepath.Join(dir, name)
	st, exists := newState(), false
	b, err := fsys.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, nil
	default:
		id, s, derr := decodeFile(b)
		if derr != nil || id != group {
			return false, nil
		}
		st, exists = s, true
	}
	had := exists
	for i, ops := range recs {
		if err := replayOps(&st, &exists, ops); err != nil {
			return false, fmt.Errorf("replay journal record %d of group %q: %w", i, group, err)
		}
	}
	if !exists {
		if !had {
			return true, nil
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("replay journal for group %q: remove %s: %w", group, path, err)
		}
		*written = append(*written, "") // a removal: the directory fsync makes it durable
		return true, nil
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	data, err := encodeFile(group, st)
	if err != nil {
		return false, err
	}
	if err := writeFileUnsynced(fsys, dir, name, data); err != nil {
		return false, fmt.Errorf("replay journal for group %q: %w", group, err)
	}
	*written = append(*written, path)
	return true, nil
}

// saveUnapplied writes a group's records, one per line, where the operator can find them.
func saveUnapplied(fsys FS, journalDir, group string, recs [][]byte) (string, error) {
	dir := filepath.Join(journalDir, "unapplied")
	if err := fsys.MkdirAll(dir); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	name := FileName(group) + "." + strconv.FormatInt(time.Now().UnixMilli(), 10) + ".log"
	var data []byte
	for _, r := range recs {
		data = append(data, r...)
		data = append(data, '\n')
	}
	if err := writeFileAtomic(fsys, dir, name, data); err != nil {
		return "", fmt.Errorf("save unapplied journal records of group %q: %w", group, err)
	}
	return filepath.Join(dir, name), nil
}

// allZero reports whether b is the unused, zero-filled end of a preallocated segment.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
