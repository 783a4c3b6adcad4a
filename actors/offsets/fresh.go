package offsets

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"strings"
	"sync"

	"kaas/actors/journal"
	"kaas/storage"
)

// Fresh knows, in a broker alone, which groups have never had state: no file or
// tombstone in the offsets directory, nothing the start's replay left to the journal,
// and no actor since the start. The groups manager asks it once as it spawns a group's
// actor (Take); a fresh group's actors load nothing, and its first commit goes straight
// to a journal batch instead of waiting, in series, for the journal's claim and a look
// at a file that cannot be there.
//
// What it is sure of: a broker alone is the only writer of its offsets directory and of
// its journal while it runs, and every group that gets state after the start gets it
// through its actors, which the manager spawns only after asking Take, which remembers
// the group for good. In a cluster a peer writes groups' files and hands its journal's
// records over (adopt.go): a cluster has no Fresh, and every group loads.
//
// Groups are kept as 64-bit hashes of their file names (so two ids that share a file
// name, a long id's hash, are one): a collision only makes a fresh group load, as if
// it were not, which costs what it costs without Fresh. Past maxFresh groups remembered
// it stops answering true (see Take), so a broker serving ever new group ids keeps at
// most that many hashes.
type Fresh struct {
	seed  maphash.Seed
	mu    sync.Mutex
	known map[uint64]struct{}
	full  bool
}

// maxFresh bounds the groups a Fresh remembers: about 20 bytes each, 20 MB at most.
const maxFresh = 1 << 20

// NewFresh lists the offsets directory dir (after the start's replay) and takes the
// groups the replay left to the journal (rec: its unsaved states, held groups and the
// groups pinning its segments).
func NewFresh(fsys storage.FS, dir string, rec *journal.Recovered) (*Fresh, error) {
	if fsys == nil {
		fsys = storage.OSFS{}
	}
	names, err := fsys.ReadDirNames(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	f := &Fresh{seed: maphash.MakeSeed(), known: make(map[uint64]struct{}, len(names))}
	for _, n := range names {
		n = strings.TrimSuffix(n, tmpSuffix)
		stem, ok := strings.CutSuffix(n, fileSuffix)
		if !ok {
			if stem, ok = strings.CutSuffix(n, tombSuffix); !ok {
				continue // not a group's: no load reads it
			}
		}
		f.known[f.hash(stem)] = struct{}{}
	}
	if rec != nil {
		for _, u := range rec.Unsaved {
			f.remember(u.Key)
		}
		for g := range rec.Held {
			f.remember(g)
		}
		for _, s := range rec.Kept {
			for g := range s.Keys {
				f.remember(g)
			}
		}
	}
	f.full = len(f.known) >= maxFresh
	return f, nil
}

func (f *Fresh) hash(stem string) uint64 { return maphash.String(f.seed, stem) }

func (f *Fresh) remember(group string) { f.known[f.hash(encodeID(group))] = struct{}{} }

// Take reports whether group never had state, and remembers it: it answers true at most
// once per group (the spawn of its first actor). Nil answers false. Safe for any
// goroutine.
func (f *Fresh) Take(group string) bool {
	if f == nil {
		return false
	}
	h := f.hash(encodeID(group))
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.known[h]; ok {
		return false
	}
	if f.full {
		return false // every group ever taken is not remembered any more
	}
	f.known[h] = struct{}{}
	f.full = len(f.known) >= maxFresh
	return true
}
