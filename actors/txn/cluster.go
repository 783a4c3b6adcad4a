package txn

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/logs"
	"kaas/storage"
)

// In a cluster every broker runs a coordinator for the transactional ids the ownership
// controller gives it (cluster.State.Txn, routed as groups are), with its own journal
// (NodeJournalDir) and the id files shared by all (IDsDir) on the shared volume:
//
//   - the manager serves only the ids Owns gives it (NOT_COORDINATOR for the others);
//   - Release stops the ids this broker no longer owns: each writes nothing more, saves
//     its file and stops, before the controller publishes that it let them go;
//   - Adopt brings the files of the ids it gains up to date with every broker's journal
//     (a broker that lost its lease could not save them), then Load starts their actors:
//     a Prepare* is driven to its Complete*, an Ongoing keeps its deadline, as after a
//     restart. Only then does the controller let clients reach them.
//
// Records are ordered across journals by Meta.Version, which only grows as an id moves.

// AdoptConfig is what Adopt needs.
type AdoptConfig struct {
	FS storage.FS
	// IDsDir holds the id files; JournalDirs are the brokers' journals (this one's
	// too: after a lapsed lease is taken again, its ids come back with what its journal
	// holds past their files).
	IDsDir      string
	JournalDirs []string
	// Owns says whether this broker coordinates an id now.
	Owns func(id string) bool
	Log  zerolog.Logger
}

// Adopt writes, for every id Owns gives this broker, the newest record the peers'
// journals hold of it when it is newer than the id's file, and returns how many files
// it wrote. An id whose file cannot be read is left as it is (logged): Load refuses it.
func Adopt(cfg AdoptConfig) (int, error) {
	fsys := cfg.FS
	if fsys == nil {
		fsys = storage.OSFS{}
	}
	latest := map[string]*Meta{}
	for _, dir := range cfg.JournalDirs {
		segs, err := segments(fsys, dir)
		if err != nil {
			return 0, err
		}
		for _, s := range segs {
			path := filepath.Join(dir, s.name)
			b, err := fsys.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue // dropped by its broker since it was listed: its files hold it
			}
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", path, err)
			}
			sc := journal.ScanSegment(b, s.first)
			if len(sc.Damaged) > 0 {
				cfg.Log.Error().Str("segment", path).Int("damaged_ranges", len(sc.Damaged)).Msg("transactions_peer_journal_damaged")
			}
			for _, r := range sc.Records {
				m, err := decode(r.Data)
				if err != nil || m.Version == 0 || !cfg.Owns(m.ID) {
					continue
				}
				if cur := latest[m.ID]; cur == nil || m.Version > cur.Version {
					latest[m.ID] = m
				}
			}
		}
	}
	ids := make([]string, 0, len(latest))
	for id := range latest {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	n := 0
	for _, id := range ids {
		m := latest[id]
		f, err := readID(fsys, cfg.IDsDir, offsets.FileName(id))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			cfg.Log.Error().Err(err).Str("transactional_id", logs.ID(id)).Msg("transactional_id_not_adopted_file_unusable")
			continue
		case !newer(m, 0, f.Meta, f.Seq, false):
			continue
		}
		if err := saveID(fsys, cfg.IDsDir, m, 0); err != nil {
			return n, fmt.Errorf("adopt transactional id %s: %w", logs.ID(id), err)
		}
		n++
		cfg.Log.Info().Str("transactional_id", logs.ID(id)).Uint64("version", m.Version).Str("state", m.State.String()).
			Msg("transactional_id_adopted_from_peer_journal")
	}
	return n, nil
}

// Load has the manager start an actor for every id Owns gives this broker that has a
// file and runs nowhere here yet, and answers (Reply) nil once they run, or the error
// that kept the files from being listed. An id whose file cannot be read is not started,
// and its requests get COORDINATOR_NOT_AVAILABLE until a later Load reads it.
type Load struct {
	Owns  func(id string) bool
	Reply actor.Promise
}

// Release has the manager stop every id Keep does not keep: each writes nothing more,
// saves its file and stops. Reply is resolved once they all have.
type Release struct {
	Keep  func(id string) bool
	Reply actor.Promise
}

// loaded is a Load's files, read off the manager's turn.
type loaded struct {
	metas      []*Meta
	unreadable map[string]bool // file names
	err        error
	reply      actor.Promise
}

// adoptGap is how far past the loaded record an adopting broker's first record is
// numbered, less one (see onLoaded).
const adoptGap = 2

// releaseID tells an id's actor it is released.
type releaseID struct{}

func (mg *manager) handleLoad(ctx actor.Context, l *Load) {
	fsys, dir, log := mg.cfg.FS, mg.cfg.Dir, mg.log
	actor.Background(ctx, func() any {
		out := &loaded{unreadable: map[string]bool{}, reply: l.Reply}
		names, err := fsys.ReadDirNames(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return out
		}
		if err != nil {
			out.err = fmt.Errorf("list %s: %w", dir, err)
			return out
		}
		for _, name := range names {
			if strings.HasSuffix(name, storage.TmpSuffix) {
				continue
			}
			f, err := readID(fsys, dir, name)
			if err != nil {
				log.Error().Err(err).Str("file", name).Msg("transactional_id_file_unreadable")
				out.unreadable[name] = true
				continue
			}
			if f.Meta.State != Dead && l.Owns(f.Meta.ID) {
				out.metas = append(out.metas, f.Meta)
			}
		}
		return out
	})
}

func (mg *manager) onLoaded(ctx actor.Context, l *loaded) {
	if l.err == nil {
		mg.unreadable = l.unreadable
		sort.Slice(l.metas, func(i, j int) bool { return l.metas[i].ID < l.metas[j].ID })
		started := 0
		for _, m := range l.metas {
			if mg.ids[m.ID] != nil {
				continue // running here already (owned before, or made since)
			}
			// The broker that held the id may have had one more write of it in its
			// journal when its lease lapsed, unanswered (two records, when a Complete*
			// and the next Ongoing went in one frame): this broker's records start past
			// them, so that no record it answers for ever ties with one of those.
			m.Version += adoptGap
			if _, err := mg.spawn(ctx, m.ID, m); err != nil {
				l.err = fmt.Errorf("start transactional id %s: %w", logs.ID(m.ID), err)
				break
			}
			started++
		}
		if started > 0 {
			mg.log.Info().Int("transactional_ids", started).Msg("transactional_ids_loaded")
		}
	}
	if l.reply.Valid() {
		l.reply.Resolve(l.err)
	}
}

func (mg *manager) handleRelease(ctx actor.Context, r *Release) {
	n := 0
	for _, e := range mg.ids {
		if e.stopping || r.Keep(e.id) {
			continue
		}
		e.stopping = true
		mg.releasing[e.pid.Id] = true
		ctx.Send(e.pid, &releaseID{})
		n++
	}
	if n > 0 {
		mg.log.Info().Int("transactional_ids", n).Msg("transactional_ids_releasing")
	}
	if r.Reply.Valid() {
		mg.releaseReplies = append(mg.releaseReplies, r.Reply)
	}
	mg.releaseSettled()
}

// releaseSettled answers the releases once no released actor is left.
func (mg *manager) releaseSettled() {
	if len(mg.releasing) > 0 {
		return
	}
	for _, p := range mg.releaseReplies {
		p.Resolve(nil)
	}
	mg.releaseReplies = nil
}

// onRelease stops the id here: nothing more is written, queued and parked requests get
// NOT_COORDINATOR, and once the transition under way (if any) has ended, the file is
// saved and the actor stops. A save that fails leaves the state in this broker's
// journal, which the adopting broker reads (Adopt).
func (a *txnActor) onRelease(ctx actor.Context) {
	if a.releasing {
		return
	}
	a.releasing = true
	a.halt()
	a.finishRelease(ctx)
}

// finishRelease stops a released actor once nothing of it is under way.
func (a *txnActor) finishRelease(ctx actor.Context) {
	if !a.releasing || a.busy || a.saving {
		return
	}
	if a.meta != nil && !a.dead && a.seq > a.savedSeq && !a.releaseSaved {
		a.releaseSaved = true
		a.save(ctx)
		return
	}
	ctx.Stop(ctx.Self())
}
