package offsets

import (
	"slices"
	"sync"

	"kaas/storage"
)

// Pending is what a start that leaves the group files behind (ReplayConfig.Behind) tells
// the readers of the offsets directory: the groups whose file is not written yet, and
// their metadata. The listings of groups (ListGroups, the retention sweep, a deleted
// topic's offsets) and ReadMeta see such a group as if its file were there. Safe for any
// goroutine; the offsets journal forgets a group once its file is written
// (journal.Config.Saved).
type Pending struct {
	mu     sync.Mutex
	groups map[string]GroupMeta
	gone   map[string]bool // deleted by the journal's records: the file still there is not listed
}

// NewPending makes an empty Pending.
func NewPending() *Pending { return &Pending{groups: map[string]GroupMeta{}, gone: map[string]bool{}} }

// reserve makes room for n groups before a start adds them (a map grown one group at a
// time rehashes all of them again and again).
func (p *Pending) reserve(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if len(p.groups) == 0 {
		p.groups = make(map[string]GroupMeta, n)
	}
	p.mu.Unlock()
}

func (p *Pending) add(group string, meta GroupMeta, exists bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if exists {
		p.groups[group] = meta
	} else {
		p.gone[group] = true
	}
	p.mu.Unlock()
}

// Forget drops group: its file is written (or removed).
func (p *Pending) Forget(group string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.groups, group)
	delete(p.gone, group)
	p.mu.Unlock()
}

// Meta is group's metadata while its file is not written; false when it is (or when the
// group is deleted and its file not removed yet).
func (p *Pending) Meta(group string) (GroupMeta, bool) {
	if p == nil {
		return GroupMeta{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.groups[group]
	return m, ok
}

// ListGroupIDs is offsets.ListGroupIDs of dir with the groups of p (nil: none), sorted.
func (p *Pending) ListGroupIDs(fsys storage.FS, dir string) ([]string, error) {
	ids, err := ListGroupIDs(fsys, dir)
	if err != nil || p == nil {
		return ids, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.groups) == 0 && len(p.gone) == 0 {
		return ids, nil
	}
	ids = slices.DeleteFunc(ids, func(g string) bool { return p.gone[g] })
	for g := range p.groups {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// ReadMeta is offsets.ReadMeta, and for a group whose file is not written yet, the
// metadata p holds.
func (p *Pending) ReadMeta(fsys storage.FS, dir, group string) (GroupMeta, bool, error) {
	if p != nil {
		p.mu.Lock()
		gone := p.gone[group]
		p.mu.Unlock()
		if gone {
			return GroupMeta{}, false, nil
		}
	}
	m, ok, err := ReadMeta(fsys, dir, group)
	if err != nil || ok {
		return m, ok, err
	}
	if m, ok := p.Meta(group); ok {
		return m, true, nil
	}
	return m, false, nil
}
