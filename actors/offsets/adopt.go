package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/rs/zerolog"

	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// AdoptConfig is what Adopt reads and writes.
type AdoptConfig struct {
	FS         storage.FS
	OffsetsDir string
	// JournalDirs are the other brokers' journal directories (JournalDir of each peer).
	JournalDirs []string
	// Owns reports whether this broker now serves group g.
	Owns func(g string) bool
	Log  zerolog.Logger
}

type peerRecord struct {
	epoch uint64
	ops   []op
}

// Adopt brings the files of the groups this broker now serves up to date with the other
// brokers' offsets journals, before any of them is served. A broker that died, or lost
// its lease, may have acknowledged commits that are only in its journal; a broker that
// let a group go wrote its file, but its journal may hold the same changes again.
//
// The journals are only read, never changed: a peer that is merely paused may still
// append to its own. Each group's records of an epoch at or above its file's are applied
// in order (lower epochs first, each journal's order within an epoch: one owner writes
// one epoch), and the file is written under the next epoch, so the records are never
// applied again and the peer, back, skips them in its own replay. A group whose file
// cannot be read is left alone (its actor reports it), and the error of a journal that
// cannot be read stops the adoption, to be retried: serving without those records could
// move consumers back.
func Adopt(cfg AdoptConfig) (int, error) {
	fsys := cfg.FS
	if fsys == nil {
		fsys = storage.OSFS{}
	}
	recs := map[string][]peerRecord{}
	for _, dir := range cfg.JournalDirs {
		if err := scanJournal(fsys, dir, cfg.Owns, recs); err != nil {
			return 0, err
		}
	}
	var written []string
	for g, rs := range recs {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].epoch < rs[j].epoch })
		path := filepath.Join(cfg.OffsetsDir, FileName(g))
		st, exists, err := readForReplay(fsys, path, g)
		if err != nil {
			cfg.Log.Error().Err(err).Str("group", logs.ID(g)).Int("records", len(rs)).
				Msg("offsets_group_not_adopted_file_unusable")
			continue
		}
		fileEpoch, top, applied := st.epoch, st.epoch, 0
		for _, r := range rs {
			if r.epoch < fileEpoch {
				continue
			}
			if err := replayOps(&st, &exists, r.ops); err != nil {
				return 0, fmt.Errorf("adopt group %q: %w", logs.ID(g), err)
			}
			top = max(top, r.epoch)
			applied++
		}
		if applied == 0 {
			continue
		}
		st.epoch = top + 1
		if !exists {
			// Deleted under a peer: its tombstone, so that an older peer's records of
			// it are never applied again.
			if err := putTombstoneUnsynced(fsys, cfg.OffsetsDir, g, st.epoch, path); err != nil {
				return 0, fmt.Errorf("adopt group %q: %w", logs.ID(g), err)
			}
			written = append(written, tombPath(path))
			continue
		}
		data, err := encodeFile(g, st)
		if err != nil {
			return 0, err
		}
		if err := fsys.MkdirAll(cfg.OffsetsDir); err != nil {
			return 0, err
		}
		if err := storage.WriteFileUnsynced(fsys, cfg.OffsetsDir, FileName(g), data); err != nil {
			return 0, fmt.Errorf("adopt group %q: %w", logs.ID(g), err)
		}
		written = append(written, path)
		cfg.Log.Info().Str("group", logs.ID(g)).Int("records", applied).Uint64("epoch", st.epoch).
			Msg("offsets_group_adopted_from_peer_journal")
	}
	if len(written) > 0 {
		if err := storage.SyncWritten(fsys, cfg.OffsetsDir, written); err != nil {
			return 0, fmt.Errorf("adopt: %w", err)
		}
	}
	return len(written), nil
}

// scanJournal collects the records of owned groups in one journal directory.
func scanJournal(fsys storage.FS, dir string, owns func(string) bool, out map[string][]peerRecord) error {
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list journal %s: %w", dir, err)
	}
	type seg struct {
		name  string
		first uint64
	}
	var segs []seg
	for _, n := range names {
		if first, ok := journal.ParseSegmentName(n); ok {
			segs = append(segs, seg{n, first})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	for _, s := range segs {
		b, err := fsys.ReadFile(filepath.Join(dir, s.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the peer let it go meanwhile: its groups' files hold it
		}
		if err != nil {
			return fmt.Errorf("read journal segment %s: %w", s.name, err)
		}
		for _, r := range journal.ScanSegment(b, s.first).Records {
			g, epoch, ops, err := decodeRecordEpoch(r.Data)
			if err != nil || !owns(g) {
				continue
			}
			out[g] = append(out[g], peerRecord{epoch: epoch, ops: ops})
		}
	}
	return nil
}
