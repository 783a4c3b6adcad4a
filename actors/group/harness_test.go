package group

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/logs/logtest"
	"kaas/storage"
)

// harness drives a groups manager with real offsets actors on the broker's offsets
// journal, wired as the broker wires them over a data dir, without sockets. Inside a
// synctest bubble its timers run on the fake clock.
type harness struct {
	t       *testing.T
	sys     *actor.System
	mgr     *actor.PID
	journal *actor.PID
	cfg     ManagerConfig
	dir     string
	seq     atomic.Int64
	logs    *logtest.Sink
	// checkpoint, set before the first request, is the offsets actors'
	// CheckpointInterval (0: the default).
	checkpoint time.Duration
	// offsetsIdle, set before the first request, is the offsets actors' IdleAfter (0:
	// they never passivate).
	offsetsIdle time.Duration
	// offsetsMetrics, set before the first request, is the offsets actors' Metrics.
	offsetsMetrics *offsets.Metrics
}

func testSettings() Settings {
	return Settings{
		InitialRebalanceDelay: 3 * time.Second,
		MinSessionTimeout:     10 * time.Millisecond,
		MaxSessionTimeout:     30 * time.Minute,
		MaxSize:               1 << 30,
		IdlePassivation:       5 * time.Minute,
		OffsetsRetention:      24 * time.Hour,
		RetentionCheck:        10 * time.Minute,
	}
}

func newHarness(t *testing.T, dir string, mutate func(*Settings)) *harness {
	return newHarnessFS(t, dir, storage.OSFS{}, mutate)
}

// newHarnessFS is newHarness with the offsets actors' and the journal's files on fsys (a
// FaultFS to fail or hold writes). dir is the data dir: as at a broker's start, the
// journal left there by an earlier harness is replayed before anything serves.
func newHarnessFS(t *testing.T, dir string, fsys storage.FS, mutate func(*Settings)) *harness {
	return newHarnessWith(t, dir, fsys, mutate, nil)
}

// newHarnessWith is newHarnessFS with the manager's config tuned by tune before it starts.
func newHarnessWith(t *testing.T, dir string, fsys storage.FS, mutate func(*Settings), tune func(*ManagerConfig)) *harness {
	s := testSettings()
	if mutate != nil {
		mutate(&s)
	}
	sink := &logtest.Sink{}
	log := zerolog.New(sink).Level(zerolog.InfoLevel)
	h := &harness{t: t, dir: dir, logs: sink}
	odir, jdir := offsets.Dir(dir), offsets.JournalDir(dir, 0)
	replayed, err := offsets.Replay(offsets.ReplayConfig{FS: fsys, OffsetsDir: odir, JournalDir: jdir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	h.sys = actor.NewSystem(zerolog.Nop())
	// Segments small enough to zero-fill quickly.
	h.journal, err = h.sys.SpawnNamed(journal.Props(journal.Config{
		Dir: jdir, FS: fsys, Log: log, Recovered: replayed, SegmentBytes: 64 << 10,
		Save: offsets.GroupFileSaver(fsys, odir),
	}), "offsets-journal")
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = ManagerConfig{
		Settings: s,
		Offsets: func(group string) *actor.Props {
			return offsets.Props(offsets.Config{Group: group, Dir: odir, FS: fsys, Log: log, Journal: h.journal,
				CheckpointInterval: h.checkpoint, IdleAfter: h.offsetsIdle, Metrics: h.offsetsMetrics})
		},
		ListGroupIDs: func() ([]string, error) { return offsets.ListGroupIDs(fsys, odir) },
		ReadMeta: func(group string) (offsets.GroupMeta, bool, error) {
			return offsets.ReadMeta(fsys, odir, group)
		},
		Log:   log,
		NewID: func() string { return "id" + itoa(int(h.seq.Add(1))) },
	}
	if tune != nil {
		tune(&h.cfg)
	}
	pid, err := h.sys.SpawnNamed(ManagerProps(h.cfg), "groups")
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = pid
	return h
}

// stop releases every group and stops the manager, then the journal, as the broker
// does, and the system.
func (h *harness) stop() {
	w := h.sys.NewWaiter()
	h.sys.Send(h.mgr, &Release{Keep: func(string) bool { return false }, Reply: w.Promise})
	if _, ok := w.Wait(time.Minute); !ok {
		h.t.Errorf("release every group: no answer")
	}
	if err := h.sys.Poison(h.mgr, time.Minute); err != nil {
		h.t.Errorf("stop: %v", err)
	}
	if err := h.sys.Poison(h.journal, time.Minute); err != nil {
		h.t.Errorf("stop the journal: %v", err)
	}
	h.sys.Shutdown()
}

// bubble runs f in a synctest bubble with a fresh harness.
func bubble(t *testing.T, mutate func(*Settings), f func(t *testing.T, h *harness)) {
	dir := t.TempDir()
	actortest.Bubble(t, func(t *testing.T) {
		h := newHarness(t, dir, mutate)
		f(t, h)
		h.stop()
	})
}

// send sends r to the manager with a waiter as its reply.
func (h *harness) send(r Request) *actor.Waiter {
	w := h.sys.NewWaiter()
	h.sys.Send(h.mgr, r.withReply(w.Promise))
	return w
}

// call sends r and waits (on the fake clock) for its answer.
func call[T any](h *harness, r Request) T {
	h.t.Helper()
	v, ok := h.send(r).Wait(time.Hour)
	if !ok {
		h.t.Fatalf("%T: no answer", r)
	}
	return v.(T)
}

func get[T any](t *testing.T, w *actor.Waiter) T {
	t.Helper()
	v, ok := w.Wait(time.Hour)
	if !ok {
		t.Fatal("no answer")
	}
	return v.(T)
}

// answered says whether w has an answer once everything else has settled (no time passes).
func answered(w *actor.Waiter) bool {
	synctest.Wait()
	select {
	case v := <-w.C:
		w2 := make(chan any, 1)
		w2 <- v
		w.C = w2
		return true
	default:
		return false
	}
}

func joinMsg(g, member string, session, rebalance time.Duration) *JoinGroup {
	return &JoinGroup{
		Group: g, MemberID: member, ClientID: "c", ClientHost: "/127.0.0.1",
		SessionTimeout: session, RebalanceTimeout: rebalance, ProtocolType: "consumer",
		Protocols: []Protocol{{Name: "range"}},
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// liveActors counts the manager's live group actors.
func (h *harness) liveActors() int {
	w := h.sys.NewWaiter()
	h.sys.Send(h.mgr, &countLive{reply: w.Promise})
	v, ok := w.Wait(time.Minute)
	if !ok {
		h.t.Fatal("the groups manager did not count its groups")
	}
	return v.(int)
}

// list asks the manager for ListGroups.
func (h *harness) list() *Listing {
	w := h.sys.NewWaiter()
	h.sys.Send(h.mgr, &ListGroups{Reply: w.Promise})
	v, ok := w.Wait(time.Hour)
	if !ok {
		h.t.Fatal("no listing")
	}
	return v.(*Listing)
}

// holdJournalWrites makes every write to the offsets journal on fsys wait until hold is
// closed; held gets a value as the first of them (or one after a drained one) starts.
func holdJournalWrites(fsys *storage.FaultFS) (hold, held chan struct{}) {
	hold, held = make(chan struct{}), make(chan struct{}, 1)
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpWrite && strings.Contains(path, "__offsets_journal") {
			select {
			case held <- struct{}{}:
			default:
			}
			<-hold
		}
		return nil
	})
	return hold, held
}
