package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/internal/testwait"
	"kaas/storage"
)

const waitFor = 10 * time.Second

// countMetrics is a Metrics that counts what the journal reports.
type countMetrics struct {
	mu          sync.Mutex
	writes      int
	failed      int
	records     int
	quarantined int
}

func (m *countMetrics) Wrote(err error, _ time.Duration, records int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.failed++
		return
	}
	m.writes++
	m.records += records
}

func (m *countMetrics) Quarantined() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.quarantined++
}

// start spawns a journal on cfg and stops it, then the system, at cleanup.
func start(t *testing.T, cfg Config) (*actor.System, *actor.PID) {
	t.Helper()
	sys := actor.NewSystem(zerolog.Nop())
	pid := sys.Spawn(Props(cfg))
	t.Cleanup(func() {
		if err := sys.Poison(pid, waitFor); err != nil {
			t.Errorf("stop the journal: %v", err)
		}
		sys.Shutdown()
	})
	return sys, pid
}

// ask sends the message mk makes to pid and waits for its answer.
func ask(t *testing.T, sys *actor.System, pid *actor.PID, mk func(actor.Promise) any) any {
	t.Helper()
	w := sys.NewWaiter()
	sys.Send(pid, mk(w.Promise))
	v, ok := w.Wait(waitFor)
	if !ok {
		t.Fatal("no answer")
	}
	return v
}

func appendRecord(t *testing.T, sys *actor.System, pid *actor.PID, key string, data []byte) Appended {
	t.Helper()
	return *ask(t, sys, pid, func(p actor.Promise) any { return &Append{Key: key, Data: data, Reply: p} }).(*Appended)
}

func status(t *testing.T, sys *actor.System, pid *actor.PID) *Status {
	t.Helper()
	st := ask(t, sys, pid, func(p actor.Promise) any { return &Stat{Reply: p} }).(*Status)
	for _, keys := range st.Pinned {
		slices.Sort(keys)
	}
	return st
}

// TestRecordsOpaqueAndPinnedByKey: a record is durable when answered, and on disk as it
// was sent (bytes that are no user's encoding); it pins its segment for its key until a
// Checkpointed of the key covers it, and closed segments go, oldest first, once nothing
// pins them.
func TestRecordsOpaqueAndPinnedByKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	fsys := storage.NewFaultFS(nil)
	m := &countMetrics{}
	sys, pid := start(t, Config{Dir: dir, FS: fsys, Log: zerolog.Nop(), Metrics: m, SegmentBytes: 256})

	var sent [][]byte
	last := map[string]uint64{}
	for i := range 12 {
		key := []string{"a", "b"}[i%2]
		data := append(bytes.Repeat([]byte{0xff, 0x00}, 20), byte(i))
		syncs := fsys.Count(storage.OpSync)
		got := appendRecord(t, sys, pid, key, data)
		if got.Err != nil {
			t.Fatalf("append %d: %v", i, got.Err)
		}
		if got.Seq != uint64(i+1) {
			t.Fatalf("append %d numbered %d", i, got.Seq)
		}
		if fsys.Count(storage.OpSync) == syncs {
			t.Fatalf("append %d answered without an fsync", i)
		}
		sent = append(sent, data)
		last[key] = got.Seq
	}

	// What is on disk is what was sent, in order, each record numbered.
	st := status(t, sys, pid)
	if len(st.Segments) < 3 {
		t.Fatalf("%d segments of 12 records of 41 bytes with SegmentBytes 256", len(st.Segments))
	}
	var read [][]byte
	for _, name := range st.Segments {
		first, ok := ParseSegmentName(name)
		if !ok {
			t.Fatalf("segment name %q", name)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := ScanSegment(b, first)
		if sc.Tail >= 0 || len(sc.Damaged) > 0 {
			t.Fatalf("segment %s scanned as %+v", name, sc)
		}
		for _, r := range sc.Records {
			if r.Seq != uint64(len(read)+1) {
				t.Fatalf("record %d of the journal numbered %d", len(read)+1, r.Seq)
			}
			read = append(read, r.Data)
		}
		if len(st.Pinned[name]) == 0 {
			t.Fatalf("segment %s pins nothing before any checkpoint", name)
		}
	}
	if !slices.EqualFunc(read, sent, bytes.Equal) {
		t.Fatalf("the journal holds %q, %q was sent", read, sent)
	}
	m.mu.Lock()
	if m.writes == 0 || m.failed != 0 || m.records != len(sent) {
		t.Errorf("metrics: %d writes, %d failed, %d records; %d sent", m.writes, m.failed, m.records, len(sent))
	}
	m.mu.Unlock()

	// a's checkpoint lets go the oldest segments only up to the first one b pins.
	sys.Send(pid, &Checkpointed{Key: "a", Seq: last["a"]})
	from := slices.IndexFunc(st.Segments, func(name string) bool { return slices.Contains(st.Pinned[name], "b") })
	after := status(t, sys, pid)
	if !slices.Equal(after.Segments, st.Segments[from:]) {
		t.Fatalf("after a's checkpoint %q of %q kept (pinned %v)", after.Segments, st.Segments, st.Pinned)
	}
	for name, keys := range after.Pinned {
		if slices.Contains(keys, "a") {
			t.Fatalf("after a's checkpoint segment %s pinned by %q", name, keys)
		}
	}
	// A checkpoint short of b's last record keeps the segment holding that record.
	sys.Send(pid, &Checkpointed{Key: "b", Seq: last["b"] - 2})
	if now := status(t, sys, pid).Segments; len(now) == 0 || len(now) == len(st.Segments) || now[len(now)-1] != st.Segments[len(st.Segments)-1] {
		t.Fatalf("after b's checkpoint up to %d: %q of %q kept", last["b"]-2, now, st.Segments)
	}
	sys.Send(pid, &Checkpointed{Key: "b", Seq: last["b"]})
	now := status(t, sys, pid)
	if len(now.Segments) > 1 {
		t.Fatalf("after every checkpoint %q kept", now.Segments)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if _, ok := ParseSegmentName(e.Name()); ok && !slices.Contains(now.Segments, e.Name()) {
			t.Fatalf("segment %s left on disk, status %q", e.Name(), now.Segments)
		}
	}
}

// recoveredSegment writes a segment holding one record per key, numbered from 1, into
// dir and returns its name and each key's sequence number.
func recoveredSegment(t *testing.T, dir string, keys ...string) (string, map[string]uint64) {
	t.Helper()
	seqs := map[string]uint64{}
	frame := StartFrame(nil)
	for i, k := range keys {
		frame = AppendRecord(frame, []byte(k+"'s record"))
		seqs[k] = uint64(i + 1)
	}
	FinishFrame(frame, 1)
	name := SegmentName(1)
	if err := os.WriteFile(filepath.Join(dir, name), frame, 0o600); err != nil {
		t.Fatal(err)
	}
	return name, seqs
}

func gone(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return os.IsNotExist(err)
}

// TestUnsavedHandOver: what the replay could not save is handed, with the key's hold
// markers, to the key's next user that claims it, and the journal leaves saving it to
// that user, whose checkpoint lets the segment go.
func TestUnsavedHandOver(t *testing.T) {
	dir := t.TempDir()
	seg, seqs := recoveredSegment(t, dir, "k")
	save := func(key string, data []byte) error {
		t.Errorf("the journal saved %q, whose state it handed to the key's next user", key)
		return nil
	}
	rec := &Recovered{
		Next:    2,
		Kept:    []KeptSegment{{Name: seg, Keys: map[string]uint64{"k": seqs["k"]}}},
		Unsaved: []*Unsaved{{Key: "k", Seq: seqs["k"], Data: []byte("k's state")}},
		Held:    map[string][]string{"k": {"marker"}},
	}
	// The retry is not due before the claim: the state is the claimer's from then on.
	sys, pid := start(t, Config{Dir: dir, Log: zerolog.Nop(), Recovered: rec, Save: save, UnsavedRetry: time.Hour})

	claim := func(key string) *Claimed {
		return ask(t, sys, pid, func(p actor.Promise) any { return &Claim{Key: key, Reply: p} }).(*Claimed)
	}
	if c := claim("k"); c.Unsaved == nil || string(c.Unsaved.Data) != "k's state" || !slices.Equal(c.Hold, []string{"marker"}) {
		t.Fatalf("claim answered %+v", c)
	}
	if c := claim("other"); c.Unsaved != nil || c.Hold != nil {
		t.Fatalf("claim of a key the journal holds nothing of answered %+v", c)
	}
	if gone(t, filepath.Join(dir, seg)) {
		t.Fatal("the recovered segment went while its key's state is unsaved")
	}
	sys.Send(pid, &Checkpointed{Key: "k", Seq: seqs["k"]})
	if c := claim("k"); c.Unsaved != nil {
		t.Fatalf("claim after the key's checkpoint answered %+v", c.Unsaved)
	}
	if !gone(t, filepath.Join(dir, seg)) {
		t.Fatal("the recovered segment is still there once nothing pins it")
	}
	// The next record is numbered after the recovered ones.
	if got := appendRecord(t, sys, pid, "k", []byte("x")); got.Err != nil || got.Seq != 2 {
		t.Fatalf("append after the recovered records: %+v", got)
	}
}

// TestUnsavedRetried: what nobody claims the journal saves itself (Config.Save), every
// UnsavedRetry until that works, then lets the segment it pinned go; another key's pin
// keeps the segment meanwhile.
func TestUnsavedRetried(t *testing.T) {
	dir := t.TempDir()
	seg, seqs := recoveredSegment(t, dir, "r", "p")
	var mu sync.Mutex
	saved := map[string][]byte{}
	tries := 0
	save := func(key string, data []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries == 1 {
			return errors.New("disk full")
		}
		saved[key] = data
		return nil
	}
	rec := &Recovered{
		Next:    3,
		Kept:    []KeptSegment{{Name: seg, Keys: map[string]uint64{"r": seqs["r"], "p": seqs["p"]}}},
		Unsaved: []*Unsaved{{Key: "r", Seq: seqs["r"], Data: []byte("r's state")}},
	}
	sys, pid := start(t, Config{Dir: dir, Log: zerolog.Nop(), Recovered: rec, Save: save, UnsavedRetry: 10 * time.Millisecond})

	testwait.For(t, waitFor, 5*time.Millisecond, func() error {
		if st := status(t, sys, pid); !slices.Equal(st.Pinned[seg], []string{"p"}) {
			return fmt.Errorf("the unclaimed state was not saved: segment pinned by %q", st.Pinned[seg])
		}
		return nil
	})
	mu.Lock()
	if string(saved["r"]) != "r's state" || tries != 2 {
		t.Errorf("saved %q after %d tries, want r's state after 2", saved, tries)
	}
	mu.Unlock()
	if gone(t, filepath.Join(dir, seg)) {
		t.Fatal("the segment went while p pins it")
	}
	sys.Send(pid, &Checkpointed{Key: "p", Seq: seqs["p"]})
	if got := appendRecord(t, sys, pid, "k", []byte("x")); got.Err != nil || got.Seq != 3 {
		t.Fatalf("append after the recovered records: %+v", got)
	}
	if !gone(t, filepath.Join(dir, seg)) {
		t.Fatal("the recovered segment is still there once nothing pins it")
	}
}

// A journal stopping while its spare segment is being zero-filled waits for it within a
// bound, not for ever: a disk that hangs on the spare does not hang the broker's stop.
// The spare left behind is the replay's to remove at the next start.
func TestStopWaitsForTheSpareWithABound(t *testing.T) {
	actortest.Bubble(t, func(t *testing.T) {
		fsys := storage.NewFaultFS(nil)
		held, hold := make(chan struct{}), make(chan struct{})
		var once sync.Once
		fsys.SetBefore(func(op storage.Op, path string) error {
			if op == storage.OpCreate && strings.HasPrefix(filepath.Base(path), SpareMarker) {
				once.Do(func() { close(held) })
				<-hold
			}
			return nil
		})
		sys := actor.NewSystem(zerolog.Nop())
		pid := sys.Spawn(Props(Config{Dir: t.TempDir(), FS: fsys, SegmentBytes: 64 << 10}))
		// The first segment starts without a spare: the next one is prepared at once.
		if a := appendRecord(t, sys, pid, "g", []byte("r")); a.Err != nil {
			t.Fatal(a.Err)
		}
		<-held
		if err := sys.Poison(pid, time.Minute); err != nil {
			t.Errorf("stop with the spare's fill held: %v", err)
		}
		close(hold)
		sys.Shutdown() // the spare's outcome goes to the stopped journal: a dead letter
	})
}

// An Append with Then writes both records in one frame with one fdatasync, numbered one
// after the other; a failed write fails both, and what is read back holds both or
// neither (the frame of a failed fdatasync may still be whole on disk).
func TestAppendThenOneFrame(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	fsys := storage.NewFaultFS(nil)
	m := &countMetrics{}
	sys, pid := start(t, Config{Dir: dir, FS: fsys, Log: zerolog.Nop(), Metrics: m, SegmentBytes: 1 << 16})

	first := appendRecord(t, sys, pid, "a", []byte("one"))
	m.mu.Lock()
	writes := m.writes
	m.mu.Unlock()
	got := *ask(t, sys, pid, func(p actor.Promise) any {
		return &Append{Key: "a", Data: []byte("two"), Then: []byte("three"), Reply: p}
	}).(*Appended)
	if got.Err != nil || got.Seq != first.Seq+1 || got.ThenSeq != first.Seq+2 {
		t.Fatalf("append with Then after %d: %+v", first.Seq, got)
	}
	m.mu.Lock()
	if n := m.writes - writes; n != 1 {
		t.Errorf("append with Then took %d writes (a write and its fdatasync each)", n)
	}
	m.mu.Unlock()
	fsys.FailNext(storage.OpSync, nil)
	if failed := *ask(t, sys, pid, func(p actor.Promise) any {
		return &Append{Key: "a", Data: []byte("four"), Then: []byte("five"), Reply: p}
	}).(*Appended); failed.Err == nil {
		t.Fatalf("append with a failed fdatasync: %+v", failed)
	}
	last := appendRecord(t, sys, pid, "a", []byte("six"))
	if last.Err != nil {
		t.Fatal(last.Err)
	}

	var read []string
	var seqs []uint64
	for _, name := range status(t, sys, pid).Segments {
		first, _ := ParseSegmentName(name)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ScanSegment(b, first).Records {
			read, seqs = append(read, string(r.Data)), append(seqs, r.Seq)
		}
	}
	want := []string{"one", "two", "three", "six"}
	if len(read) == 6 {
		want = []string{"one", "two", "three", "four", "five", "six"}
	}
	if !slices.Equal(read, want) {
		t.Fatalf("the journal holds %q, want %q", read, want)
	}
	if seqs[2] != got.ThenSeq || seqs[len(seqs)-1] != last.Seq {
		t.Fatalf("records numbered %v; Then answered %d, the last append %d", seqs, got.ThenSeq, last.Seq)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records != 4 || m.failed != 1 {
		t.Errorf("metrics: %d records written, %d writes failed", m.records, m.failed)
	}
}

// An Append's Answer sees the outcome before the user's Reply and what it returns runs
// after it, for a durable write and a failed one: a user that answers its clients there
// has the outcome in its own mailbox first, and may refuse it (Refused reaches Reply).
func TestAppendAnswerAroundReply(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	fsys := storage.NewFaultFS(nil)
	sys, pid := start(t, Config{Dir: dir, FS: fsys, Log: zerolog.Nop(), SegmentBytes: 1 << 16})
	for _, fail := range []bool{false, true} {
		if fail {
			fsys.FailNext(storage.OpSync, nil)
		}
		var mu sync.Mutex
		var order []string
		note := func(s string) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, s)
		}
		got := *ask(t, sys, pid, func(p actor.Promise) any {
			return &Append{Key: "a", Data: []byte("x"), Reply: actor.PromiseFunc(func(v any) {
				note("reply")
				p.Resolve(v)
			}), Answer: func(r *Appended) func() {
				note(fmt.Sprintf("answer err=%t", r.Err != nil))
				r.Refused = true
				return func() { note("then") }
			}}
		}).(*Appended)
		if (got.Err != nil) != fail || !got.Refused {
			t.Fatalf("fail=%t: reply %+v", fail, got)
		}
		testwait.For(t, waitFor, time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			want := fmt.Sprintf("[answer err=%t reply then]", fail)
			if got := fmt.Sprint(order); got != want {
				return fmt.Errorf("order %s, want %s", got, want)
			}
			return nil
		})
	}
}
