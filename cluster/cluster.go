// Package cluster decides which groups and partitions this broker serves, and hands them
// over between brokers without two ever writing one.
//
// Routing (registry) says who should own a key; the controller turns that into who may
// serve it. It applies a view — the alive set it routes by: the registry's alive
// brokers whose leases (fence) have not lapsed — in three steps:
//
//  1. release: the groups and partitions this broker owned under the old view and not
//     under the new one are stopped (their files written, while the lease is valid);
//  2. publish: the view is written to <data.dir>/__cluster/nodes/broker-<id>.view;
//  3. adopt: only then, and only for a key no live peer's published view gives to that
//     peer, does it serve what it gained — after replaying the peers' offsets journals
//     into the files of the groups it adopts.
//
// Each broker publishes before it reads its peers, so of two brokers that both think
// they own a key, the second to publish sees the first's claim and waits until the first
// has released it (or lapsed). A broker whose lease lapses (Term changes) releases
// everything without writing and starts over.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"kaas/fence"
	"kaas/registry"
	"kaas/storage"
)

// Hooks are what the controller asks of the broker.
type Hooks struct {
	// Release stops every group and partition for which keep is false and returns once
	// they have stopped (or the context ends).
	Release func(ctx context.Context, keep *State) error
	// Adopt brings the files of what st newly lets this broker serve up to date with the
	// peers' offsets journals, before anything of it is served.
	Adopt func(st *State) error
}

// Config configures a controller.
type Config struct {
	Registry *registry.Registry
	Fence    fence.Fence
	Dir      string // <data.dir>/__cluster/nodes
	Hooks    Hooks
	Log      zerolog.Logger
	// Poll is how often peers' views are read again (default 200 ms).
	Poll time.Duration
	// ReleaseTimeout bounds a release (default 10 s).
	ReleaseTimeout time.Duration
	// OnApplied is told every state the controller publishes (metrics, tests).
	OnApplied func(*State)
	// Keys lists the groups and partitions the broker knows of; each applied state is
	// compared with the one before it over them, and Moves counts what this broker
	// started and stopped serving (nil: nothing is counted).
	Keys func() Keys
	// Moves is kaas_ownership_moves_total, by kind (group, partition) and direction
	// (adopted, released).
	Moves *prometheus.CounterVec
}

// Keys are the groups and partitions ownership moves are counted over.
type Keys struct {
	Groups     []string
	Partitions []Partition
}

// Partition is one topic-partition.
type Partition struct {
	Topic     string
	Partition int32
}

// Controller is the ownership controller of one broker.
type Controller struct {
	cfg   Config
	self  int32
	state atomic.Pointer[State]
	kick  chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
	moves  atomic.Uint64
	// served is the last state counted for Moves (the loop's own; nil before the first,
	// which is no move).
	served *State
	// dirMade: Dir exists (the loop's own; the file fence makes it, the kubernetes one
	// does not).
	dirMade bool
	// pub is what this broker's view file holds (the loop's own; nil before the first
	// publish that succeeded).
	pub *publishedView
}

// State is one applied ownership state: immutable, shared by every connection.
type State struct {
	View  registry.View
	Term  uint64
	Ready bool // a view has been applied and published
	// also, during a release, is the view being left: a key is served only if both
	// give it to this broker.
	also *registry.View
	// peers are the views the peers published (alive sets), read after this broker
	// published View; lapsed peers are left out.
	peers map[int32]registry.View
	gate  func(term uint64) bool
}

// Status is what a broker may do with a key.
type Status int

const (
	// Unavailable: no view yet, or no broker alive (COORDINATOR_NOT_AVAILABLE).
	Unavailable Status = iota
	// Elsewhere: another broker owns the key (NOT_COORDINATOR, with Owner).
	Elsewhere
	// Waiting: this broker owns the key but a peer has not released it yet
	// (COORDINATOR_LOAD_IN_PROGRESS).
	Waiting
	// Mine: this broker serves the key.
	Mine
)

func (s *State) status(owner int32, ok bool, claims func(v registry.View) bool) (int32, Status) {
	if s == nil || !s.Ready || !ok {
		return owner, Unavailable
	}
	if owner != s.View.Self {
		return owner, Elsewhere
	}
	if s.also != nil && !claims(*s.also) {
		// Being released: the old view gave it elsewhere.
		return owner, Waiting
	}
	for _, pv := range s.peers {
		if claims(pv) {
			return owner, Waiting
		}
	}
	return owner, Mine
}

// Group says who coordinates group g and what this broker may do with it.
func (s *State) Group(g string) (int32, Status) {
	if s == nil {
		return 0, Unavailable
	}
	owner, ok := s.View.GroupOwner(g)
	return s.status(owner, ok, func(v registry.View) bool {
		o, ok := v.GroupOwner(g)
		return ok && o == v.Self
	})
}

// Txn says who coordinates transactional id t.
func (s *State) Txn(t string) (int32, Status) {
	if s == nil {
		return 0, Unavailable
	}
	owner, ok := s.View.TxnOwner(t)
	return s.status(owner, ok, func(v registry.View) bool {
		o, ok := v.TxnOwner(t)
		return ok && o == v.Self
	})
}

// Partition says who leads (topic, partition) and what this broker may do with it.
func (s *State) Partition(topic string, p int32) (int32, Status) {
	if s == nil {
		return 0, Unavailable
	}
	owner, ok := s.View.PartitionOwner(topic, p)
	return s.status(owner, ok, func(v registry.View) bool {
		o, ok := v.PartitionOwner(topic, p)
		return ok && o == v.Self
	})
}

// PartitionReplica is the broker the applied view gives (topic, p), whether or not it
// serves it yet (Metadata's replica list), or -1 without a view.
func (s *State) PartitionReplica(topic string, p int32) int32 {
	owner, st := s.Partition(topic, p)
	if st == Unavailable {
		return -1
	}
	return owner
}

// PartitionLeader is the leader Metadata names for (topic, p), or -1 while none serves
// it: while this broker waits for a peer to let it go, and, for another broker's
// partition, until that broker's published view claims it and no other live peer's
// does. Clients told "no leader" (LEADER_NOT_AVAILABLE) ask again within moments; told a
// leader that does not serve the partition yet, they wait out their metadata age.
func (s *State) PartitionLeader(topic string, p int32) int32 {
	owner, st := s.Partition(topic, p)
	switch st {
	case Mine:
		return owner
	case Elsewhere:
		for id, pv := range s.peers {
			o, ok := pv.PartitionOwner(topic, p)
			claims := ok && o == id
			if id == owner && !claims || id != owner && claims {
				return -1
			}
		}
		if _, ok := s.peers[owner]; !ok {
			return -1
		}
		return owner
	}
	return -1
}

// Alive reports whether broker id is in the view this state routes by (a broker alone,
// nil state: every id).
func (s *State) Alive(id int32) bool {
	if s == nil || !s.Ready {
		return true
	}
	return id == s.View.Self || s.View.IsAlive(id)
}

// Settled reports whether ownership has come to rest: a view is applied, nothing is
// being released, and every other broker in its alive set has published the same alive
// set and size, so no key is waiting on a peer or about to move (a start, a join or a
// departure is over everywhere this broker can see). /readyz?settled answers it.
func (s *State) Settled() bool {
	if s == nil || !s.Ready || s.also != nil {
		return false
	}
	for _, id := range s.View.Alive {
		if id == s.View.Self {
			continue
		}
		pv, ok := s.peers[id]
		if !ok || pv.Size != s.View.Size || !slices.Equal(pv.Alive, s.View.Alive) {
			return false
		}
	}
	return true
}

// OwnsGroup reports whether this broker serves group g in this state.
func (s *State) OwnsGroup(g string) bool { _, st := s.Group(g); return st == Mine }

// OwnsTxn reports whether this broker coordinates transactional id t in this state.
func (s *State) OwnsTxn(t string) bool { _, st := s.Txn(t); return st == Mine }

// OwnsPartition reports whether this broker serves (topic, p) in this state.
func (s *State) OwnsPartition(topic string, p int32) bool {
	_, st := s.Partition(topic, p)
	return st == Mine
}

// MayWrite reports whether what was loaded under term may still be written and
// acknowledged: the lease is held, valid, and has not been lost since.
func (s *State) MayWrite(term uint64) bool { return s != nil && s.gate(term) }

// New returns a controller; Start runs it.
func New(cfg Config) *Controller {
	if cfg.Poll == 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = 10 * time.Second
	}
	c := &Controller{cfg: cfg, self: cfg.Registry.Self(), kick: make(chan struct{}, 1)}
	return c
}

// State is the state in force (nil before the first view is applied).
func (c *Controller) State() *State { return c.state.Load() }

// Moves counts the views applied after the first (ownership moves).
func (c *Controller) Moves() uint64 { return c.moves.Load() }

// Gate reports whether writes loaded under term may be acknowledged.
func (c *Controller) Gate(term uint64) bool {
	f := c.cfg.Fence
	return f.Term() == term && fence.Valid(f)
}

// Start runs the controller until Stop.
func (c *Controller) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go c.loop(ctx)
}

// Stop ends the loop and joins it.
func (c *Controller) Stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
}

// Kick makes the controller look again now.
func (c *Controller) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) loop(ctx context.Context) {
	defer c.wg.Done()
	sub, unsub := c.cfg.Registry.Subscribe()
	defer unsub()
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		c.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-sub:
			// The registry changed: a peer may have gone (its connection ended). Look at
			// the peers' leases and locks now, so a peer killed -9 is lapsed before the
			// next renewal round and its keys move while clients ask again.
			if ch, ok := c.cfg.Fence.(fence.Checker); ok {
				ch.CheckPeers()
			}
		case <-c.cfg.Fence.Changes():
		case <-c.kick:
		case <-t.C:
		}
	}
}

// wanted is the view this broker should route by now.
func (c *Controller) wanted() (registry.View, uint64, bool) {
	f := c.cfg.Fence
	v := c.cfg.Registry.Snapshot()
	term := f.Term()
	if !c.cfg.Registry.Synced() || !fence.Valid(f) {
		return v, term, false
	}
	alive := v.Alive[:0:0]
	for _, id := range v.Alive {
		if id == c.self || !f.Lapsed(id) {
			alive = append(alive, id)
		}
	}
	// This broker is in the set only where the registry has it alive, as its peers see
	// it: a broker whose endpoint stops serving routes its keys to the same peers the
	// others do and releases them; counting itself in would keep its claim published and
	// leave the peer that now owns them waiting for a release that never comes.
	v.Alive = alive
	return v, term, true
}

func sameView(a, b registry.View) bool {
	return a.Size == b.Size && a.Assign == b.Assign && slices.Equal(a.Alive, b.Alive)
}

func (c *Controller) step(ctx context.Context) {
	cur := c.state.Load()
	v, term, ok := c.wanted()
	log := c.cfg.Log
	if !ok {
		if cur != nil && cur.Ready {
			// The lease is gone (or the registry lost): serve nothing. Nothing can be
			// written anyway (the gate refuses), so the release writes nothing.
			empty := &State{View: cur.View, Term: cur.Term, gate: c.Gate}
			c.state.Store(empty)
			log.Warn().Bool("lease_valid", fence.Valid(c.cfg.Fence)).Msg("ownership_suspended")
			c.release(ctx, empty)
			c.countMoves(empty)
			if c.cfg.OnApplied != nil {
				c.cfg.OnApplied(empty)
			}
		}
		return
	}
	changed := cur == nil || !cur.Ready || cur.Term != term || !sameView(cur.View, v)
	if changed {
		// 1. release what the new view does not keep, serving meanwhile only what the
		// old and the new view both give this broker (nothing after a lost lease).
		if cur != nil && cur.Ready {
			old := cur.View
			both := &State{View: v, Term: term, Ready: cur.Term == term, also: &old, peers: cur.peers, gate: c.Gate}
			c.state.Store(both)
			c.release(ctx, both)
			c.moves.Add(1)
		}
	}
	// 2. publish, until it succeeds: the file is this broker's claim, and peers wait on
	// it to let go of what it released. A failed publish is tried again at the next poll,
	// and nothing is adopted before it lands.
	if changed || c.pub == nil || c.pub.term != term || !sameView(c.pub.view, v) {
		if err := c.publish(v, term); err != nil {
			log.Error().Err(err).Msg("ownership_view_publish_failed")
			return
		}
		c.pub = &publishedView{view: v, term: term}
		changed = true
		log.Info().Ints32("alive", v.Alive).Uint64("term", term).Msg("ownership_view_applied")
	}
	// 3. read the peers (after the publish) and adopt what they have let go.
	peers := c.readPeers(v)
	if !changed && samePeers(cur.peers, peers) {
		return
	}
	next := &State{View: v, Term: term, Ready: true, gate: c.Gate, peers: peers}
	if c.cfg.Hooks.Adopt != nil {
		if err := c.cfg.Hooks.Adopt(next); err != nil {
			log.Error().Err(err).Msg("ownership_adopt_failed_retrying")
			return
		}
	}
	c.countMoves(next) // before the store, so a reader of the state sees it counted
	c.state.Store(next)
	if c.cfg.OnApplied != nil {
		c.cfg.OnApplied(next)
	}
}

// countMoves counts the known keys this broker serves under next and did not under the
// state counted before it (adopted), and the other way round (released). The first
// state is where the broker starts, not a move.
func (c *Controller) countMoves(next *State) {
	prev := c.served
	c.served = next
	if prev == nil || c.cfg.Keys == nil || c.cfg.Moves == nil {
		return
	}
	keys := c.cfg.Keys()
	var gIn, gOut, pIn, pOut int
	for _, g := range keys.Groups {
		switch was, is := prev.OwnsGroup(g), next.OwnsGroup(g); {
		case is && !was:
			gIn++
		case was && !is:
			gOut++
		}
	}
	for _, p := range keys.Partitions {
		switch was, is := prev.OwnsPartition(p.Topic, p.Partition), next.OwnsPartition(p.Topic, p.Partition); {
		case is && !was:
			pIn++
		case was && !is:
			pOut++
		}
	}
	for _, m := range []struct {
		kind, direction string
		n               int
	}{{"group", "adopted", gIn}, {"group", "released", gOut}, {"partition", "adopted", pIn}, {"partition", "released", pOut}} {
		if m.n > 0 {
			c.cfg.Moves.WithLabelValues(m.kind, m.direction).Add(float64(m.n))
		}
	}
}

func samePeers(a, b map[int32]registry.View) bool {
	if len(a) != len(b) {
		return false
	}
	for id, v := range a {
		w, ok := b[id]
		if !ok || !sameView(v, w) {
			return false
		}
	}
	return true
}

// publishedView is what this broker's view file says (the last publish that succeeded).
type publishedView struct {
	view registry.View
	term uint64
}

// published is a broker's view file.
type published struct {
	Broker int32   `json:"broker"`
	Alive  []int32 `json:"alive"`
	Term   uint64  `json:"term"`
	Assign string  `json:"assignment,omitempty"` // a digest of the assignment in force
	// Size is the cluster size the broker hashes over. During a helm upgrade that grows
	// the cluster, brokers still on the old size run beside new ones: a peer's claims are
	// what its own size gives it, not what this broker's would.
	Size int `json:"size,omitempty"`
	// Sum is viewSum of the record (nil in a file of a version before it). A view
	// written over its file in place (a full volume) and cut short is caught by it.
	Sum *uint32 `json:"sum,omitempty"`
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// viewSum is the checksum of a view record: CRC-32C of its JSON without the sum.
func viewSum(p published) uint32 {
	p.Sum = nil
	b, _ := json.Marshal(p)
	return crc32.Checksum(b, crcTable)
}

// decodeView reads a view file: an error when it is not one whole record.
func decodeView(b []byte) (published, error) {
	var p published
	if err := json.Unmarshal(b, &p); err != nil {
		return published{}, err
	}
	if p.Sum != nil && *p.Sum != viewSum(p) {
		return published{}, errors.New("view record checksum mismatch")
	}
	return p, nil
}

func viewName(id int32) string { return "broker-" + strconv.Itoa(int(id)) + ".view" }

func (c *Controller) publish(v registry.View, term uint64) error {
	p := published{Broker: c.self, Alive: v.Alive, Term: term, Assign: v.Assign.Digest(), Size: v.Size}
	sum := viewSum(p)
	p.Sum = &sum
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if !c.dirMade {
		if err := storage.MkdirDurably(storage.OSFS{}, c.cfg.Dir); err != nil {
			return fmt.Errorf("publish view: %w", err)
		}
		c.dirMade = true
	}
	err = storage.WriteFileAtomic(storage.OSFS{}, c.cfg.Dir, viewName(c.self), b)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("publish view: %w", err)
	}
	// A full volume: the write-aside needs a new file; overwriting the existing one
	// needs no new blocks, and a reader that catches it half-written sees the checksum
	// fail and keeps the claims it read before.
	if ierr := overwrite(filepath.Join(c.cfg.Dir, viewName(c.self)), b); ierr != nil {
		return fmt.Errorf("publish view: %w (in place: %w)", err, ierr)
	}
	c.cfg.Log.Warn().Err(err).Msg("ownership_view_published_in_place")
	return nil
}

// overwrite writes data over the existing file at path from its start, padded with
// spaces to the file's length (JSON ignores them), and fdatasyncs it.
func overwrite(path string, data []byte) error {
	old, err := storage.OSFS{}.ReadFile(path)
	if err != nil {
		return err
	}
	if n := len(old) - len(data); n > 0 {
		data = append(slices.Clip(data), bytes.Repeat([]byte{' '}, n)...)
	}
	w, err := storage.OSFS{}.OpenWrite(path)
	if err != nil {
		return err
	}
	if _, err = w.Write(data); err != nil {
		err = fmt.Errorf("write %s: %w", path, err)
	} else if err = w.Datasync(); err != nil {
		err = fmt.Errorf("fdatasync %s: %w", path, err)
	}
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	return err
}

// readPeers reads every live peer's published view. A peer whose lease has lapsed
// claims nothing; one that has published nothing yet claims nothing (it publishes before
// it serves, and will then see this broker's claim); one whose file cannot be read (EIO,
// a write in place cut short) keeps the claims read before, or claims every key. A peer claims what its own cluster
// size gives it (a file that names none is read with this broker's). A peer routing by
// another assignment is taken to claim everything. Peers beyond this broker's size are
// read too while their leases hold: during a `helm upgrade` that shrinks the cluster a
// broker already on the smaller size waits for what a broker being scaled away still
// serves, until it has stopped (its lease released) or lapsed.
func (c *Controller) readPeers(v registry.View) map[int32]registry.View {
	out := map[int32]registry.View{}
	var known map[int32]registry.View
	if cur := c.state.Load(); cur != nil {
		known = cur.peers
	}
	size := v.Size
	ids := make([]int32, 0, size)
	for id := int32(0); int(id) < size; id++ {
		ids = append(ids, id)
	}
	ids = append(ids, c.viewsBeyond(size)...)
	for _, id := range ids {
		if id == c.self || c.cfg.Fence.Lapsed(id) {
			continue
		}
		b, err := storage.OSFS{}.ReadFile(filepath.Join(c.cfg.Dir, viewName(id)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var p published
		if err == nil {
			p, err = decodeView(b)
		}
		if err != nil {
			// Unreadable (EIO, a write in place cut short): unknown, so the claims read
			// before stay in force, or, if none were, it claims every key until it reads.
			if prev, ok := known[id]; ok {
				out[id] = prev
			} else {
				out[id] = registry.View{Self: id, Size: 0}
			}
			continue
		}
		pv := registry.View{Self: id, Size: size, Alive: p.Alive, Assign: v.Assign}
		if p.Size > 0 {
			pv.Size = p.Size
		}
		if p.Assign != v.Assign.Digest() {
			pv = registry.View{Self: id, Size: 0} // claims every key
		}
		out[id] = pv
	}
	return out
}

// viewsBeyond lists the ids of the view files in Dir of brokers at or beyond size.
func (c *Controller) viewsBeyond(size int) []int32 {
	names, err := storage.OSFS{}.ReadDirNames(c.cfg.Dir)
	if err != nil {
		return nil
	}
	var ids []int32
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, "broker-")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(rest, ".view")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(num, 10, 32)
		if err == nil && int(id) >= size && viewName(int32(id)) == n {
			ids = append(ids, int32(id))
		}
	}
	slices.Sort(ids)
	return ids
}

func (c *Controller) release(ctx context.Context, keep *State) {
	if c.cfg.Hooks.Release == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReleaseTimeout)
	defer cancel()
	if err := c.cfg.Hooks.Release(rctx, keep); err != nil {
		c.cfg.Log.Error().Err(err).Msg("ownership_release_incomplete")
	}
}

// Catalogue says which broker writes the topic catalogue (creates, deletes and grows
// topics): the owner of a key no topic can have.
func (s *State) Catalogue() (int32, Status) {
	if s == nil {
		return 0, Unavailable
	}
	owner, ok := s.View.PartitionOwner("", -1)
	return s.status(owner, ok, func(v registry.View) bool {
		o, ok := v.PartitionOwner("", -1)
		return ok && o == v.Self
	})
}

// OwnsCatalogue reports whether this broker writes the catalogue in this state.
func (s *State) OwnsCatalogue() bool { _, st := s.Catalogue(); return st == Mine }
