package group

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/internal/diskimage"
	"kaas/storage"
)

// Every consumer-protocol save of every test in this package is checked: the state the
// deltas build up (as the offsets actor keeps it) must be the whole state the group
// would have written (consumerBlob). A change that does not mark its member
// (consumerGroup.changed) fails the run. Benchmarks run without the check.
func TestMain(m *testing.M) {
	flag.Parse()
	var mu sync.Mutex
	var failures []string
	if flag.Lookup("test.bench").Value.String() == "" {
		mirrors := map[*consumerGroup]*deltaMirror{}
		checkConsumerDeltas = func(g *groupActor, meta offsets.GroupMeta, delta *offsets.ConsumerDelta) {
			mu.Lock()
			defer mu.Unlock()
			if err := checkDelta(mirrors, g, meta, delta); err != nil {
				failures = append(failures, fmt.Sprintf("group %q: %v", g.id, err))
			}
		}
	}
	code := m.Run()
	if len(failures) > 0 {
		fmt.Fprintf(os.Stderr, "consumer state deltas that do not make the whole state (%d):\n", len(failures))
		for i, f := range failures {
			if i == 10 {
				break
			}
			fmt.Fprintln(os.Stderr, "  "+f)
		}
		code = 1
	}
	os.Exit(code)
}

// deltaMirror is a consumer state as the deltas left it.
type deltaMirror struct {
	header  json.RawMessage
	members map[string]json.RawMessage
}

func splitBlob(blob json.RawMessage) (*deltaMirror, error) {
	var s struct {
		Members []json.RawMessage `json:"members"`
	}
	if err := json.Unmarshal(blob, &s); err != nil {
		return nil, err
	}
	var h savedHeader
	if err := json.Unmarshal(blob, &h); err != nil {
		return nil, err
	}
	hb, _ := json.Marshal(h)
	d := &deltaMirror{header: hb, members: map[string]json.RawMessage{}}
	for _, m := range s.Members {
		var sm savedMember
		if err := json.Unmarshal(m, &sm); err != nil {
			return nil, err
		}
		d.members[sm.ID] = m
	}
	return d, nil
}

func checkDelta(mirrors map[*consumerGroup]*deltaMirror, g *groupActor, meta offsets.GroupMeta, delta *offsets.ConsumerDelta) error {
	if delta == nil {
		m, err := splitBlob(meta.Consumer)
		if err != nil {
			return err
		}
		mirrors[g.cg] = m
		return nil
	}
	m := mirrors[g.cg]
	if m == nil {
		return fmt.Errorf("a delta before any whole save")
	}
	m.header = delta.Header
	for _, id := range delta.Del {
		delete(m.members, id)
	}
	for id, r := range delta.Set {
		m.members[id] = r
	}
	blob, err := g.consumerBlob()
	if err != nil {
		return err
	}
	want, err := splitBlob(blob)
	if err != nil {
		return err
	}
	var hw, hg savedHeader
	if err := json.Unmarshal(want.header, &hw); err != nil {
		return err
	}
	if err := json.Unmarshal(m.header, &hg); err != nil {
		return err
	}
	if !reflect.DeepEqual(hw, hg) {
		return fmt.Errorf("header %s, want %s", m.header, want.header)
	}
	if len(want.members) != len(m.members) {
		return fmt.Errorf("%d members, want %d", len(m.members), len(want.members))
	}
	for id, w := range want.members {
		var a, b savedMember
		if err := json.Unmarshal(w, &a); err != nil {
			return err
		}
		if err := json.Unmarshal(m.members[id], &b); err != nil {
			return fmt.Errorf("member %q: %w", id, err)
		}
		// Client id and host change with every heartbeat and are saved with the
		// member's next change (as before deltas, where they were saved with anyone's).
		b.ClientID, b.ClientHost = a.ClientID, a.ClientHost
		if !reflect.DeepEqual(a, b) {
			return fmt.Errorf("member %q: %s, want %s", id, m.members[id], w)
		}
	}
	return nil
}

// A delta that fails to be written is not lost: the member's heartbeat is answered with
// the write's error, and its retry, which changes nothing more, is answered only once
// the whole state (with the epoch it is told) is durable. After a restart the member is
// at that epoch.
func TestConsumerFailedDeltaSavedWholeOnRetry(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	consumer := func(s *Settings) {
		s.Consumer = ConsumerSettings{Enabled: true, SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
			MaxSize: 10, Assignors: []string{"uniform", "range"}}
	}
	h := newHarnessFS(t, dir, fsys, consumer)
	beat := func(member string, epoch int32) *ConsumerHeartbeatResult {
		t.Helper()
		r := &ConsumerHeartbeat{Group: "g", Version: 1, MemberID: member, MemberEpoch: epoch, RebalanceTimeout: -1, Owned: []OwnedTopic{}}
		if epoch == 0 {
			r.RebalanceTimeout, r.Subscribed, r.Owned = 1000, []string{}, []OwnedTopic{}
		}
		return call[*ConsumerHeartbeatResult](h, r)
	}
	if r := beat("a", 0); r.ErrorCode != 0 || r.MemberEpoch != 1 {
		t.Fatalf("a joins: %+v", r)
	}
	if r := beat("b", 0); r.ErrorCode != 0 || r.MemberEpoch != 2 {
		t.Fatalf("b joins: %+v", r)
	}
	failNextSegmentSync(fsys)
	if r := beat("a", 1); r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("a moves to epoch 2, its write fails: %s", codeName(r.ErrorCode))
	}
	if r := beat("a", 1); r.ErrorCode != 0 || r.MemberEpoch != 2 {
		t.Fatalf("a's retry: %s, epoch %d", codeName(r.ErrorCode), r.MemberEpoch)
	}
	h.stop()
	h = newHarnessFS(t, dir, fsys, consumer)
	defer h.stop()
	d := call[*ConsumerDescription](h, &ConsumerDescribe{Group: "g"})
	epochs := map[string]int32{}
	for _, m := range d.Members {
		epochs[m.MemberID] = m.MemberEpoch
	}
	if d.Epoch != 2 || epochs["a"] != 2 || epochs["b"] != 2 {
		t.Fatalf("after a restart: group epoch %d, members %v; want a and b at 2", d.Epoch, epochs)
	}
}

// heldSyncs holds the journal's next segment write (fail: which then fails, half
// written: lost to a crash) or fsync until released.
type heldSyncs struct {
	entered, release chan struct{}
}

func holdSegmentSyncs(fsys *storage.FaultFS, fail bool) *heldSyncs {
	h := &heldSyncs{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	fsys.SetBefore(func(op storage.Op, path string) error {
		held := storage.OpSync
		if fail {
			held = storage.OpWrite
		}
		if op != held || !strings.HasSuffix(path, journal.SegmentSuffix) {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		h.entered <- struct{}{}
		<-h.release
		if fail {
			return storage.ErrInjected
		}
		return nil
	})
	return h
}

// consumerTrio has a, b and c join g (no topics) and brings them to the group epoch.
func consumerTrio(t *testing.T, h *harness) func(member string, epoch int32, rack string) *actor.Waiter {
	t.Helper()
	send := func(member string, epoch int32, rack string) *actor.Waiter {
		r := &ConsumerHeartbeat{Group: "g", Version: 1, MemberID: member, MemberEpoch: epoch, RebalanceTimeout: -1, Owned: []OwnedTopic{}}
		if epoch == 0 {
			r.RebalanceTimeout, r.Subscribed = 1000, []string{}
		}
		if rack != "" {
			r.RackID = &rack
		}
		return h.send(r)
	}
	for i, id := range []string{"a", "b", "c"} {
		if r := get[*ConsumerHeartbeatResult](t, send(id, 0, "")); r.ErrorCode != 0 || r.MemberEpoch != int32(i+1) {
			t.Fatalf("%s joins: %+v", id, r)
		}
	}
	for _, b := range []struct {
		id    string
		epoch int32
	}{{"a", 1}, {"b", 2}} {
		if r := get[*ConsumerHeartbeatResult](t, send(b.id, b.epoch, "")); r.ErrorCode != 0 || r.MemberEpoch != 3 {
			t.Fatalf("%s moves to epoch 3: %+v", b.id, r)
		}
	}
	return send
}

func consumerSettings(s *Settings) {
	s.Consumer = ConsumerSettings{Enabled: true, SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second,
		MaxSize: 10, Assignors: []string{"uniform", "range"}}
}

func pendingAnswer(t *testing.T, what string, w *actor.Waiter) {
	t.Helper()
	select {
	case v := <-w.C:
		t.Fatalf("%s answered before its save was durable: %+v", what, v)
	default:
	}
}

// A heartbeat that changes nothing is answered at once, while other members' changes
// wait for their saves (one in flight, one behind it): what it reports was durable
// before. It used to wait for every save due.
func TestConsumerUnchangedHeartbeatDoesNotWaitForOthersSaves(t *testing.T) {
	fsys := storage.NewFaultFS(nil)
	h := newHarnessFS(t, t.TempDir(), fsys, consumerSettings)
	defer h.stop()
	send := consumerTrio(t, h)
	held := holdSegmentSyncs(fsys, false)
	wa := send("a", 3, "r1") // a change: its save is held in the journal's fsync
	<-held.entered
	wb := send("b", 3, "r2") // another change, saved behind it
	wc := send("c", 3, "")   // nothing changes for c
	v, ok := wc.Wait(30 * time.Second)
	if !ok {
		close(held.release)
		t.Fatal("c's heartbeat, which changed nothing, waited for the saves of a's and b's changes")
	}
	if r := v.(*ConsumerHeartbeatResult); r.ErrorCode != 0 || r.MemberEpoch != 3 {
		t.Fatalf("c: %+v", r)
	}
	pendingAnswer(t, "a's change", wa)
	pendingAnswer(t, "b's change", wb)
	close(held.release)
	for id, w := range map[string]*actor.Waiter{"a": wa, "b": wb} {
		if r := get[*ConsumerHeartbeatResult](t, w); r.ErrorCode != 0 || r.MemberEpoch != 3 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
}

// Two saves in flight: when the first fails, the one sent behind it fails too, whatever
// the journal made of it, and it carried the first one's records, so the state it
// left on disk is whole (the journal goes on after a failed write).
func TestConsumerSaveBehindAFailedOneFails(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	h := newHarnessFS(t, dir, fsys, consumerSettings)
	send := consumerTrio(t, h)
	held := holdSegmentSyncs(fsys, true)
	wa := send("a", 3, "r1")
	<-held.entered
	wb := send("b", 3, "r2")
	// b's save is sent behind a's before a's fails: c's heartbeat, which changes
	// nothing, is answered once both are in flight.
	v, ok := send("c", 3, "").Wait(30 * time.Second)
	close(held.release)
	if !ok {
		t.Fatal("c's heartbeat, which changed nothing, waited for the saves of a's and b's changes")
	}
	if r := v.(*ConsumerHeartbeatResult); r.ErrorCode != 0 {
		t.Fatalf("c: %+v", r)
	}
	for id, w := range map[string]*actor.Waiter{"a": wa, "b": wb} {
		if r := get[*ConsumerHeartbeatResult](t, w); r.ErrorCode != kerr.NotCoordinator.Code {
			t.Fatalf("%s: %s, want NOT_COORDINATOR (a's save failed)", id, codeName(r.ErrorCode))
		}
	}
	// A crash now: the journal holds b's save, not a's, and replay must make a whole
	// state of it.
	img := t.TempDir()
	diskimage.Copy(t, dir, img, "")
	h.stop()
	h = newHarnessFS(t, img, storage.NewFaultFS(nil), consumerSettings)
	defer h.stop()
	racks := map[string]string{}
	for _, m := range call[*ConsumerDescription](h, &ConsumerDescribe{Group: "g"}).Members {
		racks[m.MemberID] = m.RackID
	}
	if racks["a"] != "r1" || racks["b"] != "r2" {
		t.Fatalf("after a crash, racks %v: want a's change (in the failed save) carried by b's", racks)
	}
}
