package offsets

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// ReplayJournal is Replay without metrics, returning only the sequence number the journal
// goes on from (tests). What Replay leaves to the journal (groups whose file could not be
// written, held groups) is dropped; their segments stay and replay again at the next start.
func ReplayJournal(fsys storage.FS, offsetsDir, journalDir string, log zerolog.Logger) (uint64, error) {
	r, err := Replay(ReplayConfig{FS: fsys, OffsetsDir: offsetsDir, JournalDir: journalDir, Log: log})
	if err != nil {
		return 0, err
	}
	return r.Next, nil
}

// ReplayConfig is what Replay needs.
type ReplayConfig struct {
	// FS does the file access; nil is OSFS.
	FS storage.FS
	// OffsetsDir is Dir(data.dir); JournalDir is JournalDir(data.dir, node.id).
	OffsetsDir, JournalDir string
	Log                    zerolog.Logger
	// Metrics is the offsets metrics; nil records nothing.
	Metrics *Metrics
	// Behind leaves the group files to be written after the start: the replayed state of
	// every group goes to the journal (journal.Unsaved, Replayed), whose segments stay
	// pinned until each group's file is written, by the group's actor or by the journal
	// writing it behind (journal.Config.SaveMany). Set for a broker alone, the only reader
	// of its journal; in a cluster a peer taking a group over reads its file, which
	// replay then writes before anything is served.
	Behind bool
	// Pending, with Behind, is told each group whose file exists only in the state left
	// to the journal (nil: no one is).
	Pending *Pending
}

// The hold markers of a damaged segment, in journal.QuarantineDir beside it:
// <segment>.held (the operator removes it) and <segment>.groups.json (the groups it holds).
const (
	heldSuffix   = ".held"
	groupsSuffix = ".groups.json"
)

// Replay brings every group file under the offsets directory up to date with the
// journal, then deletes the journal's segments. The broker runs it at start, before any
// offsets actor exists, so it is the one writer of these files. With Behind (a broker
// alone) it writes none: each group's replayed state goes to the journal
// (journal.Unsaved, Replayed), every segment stays pinned by those groups, and the files
// are written after the start, by the groups' actors or by the journal (SaveMany).
//
// Each group's records are applied in order over its file (see record): a file that was
// checkpointed after some of them gets those set again to what it already holds. A group
// whose file cannot be read or understood keeps its file untouched (the group answers
// COORDINATOR_NOT_AVAILABLE until an operator repairs it) and its records are saved to
// <journalDir>/unapplied/<file>.<unix ms>.log, one JSON record per line, with an error
// logged: the operator can apply them by hand.
//
// A group whose file cannot be written (a full disk) does not stop the start: its state
// goes to the journal (journal.Recovered.Unsaved), which serves it through the group's
// actor and writes the file once it can, and the segments stay until then.
//
// A segment damaged in the middle (journal.ScanSegment: a bad frame with valid frames after it)
// has every valid frame applied; the records in the damaged bytes are lost. Which groups
// they were is not knowable in general, so every group with a record in the segment,
// and every group id still readable in the damaged bytes, is held: it answers
// COORDINATOR_NOT_AVAILABLE until the operator removes quarantine/<segment>.held (read
// again at the next start too). The segment goes to the quarantine directory, never
// away. Error logged, kaas_offsets_journal_corrupt_frames_total counted.
//
// An error (a segment that cannot be read, a record with a good checksum that this
// broker does not understand, a hold marker that cannot be written) stops the broker
// from starting, with the journal left as it was: serving without those offsets would
// move consumers back.
//
// What it returns is what it leaves to the journal actor (journal.Config.Recovered): the
// segments it kept, each pinned by the groups whose files are behind it; those groups'
// state (journal.Unsaved, Data a group file's content or a tombstone); the held groups
// and their markers, with which a group answers COORDINATOR_NOT_AVAILABLE while any of
// them exists; and the sequence number the journal goes on from.
func Replay(cfg ReplayConfig) (*journal.Recovered, error) {
	fsys, journalDir, offsetsDir, log := cfg.FS, cfg.JournalDir, cfg.OffsetsDir, cfg.Log
	if fsys == nil {
		fsys = storage.OSFS{}
	}
	out := &journal.Recovered{Next: 1}
	names, err := fsys.ReadDirNames(journalDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list journal %s: %w", journalDir, err)
	}
	if out.Held, err = readHolds(fsys, journalDir, log); err != nil {
		return nil, err
	}
	type seg struct {
		name    string
		first   uint64
		damaged bool
	}
	var segs []*seg
	for _, n := range names {
		if first, ok := journal.ParseSegmentName(n); ok {
			segs = append(segs, &seg{name: n, first: first})
		} else if strings.HasPrefix(n, journal.SpareMarker) && strings.HasSuffix(n, ".tmp") {
			// A spare segment being zero-filled when the broker stopped.
			if err := fsys.Remove(filepath.Join(journalDir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				log.Warn().Err(err).Str("spare", n).Msg("offsets_journal_spare_cleanup_failed")
			}
		}
	}
	if len(segs) == 0 {
		return out, nil
	}
	sort.Slice(segs, func(i, k int) bool { return segs[i].first < segs[k].first })
	start := time.Now()
	next := uint64(1)
	// Each group's records, in the order the groups first appear: one map lookup a record.
	var order []*groupLog
	logOf := map[string]*groupLog{}
	var slab []groupLog // groupLogs are allocated a block at a time
	total := 0
	for si, s := range segs {
		path := filepath.Join(journalDir, s.name)
		b, err := fsys.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read journal segment %s: %w", path, err)
		}
		sc := journal.ScanSegment(b, s.first)
		if sc.Tail >= 0 {
			log.Warn().Str("segment", s.name).Int("valid_bytes", sc.Tail).Int("size", len(b)).
				Msg("offsets_journal_tail_ignored")
		}
		dec := make([]decodedRecord, len(sc.Records))
		if err := parallel(len(sc.Records), func(i int) error {
			d := &dec[i]
			var err error
			if d.group, d.epoch, d.ops, err = decodeRecordEpoch(sc.Records[i].Data); err != nil {
				return fmt.Errorf("journal segment %s record %d: %w", path, i, err)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for i, r := range sc.Records {
			d := &dec[i]
			gl := logOf[d.group]
			if gl == nil {
				if len(slab) == 0 {
					slab = make([]groupLog, 256)
				}
				gl, slab = &slab[0], slab[1:]
				gl.group = d.group
				logOf[d.group] = gl
				order = append(order, gl)
			}
			gl.add(si, r.Seq, d.epoch, d.ops)
		}
		if len(sc.Damaged) > 0 {
			s.damaged = true
			segGroups := map[string]uint64{}
			for i, r := range sc.Records {
				segGroups[dec[i].group] = r.Seq
			}
			held, err := holdDamaged(fsys, journalDir, s.name, b, sc, segGroups, cfg.Metrics, log)
			if err != nil {
				return nil, err
			}
			for _, g := range held {
				out.Held[g] = append(out.Held[g], filepath.Join(journal.QuarantineDir(journalDir), s.name+heldSuffix))
			}
		}
		total += len(sc.Records)
		next = max(next, sc.Next)
	}
	unapplied, behind := 0, 0
	var written []string
	var writtenGroups []*groupLog
	kept := 0 // groups whose records must stay in the journal (groupLog.keep)
	// The names of the files there are, so that a group with neither file nor tombstone
	// costs no failed open (nil: not listed, every group's file is read).
	present, err := listPresent(fsys, offsetsDir)
	if err != nil {
		return nil, err
	}
	var pre []*replayed
	if cfg.Behind {
		cfg.Pending.reserve(len(order))
		// Nothing is written: every group's state is made on its own, in parallel.
		pre = make([]*replayed, len(order))
		if err := parallel(len(order), func(i int) error {
			var err error
			pre[i], err = replayBehind(fsys, offsetsDir, order[i], present)
			return err
		}); err != nil {
			return nil, err
		}
	}
	for i, gl := range order {
		group := gl.group
		var res replayed
		if pre != nil {
			res = *pre[i]
		} else if res, err = replayGroup(fsys, offsetsDir, group, gl.recs, gl.epochs, &written, present); err != nil {
			return nil, err
		}
		switch {
		case res.behind != nil:
			cfg.Pending.add(group, res.st.meta, res.exists)
			out.Unsaved = append(out.Unsaved, res.behind)
			gl.keep = true
			behind++
		case res.writeErr != nil:
			u, err := unsavedOf(group, res, gl.last)
			if err != nil {
				return nil, err
			}
			out.Unsaved = append(out.Unsaved, u)
			gl.keep = true
			log.Error().Err(res.writeErr).Str("group", logs.ID(group)).Str("file", FileName(group)).
				Msg("offsets_journal_replay_file_write_failed_kept_in_journal")
		case !res.applied:
			unapplied++
			saved, err := saveUnapplied(fsys, journalDir, group, gl.recs, gl.epochs)
			if err != nil {
				// The records stay in the journal (replayed again at the next start).
				gl.keep = true
				log.Error().Err(err).AnErr("file_error", res.readErr).Str("group", logs.ID(group)).Str("file", FileName(group)).
					Msg("offsets_journal_records_not_applied_file_unusable_not_saved_kept_in_journal")
				continue
			}
			log.Error().Err(res.readErr).Str("group", logs.ID(group)).Str("file", FileName(group)).Str("saved_to", saved).
				Int("records", len(gl.recs)).Msg("offsets_journal_records_not_applied_file_unusable")
		default:
			if res.wrote {
				writtenGroups = append(writtenGroups, gl)
			}
		}
	}
	// The files go without an fsync each (a rewrite costs two filesystem journal commits,
	// about 1,000 a second): they are made durable at once here, before the segments that
	// could redo them are deleted. A crash before this replays again.
	if len(written) > 0 {
		if err := storage.SyncWritten(fsys, offsetsDir, written); err != nil {
			// Not durable: every written group stays in the journal and the journal
			// writes its file again.
			log.Error().Err(err).Int("groups", len(writtenGroups)).Msg("offsets_journal_replay_sync_failed_kept_in_journal")
			for _, gl := range writtenGroups {
				res, err := replayGroup(fsys, offsetsDir, gl.group, gl.recs, gl.epochs, nil, present)
				if err != nil {
					return nil, err
				}
				u, err := unsavedOf(gl.group, res, gl.last)
				if err != nil {
					return nil, err
				}
				out.Unsaved = append(out.Unsaved, u)
				gl.keep = true
			}
		}
	}
	out.Next = next
	for _, gl := range order {
		if gl.keep {
			kept++
		}
	}
	if kept > 0 {
		// Every segment stays, pinned by the groups whose files are behind it; the
		// journal lets the others go (oldest first) as soon as it starts.
		pins := make([]int, len(segs))
		for _, gl := range order {
			if gl.keep {
				for _, p := range gl.segs {
					pins[p.seg]++
				}
			}
		}
		out.Kept = make([]journal.KeptSegment, len(segs))
		for i, s := range segs {
			out.Kept[i] = journal.KeptSegment{Name: s.name, Keys: make(map[string]uint64, pins[i]), Damaged: s.damaged}
		}
		for _, gl := range order {
			if gl.keep {
				for _, p := range gl.segs {
					out.Kept[p.seg].Keys[gl.group] = p.seq
				}
			}
		}
		if kept > behind {
			log.Warn().Int("segments", len(segs)).Int("groups", kept).Msg("offsets_journal_segments_kept_for_unwritten_files")
		}
	} else {
		for _, s := range segs {
			if err := journal.DropSegment(fsys, journalDir, s.name, s.damaged); err != nil {
				return nil, err
			}
			if s.damaged {
				cfg.Metrics.quarantinedSegment()
			}
		}
		if err := fsys.SyncDir(journalDir); err != nil {
			return nil, fmt.Errorf("fsync directory %s: %w", journalDir, err)
		}
	}
	log.Info().Int("segments", len(segs)).Int("records", total).Int("groups", len(order)).
		Int("groups_not_applied", unapplied).Int("groups_not_written", kept-behind).Int("groups_written_behind", behind).
		Int("groups_held", len(out.Held)).
		Dur("took_ms", time.Since(start)).Msg("offsets_journal_replayed")
	return out, nil
}

// unsavedOf is the Unsaved of a group whose replayed file could not be written.
func unsavedOf(group string, res replayed, seq uint64) (*journal.Unsaved, error) {
	u, err := newUnsaved(group, res.st, res.exists, seq)
	if err != nil {
		return nil, fmt.Errorf("replay group %q: %w", logs.ID(group), err)
	}
	return u, nil
}

// heldGroups is a hold marker's list of groups, quarantine/<segment>.groups.json.
type heldGroups struct {
	Segment string       `json:"segment"`
	Lost    [][2]uint64  `json:"lost_records"` // [first, last] sequence numbers of each damaged range
	Groups  []jsonString `json:"groups"`
}

// holdDamaged writes the hold marker of a segment damaged in the middle and returns the
// groups it holds: those with valid records in it and those still named in the damaged
// bytes. The list is written before the marker, both durably, so that a crash leaves
// either no marker (the segment is still in place and found damaged again) or both.
func holdDamaged(fsys storage.FS, journalDir, name string, b []byte, sc journal.Scanned, segGroups map[string]uint64, m *Metrics, log zerolog.Logger) ([]string, error) {
	seen := map[string]bool{}
	var groups []string
	add := func(g string) {
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	lost := uint64(0)
	hg := heldGroups{Segment: name}
	for _, d := range sc.Damaged {
		for _, g := range groupsIn(b[d.From:d.To]) {
			add(g)
		}
		lost += d.UpTo - d.Lost
		hg.Lost = append(hg.Lost, [2]uint64{d.Lost, d.UpTo - 1})
	}
	named := make([]string, 0, len(segGroups))
	for g := range segGroups {
		named = append(named, g)
	}
	sort.Strings(named)
	for _, g := range named {
		add(g)
	}
	for _, g := range groups {
		hg.Groups = append(hg.Groups, jsonString(g))
	}
	m.journalCorrupt(len(sc.Damaged))
	dir := journal.QuarantineDir(journalDir)
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(hg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode held groups of %s: %w", name, err)
	}
	if err := storage.WriteFileAtomic(fsys, dir, name+groupsSuffix, data); err != nil {
		return nil, fmt.Errorf("write held groups of damaged journal segment %s: %w", name, err)
	}
	note := fmt.Sprintf("Journal segment %s is damaged in the middle; up to %d acknowledged records are lost.\n"+
		"The groups in %s answer COORDINATOR_NOT_AVAILABLE while this file exists.\n"+
		"Check their offsets (docs/offsets.md), then remove this file.\n", name, lost, name+groupsSuffix)
	if err := storage.WriteFileAtomic(fsys, dir, name+heldSuffix, []byte(note)); err != nil {
		return nil, fmt.Errorf("write hold marker of damaged journal segment %s: %w", name, err)
	}
	log.Error().Str("segment", name).Int("damaged_ranges", len(sc.Damaged)).Uint64("records_lost", lost).
		Int("valid_records", len(sc.Records)).Int("groups_held", len(groups)).Strs("groups", logs.IDs(groups)).
		Str("marker", filepath.Join(dir, name+heldSuffix)).
		Msg("offsets_journal_damaged_mid_segment_groups_held_until_marker_removed")
	return groups, nil
}

// groupsIn reads the group ids that damaged bytes still show: every JSON record starts
// with {"group":"<id>", so each such string that still decodes is taken, and every
// compact record with its length word, the format byte and the id (compactGroupsIn). A
// flipped bit inside an id gives another id (held for nothing) and hides the real one,
// which is why replay also holds every group with records in the damaged segment.
func groupsIn(b []byte) []string {
	const prefix = `{"group":`
	seen := map[string]bool{}
	var out []string
	for _, g := range compactGroupsIn(b) {
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	for {
		i := bytes.Index(b, []byte(prefix))
		if i < 0 {
			return out
		}
		b = b[i+len(prefix):]
		var g jsonString
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&g); err == nil && !seen[string(g)] {
			seen[string(g)] = true
			out = append(out, string(g))
		}
	}
}

// compactGroupsIn reads the group ids of the compact records that b still shows: a
// record is its length (uint32, big-endian, the record within b), recordCompact, the
// id's length (uvarint) and the id, the epoch and the count of ops (uvarints), and the
// first op's kind, all within the record's length. Bytes inside a record seldom look
// like all of that; a record whose damage is past its first op still names its group.
func compactGroupsIn(b []byte) []string {
	var out []string
	for i := 4; i < len(b); i++ {
		if b[i] != recordCompact {
			continue
		}
		n := uint64(binary.BigEndian.Uint32(b[i-4 : i]))
		if n < 5 || n > uint64(len(b)-i) {
			continue
		}
		r := &compactReader{b: b[i+1 : i+int(n)]}
		g := r.bytes("group")
		r.uvarint("epoch")
		ops := r.uvarint("op count")
		kind := r.byte("op kind")
		if r.err != nil || ops == 0 || ops > n || kind < opSet || kind > opTxnDrop {
			continue
		}
		out = append(out, string(g))
	}
	return out
}

// readHolds reads the hold markers left by earlier starts: each quarantine/<s>.held still
// there holds the groups of quarantine/<s>.groups.json.
func readHolds(fsys storage.FS, journalDir string, log zerolog.Logger) (map[string][]string, error) {
	held := map[string][]string{}
	dir := journal.QuarantineDir(journalDir)
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return held, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		seg, ok := strings.CutSuffix(n, heldSuffix)
		if !ok {
			continue
		}
		b, err := fsys.ReadFile(filepath.Join(dir, seg+groupsSuffix))
		var hg heldGroups
		if err == nil {
			err = json.Unmarshal(b, &hg)
		}
		if err != nil {
			// Without the list the hold cannot be applied; starting would serve offsets
			// that may be older than acknowledged ones.
			return nil, fmt.Errorf("read held groups of %s: %w", filepath.Join(dir, n), err)
		}
		for _, g := range hg.Groups {
			held[string(g)] = append(held[string(g)], filepath.Join(dir, n))
		}
		log.Warn().Str("marker", filepath.Join(dir, n)).Int("groups", len(hg.Groups)).Msg("offsets_journal_hold_marker_still_present")
	}
	return held, nil
}

// replayed is one group's outcome in replayGroup.
type replayed struct {
	applied  bool             // false: the file cannot be read or understood, and is untouched
	readErr  error            // why, when not applied
	newer    bool             // some record was newer than the file's epoch (applied)
	had      bool             // the file existed before the records
	behind   *journal.Unsaved // ReplayConfig.Behind: the state left to the journal
	wrote    bool             // the file was written or removed
	writeErr error            // writing or removing the file failed; st and exists are what it should hold
	st       state
	exists   bool
}

// replayGroup applies recs to group's file (not read when present, the names listed in
// dir, has neither it nor its tombstone); written collects what it wrote (nil: the
// file is not written, only the state computed). A record whose ownership epoch is below
// the file's was written by an owner the group has since moved away from (its successor
// replayed this journal when it took the group over): it is skipped, so a broker that
// returns never moves an offset back over what its successor committed.
func replayGroup(fsys storage.FS, dir, group string, recs [][]op, epochs []uint64, written *[]string, present map[string]bool) (replayed, error) {
	name := FileName(group)
	path := filepath.Join(dir, name)
	st, exists := newState(), false
	if present == nil || present[name] || present[TombstoneName(group)] {
		var err error
		if st, exists, err = readForReplay(fsys, path, group); err != nil {
			return replayed{readErr: err}, nil
		}
	}
	had := exists
	fileEpoch := st.epoch
	applied := 0
	for i, ops := range recs {
		if i < len(epochs) && epochs[i] < fileEpoch {
			continue
		}
		if err := replayOps(&st, &exists, ops); err != nil {
			return replayed{}, fmt.Errorf("replay journal record %d of group %q: %w", i, group, err)
		}
		applied++
	}
	res := replayed{applied: true, st: st, exists: exists, newer: applied > 0, had: had}
	if written == nil || applied == 0 {
		// Nothing of this journal's is newer than the file: the file is left to whoever
		// owns the group now (a rewrite could land over that owner's next checkpoint).
		return res, nil
	}
	if !exists && st.epoch > 0 {
		// A group of a cluster that ceased to exist leaves its tombstone.
		if err := putTombstoneUnsynced(fsys, dir, group, st.epoch, path); err != nil {
			res.writeErr = fmt.Errorf("replay journal for group %q: %w", group, err)
			return res, nil
		}
		*written = append(*written, tombPath(path))
		res.wrote = true
		return res, nil
	}
	if !exists {
		if !had {
			return res, nil
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			res.writeErr = fmt.Errorf("replay journal for group %q: remove %s: %w", group, path, err)
			return res, nil
		}
		*written = append(*written, "") // a removal: the directory fsync makes it durable
		res.wrote = true
		return res, nil
	}
	data, err := encodeFile(group, st)
	if err != nil {
		return replayed{}, err
	}
	if err := fsys.MkdirAll(dir); err != nil {
		res.writeErr = fmt.Errorf("create %s: %w", dir, err)
		return res, nil
	}
	if err := storage.WriteFileUnsynced(fsys, dir, name, data); err != nil {
		res.writeErr = fmt.Errorf("replay journal for group %q: %w", group, err)
		return res, nil
	}
	*written = append(*written, path)
	res.wrote = true
	return res, nil
}

// replayBehind is replayGroup for ReplayConfig.Behind, which writes no file: it reads
// the group's file and checks its records at once, but makes only the meta and whether
// the group exists (what the start's listings need); the offsets are made from the file
// and the records the first time the state left to the journal is needed (its Encode:
// the group's actor claims it, or the journal writes the file behind). A start then costs
// no map of offsets per group.
func replayBehind(fsys storage.FS, dir string, gl *groupLog, present map[string]bool) (*replayed, error) {
	group := gl.group
	name := FileName(group)
	path := filepath.Join(dir, name)
	var base state
	exists := false
	if present == nil || present[name] || present[TombstoneName(group)] {
		var err error
		if base, exists, err = readForReplay(fsys, path, group); err != nil {
			return &replayed{readErr: err}, nil
		}
	}
	had := exists
	light := state{meta: base.meta, epoch: base.epoch}
	newer := 0 // records newer than the file
	for i, ops := range gl.recs {
		if gl.epochs[i] < base.epoch {
			continue
		}
		if err := replayMetaOps(&light, &exists, ops); err != nil {
			return nil, fmt.Errorf("replay journal record %d of group %q: %w", i, group, err)
		}
		newer++
	}
	res := &replayed{applied: true, st: light, exists: exists, newer: newer > 0, had: had}
	if res.newer && (exists || had || light.epoch > 0) {
		res.behind = behindUnsavedLazy(group, exists, light.epoch, gl.last, func() (state, error) {
			st := base
			if st.offsets == nil {
				st = newState()
			}
			x := had
			for i, ops := range gl.recs {
				if gl.epochs[i] < base.epoch {
					continue
				}
				if err := replayOps(&st, &x, ops); err != nil {
					return state{}, fmt.Errorf("replay journal record %d of group %q: %w", i, group, err)
				}
			}
			return st, nil
		})
	}
	return res, nil
}

// saveUnapplied writes a group's records, one JSON record per line whatever the format
// they were journaled in, where the operator can find them.
func saveUnapplied(fsys storage.FS, journalDir, group string, recs [][]op, epochs []uint64) (string, error) {
	dir := filepath.Join(journalDir, "unapplied")
	if err := fsys.MkdirAll(dir); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	name := FileName(group) + "." + strconv.FormatInt(time.Now().UnixMilli(), 10) + ".log"
	var data []byte
	for i, ops := range recs {
		r, err := encodeRecord(group, epochs[i], ops)
		if err != nil {
			return "", fmt.Errorf("save unapplied journal records of group %q: %w", logs.ID(group), err)
		}
		data = append(data, r...)
		data = append(data, '\n')
	}
	if err := storage.WriteFileAtomic(fsys, dir, name, data); err != nil {
		return "", fmt.Errorf("save unapplied journal records of group %q: %w", group, err)
	}
	return filepath.Join(dir, name), nil
}

// readForReplay reads the group file at path for a replay or an adoption: its state, or
// with no file an empty state under the epoch of the group's tombstone, if any. An error:
// the file, or with no file the tombstone, cannot be read or understood, or the file
// holds another group; it is left alone (the group's actor reports it too).
func readForReplay(fsys storage.FS, path, group string) (state, bool, error) {
	st := newState()
	b, err := fsys.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e, ok, err := readTombEpoch(fsys, path)
		if err != nil {
			return st, false, err
		}
		if ok {
			st.epoch = e
		}
		return st, false, nil
	case err != nil:
		return st, false, err
	}
	id, s, err := decodeFile(b)
	if err != nil {
		return st, false, err
	}
	if id != group {
		return st, false, fmt.Errorf("%s holds group %q", path, logs.ID(id))
	}
	return s, true, nil
}

// putTombstoneUnsynced writes group's tombstone under epoch beside its file at path and
// removes the file, for a replay or adoption that makes its writes durable together
// (storage.SyncWritten).
func putTombstoneUnsynced(fsys storage.FS, dir, group string, epoch uint64, path string) error {
	data, err := encodeTombstone(group, epoch, time.Now())
	if err != nil {
		return err
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := storage.WriteFileUnsynced(fsys, dir, TombstoneName(group), data); err != nil {
		return err
	}
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// groupLog is one group's records in the journal, in order.
type groupLog struct {
	group  string
	recs   [][]op
	epochs []uint64 // each record's ownership epoch
	last   uint64   // the sequence number of the last record
	// segs is, for each segment holding records of the group, the sequence number of
	// the last of them: what pins the segment while the group's file is behind.
	segs []segSeq
	keep bool // the records stay in the journal (the group's file is not written)
}

type segSeq struct {
	seg int // index in the sorted segments
	seq uint64
}

func (gl *groupLog) add(seg int, seq, epoch uint64, ops []op) {
	gl.recs = append(gl.recs, ops)
	gl.epochs = append(gl.epochs, epoch)
	gl.last = seq
	if n := len(gl.segs); n > 0 && gl.segs[n-1].seg == seg {
		gl.segs[n-1].seq = seq
	} else {
		gl.segs = append(gl.segs, segSeq{seg: seg, seq: seq})
	}
}

// decodedRecord is one journal record, decoded.
type decodedRecord struct {
	group string
	epoch uint64
	ops   []op
}

// listPresent is the set of names in the offsets directory (empty when there is none);
// nil when it cannot be listed (each file is then read, and reports its own error).
func listPresent(fsys storage.FS, dir string) (map[string]bool, error) {
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, nil //nolint:nilerr // read each file instead
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	return present, nil
}

// parallel runs f(0..n-1) on GOMAXPROCS goroutines it joins, and returns the error of
// the lowest i that failed.
func parallel(n int, f func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				errs[i] = f(i)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
