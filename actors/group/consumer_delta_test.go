package group

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/offsets"
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
