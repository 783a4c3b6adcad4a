package group

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/storage"
)

// A group that never had state (ManagerConfig.New, offsets.Fresh) loads nothing: its
// first commit asks the journal no claim and looks at no file. A group that has state,
// or had an actor since the start, loads it before answering anything.

// claimCounter stands between the offsets actors and the journal, counting the claims.
type claimCounter struct {
	to     *actor.PID
	claims *atomic.Int64
}

func (c *claimCounter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *journal.Claim:
		c.claims.Add(1)
		ctx.Send(c.to, m)
	default:
		ctx.Send(c.to, m)
	}
}

// freshHarness is a harness wired as a broker alone: the manager knows the groups that
// never had state (the offsets directory once replayed, and each group as it is first
// spawned). claims counts the offsets actors' journal claims; reads, how often they read
// (or clean up beside) the file of a group whose id starts with "g".
type freshHarness struct {
	*harness
	proxy         *actor.PID
	claims, reads atomic.Int64
}

func newFreshHarness(t *testing.T, dir string) *freshHarness {
	fh := &freshHarness{}
	fsys := storage.NewFaultFS(nil)
	odir := offsets.Dir(dir)
	fsys.SetBefore(func(op storage.Op, path string) error {
		if (op == storage.OpRead || op == storage.OpRemove) && filepath.Dir(path) == odir && strings.HasPrefix(filepath.Base(path), "g") {
			fh.reads.Add(1)
		}
		return nil
	})
	config := func(group string) offsets.Config {
		return offsets.Config{Group: group, Dir: odir, FS: fsys, Log: zerolog.Nop(), Journal: fh.proxy,
			CheckpointInterval: fh.checkpoint, IdleAfter: fh.offsetsIdle}
	}
	fh.harness = newHarnessWith(t, dir, fsys, nil, func(c *ManagerConfig) {
		fresh, err := offsets.NewFresh(fsys, odir, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.New = fresh.Take
		c.Offsets = func(group string) *actor.Props { return offsets.Props(config(group)) }
		c.NewOffsets = func(group string) *actor.Props { return offsets.NewKind(config(""), nil).FreshProps(group) }
	})
	proxy, err := fh.sys.SpawnNamed(actor.PropsOf(func() actor.Actor {
		return &claimCounter{to: fh.journal, claims: &fh.claims}
	}), "journal-claims")
	if err != nil {
		t.Fatal(err)
	}
	fh.proxy = proxy
	return fh
}

// A new group's first commit is served without a claim or a look at its file, and what
// it committed is served after its offsets actor passivated (from the file), after its
// group actor passivated, and after a restart.
func TestFreshGroupFirstCommitLoadsNothing(t *testing.T) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := newFreshHarness(t, dir)
		h.checkpoint, h.offsetsIdle = testCheckpoint, testOffsetsIdle
		commitTo(t, h.harness, "g1", 10, 4)
		if c, r := h.claims.Load(), h.reads.Load(); c != 0 || r != 0 {
			t.Fatalf("a new group's first commit: %d journal claims, %d file reads; want none", c, r)
		}
		checkFetch(t, h.harness, "g1", 10, 4)

		// Its offsets actor passivates and comes back from the file, with a claim.
		idleOut()
		if h.offsetsLive("g1") {
			t.Fatal("offsets actor still live after an idle period")
		}
		checkFetch(t, h.harness, "g1", 10, 4)
		if c, r := h.claims.Load(), h.reads.Load(); c != 1 || r == 0 {
			t.Fatalf("offsets actor back after passivation: %d claims, %d reads; want a claim and a read", c, r)
		}

		// A new group that only asks is new too, and is not new any more once seen: its
		// group actor passivates (as g1's does, Empty), and the commit of its next actor
		// loads.
		if f := call[*offsets.FetchResult](h.harness, &FetchOffsets{Group: "g2"}); f.ErrorCode != 0 || len(f.Offsets) != 0 {
			t.Fatalf("fetch of a new group: %+v", f)
		}
		claims := h.claims.Load()
		time.Sleep(testSettings().IdlePassivation + time.Minute)
		if n := h.liveActors(); n != 0 {
			t.Fatalf("%d live group actors after the groups were idle, want none", n)
		}
		commitTo(t, h.harness, "g2", 20, 2)
		if c := h.claims.Load(); c != claims+1 {
			t.Fatalf("a group seen before: %d claims, want %d", c, claims+1)
		}
		checkFetch(t, h.harness, "g2", 20, 2)
		checkFetch(t, h.harness, "g1", 10, 4)
		if c := h.claims.Load(); c != claims+2 {
			t.Fatalf("a group passivated whole: %d claims, want %d", c, claims+2)
		}
		h.stop()
	})
	// After a restart the groups have files: they load, and keep what they committed.
	actortest.Bubble(t, func(t *testing.T) {
		h := newFreshHarness(t, dir)
		checkFetch(t, h.harness, "g1", 10, 4)
		checkFetch(t, h.harness, "g2", 20, 2)
		if c := h.claims.Load(); c != 2 {
			t.Fatalf("groups with files after a restart: %d claims, want 2", c)
		}
		commitTo(t, h.harness, "g3", 30, 1)
		if c := h.claims.Load(); c != 2 {
			t.Fatalf("a new group after a restart: %d claims, want 2", c)
		}
		// A new group's actor restarted after a panic loads what it committed.
		h.sys.Send(h.mgr, &crash{group: "g3"})
		checkFetch(t, h.harness, "g3", 30, 1)
		if c := h.claims.Load(); c != 3 {
			t.Fatalf("a new group's actor restarted: %d claims, want 3", c)
		}
		h.stop()
	})
}
