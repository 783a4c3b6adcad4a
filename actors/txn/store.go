package txn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/logs"
	"kaas/storage"
)

// On disk, under <data.dir>/transactions:
//
//	journal/   the coordinator's journal (actors/journal): every transition of every id,
//	           each record one whole Meta (JSON), fdatasync'd before anything follows it
//	ids/       one file per id (its name offsets.FileName's encoding of the id): its last
//	           saved Meta and the journal sequence number it holds, written off the
//	           id actor's turn a while after a transition (Checkpointed then)
//
// Replay reads the files, then every journal record newer than its id's file, writes
// the files the journal was ahead of, and removes the segments: the journal starts
// afresh after the last sequence number, and every id's state is in its file.

// Dir is the coordinator's directory under data.
func Dir(data string) string { return filepath.Join(data, "transactions") }

// JournalDir is the coordinator's journal.
func JournalDir(data string) string { return filepath.Join(Dir(data), "journal") }

// IDsDir holds one file per transactional id.
func IDsDir(data string) string { return filepath.Join(Dir(data), "ids") }

// NodeJournalDir is the journal of broker node's coordinator in a cluster, beside the
// offsets journals on the shared volume: a broker that adopts an id reads the journal of
// the broker that held it (Adopt).
func NodeJournalDir(data string, node int32) string {
	return filepath.Join(journalsDir(data), "node-"+strconv.Itoa(int(node)))
}

func journalsDir(data string) string {
	return filepath.Join(data, "__cluster", "__transactions_journal")
}

// NodeJournalDirs lists every broker's journal on data, whatever the cluster's size is
// now: a broker beyond a shrunk cluster's size, or one that was killed, may still hold
// the newest records of ids that others coordinate now.
func NodeJournalDirs(fsys storage.FS, data string) ([]string, error) {
	names, err := fsys.ReadDirNames(journalsDir(data))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", journalsDir(data), err)
	}
	var out []string
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, "node-"); ok {
			if _, err := strconv.ParseUint(rest, 10, 31); err == nil {
				out = append(out, filepath.Join(journalsDir(data), n))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// savedFile is an id file's content.
type savedFile struct {
	Seq  uint64 `json:"seq"`
	Meta *Meta  `json:"meta"`
}

// saveID writes m (recorded at seq) as id's file, or removes the file of a Dead id.
func saveID(fsys storage.FS, dir string, m *Meta, seq uint64) error {
	name := offsets.FileName(m.ID)
	if m.State == Dead {
		return storage.RemoveDurably(fsys, dir, name)
	}
	b, err := json.Marshal(savedFile{Seq: seq, Meta: m})
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return storage.WriteFileAtomic(fsys, dir, name, b)
}

// Replayed is what Replay found: every live id's state, and the journal's next
// sequence number.
type Replayed struct {
	States map[string]*Meta
	Next   uint64
	// Unreadable are the id files (names) that could not be read and that no journal
	// record replaced: their ids are refused (COORDINATOR_NOT_AVAILABLE) rather than
	// started afresh, which would forget their producer and an undecided transaction.
	Unreadable map[string]bool
}

// Replay loads the coordinator's state from data's transactions directory (see above),
// before anything is served.
func Replay(fsys storage.FS, data string, log zerolog.Logger) (*Replayed, error) {
	return ReplayDirs(fsys, IDsDir(data), JournalDir(data), log)
}

// ReplayDirs is Replay of the id files in idir and the journal in jdir (a broker of a
// cluster: its own journal, NodeJournalDir). A journal record is taken only when it is
// newer than the id's file (newer: by Version, which grows across brokers), so a
// broker's journal never takes an id back from what a broker that adopted it since has
// saved.
func ReplayDirs(fsys storage.FS, idir, jdir string, log zerolog.Logger) (*Replayed, error) {
	for _, d := range []string{filepath.Dir(idir), jdir, idir} {
		if err := fsys.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("make %s: %w", d, err)
		}
	}
	states := map[string]*Meta{}
	seqs := map[string]uint64{}
	unreadable := map[string]bool{}
	names, err := fsys.ReadDirNames(idir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", idir, err)
	}
	var maxSeq uint64
	for _, name := range names {
		path := filepath.Join(idir, name)
		if strings.HasSuffix(name, storage.TmpSuffix) {
			_ = fsys.Remove(path) // a save a crash cut short; the journal still holds it
			continue
		}
		f, err := readID(fsys, idir, name)
		if err != nil {
			log.Error().Err(err).Str("file", name).Msg("transactional_id_file_unreadable")
			unreadable[name] = true
			continue
		}
		states[f.Meta.ID], seqs[f.Meta.ID] = f.Meta, f.Seq
		maxSeq = max(maxSeq, f.Seq)
	}
	segs, err := segments(fsys, jdir)
	if err != nil {
		return nil, err
	}
	changed, damaged := map[string]bool{}, map[string]bool{}
	for _, s := range segs {
		path := filepath.Join(jdir, s.name)
		b, err := fsys.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		sc := journal.ScanSegment(b, s.first)
		if len(sc.Damaged) > 0 {
			damaged[s.name] = true
			// Records acknowledged and then damaged on disk: their ids keep their last
			// readable state (an operator must look; the coordinator goes on).
			log.Error().Str("segment", path).Int("damaged_ranges", len(sc.Damaged)).Msg("transactions_journal_damaged")
		}
		for _, r := range sc.Records {
			m, err := decode(r.Data)
			if err != nil {
				log.Error().Err(err).Str("segment", path).Uint64("seq", r.Seq).Msg("transactions_journal_record_unreadable")
				continue
			}
			maxSeq = max(maxSeq, r.Seq)
			if !newer(m, r.Seq, states[m.ID], seqs[m.ID], true) {
				continue
			}
			states[m.ID], seqs[m.ID], changed[m.ID] = m, r.Seq, true
			delete(unreadable, offsets.FileName(m.ID)) // rewritten from the record below
		}
		maxSeq = max(maxSeq, sc.Next-1)
	}
	ids := make([]string, 0, len(changed))
	for id := range changed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := saveID(fsys, idir, states[id], seqs[id]); err != nil {
			return nil, fmt.Errorf("save transactional id %s: %w", logs.ID(id), err)
		}
	}
	if len(damaged) > 0 {
		if err := fsys.MkdirAll(journal.QuarantineDir(jdir)); err != nil {
			return nil, fmt.Errorf("make %s: %w", journal.QuarantineDir(jdir), err)
		}
	}
	for _, s := range segs {
		// Every record is in its id's file now; a damaged segment goes to the quarantine
		// directory for an operator to look at.
		if err := journal.DropSegment(fsys, jdir, s.name, damaged[s.name]); err != nil {
			return nil, fmt.Errorf("drop %s: %w", s.name, err)
		}
	}
	if len(segs) > 0 {
		if err := fsys.SyncDir(jdir); err != nil {
			return nil, fmt.Errorf("fsync directory %s: %w", jdir, err)
		}
	}
	for id, m := range states {
		if m.State == Dead {
			delete(states, id)
		}
	}
	if len(segs) > 0 || len(states) > 0 {
		log.Info().Int("transactional_ids", len(states)).Int("replayed", len(ids)).Int("segments", len(segs)).
			Msg("transactions_replayed")
	}
	return &Replayed{States: states, Next: maxSeq + 1, Unreadable: unreadable}, nil
}

// readID reads the id file name of idir.
func readID(fsys storage.FS, idir, name string) (*savedFile, error) {
	path := filepath.Join(idir, name)
	b, err := fsys.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var f savedFile
	if err := json.Unmarshal(b, &f); err != nil || f.Meta == nil {
		return nil, fmt.Errorf("decode %s: bad transaction state file", path)
	}
	if offsets.FileName(f.Meta.ID) != name {
		return nil, fmt.Errorf("decode %s: the file holds another id", path)
	}
	return &f, nil
}

type segment struct {
	name  string
	first uint64
}

// segments lists jdir's journal segments, oldest first.
func segments(fsys storage.FS, jdir string) ([]segment, error) {
	names, err := fsys.ReadDirNames(jdir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", jdir, err)
	}
	var out []segment
	for _, n := range names {
		if first, ok := journal.ParseSegmentName(n); ok {
			out = append(out, segment{n, first})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}
