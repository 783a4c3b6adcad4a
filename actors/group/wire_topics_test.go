package group_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// admin is a kadm client of the wire's broker, closed with the test.
func (w *wire) admin() *kadm.Client {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.b.Addr()))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createTopics creates topics with partitions each.
func (w *wire) createTopics(partitions int32, topics ...string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := w.admin().CreateTopics(ctx, partitions, 1, nil, topics...)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			w.t.Fatalf("create %s: %v", r.Topic, r.Err)
		}
	}
}

// restart stops the broker and starts a new one on the same data dir.
func (w *wire) restart() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.b.Stop(ctx); err != nil {
		w.t.Fatal(err)
	}
	w.b = brokertest.StartWith(w.t, w.cfg)
}

// committedTopics is what OffsetFetch v7 (all partitions) shows for g: topic → offsets.
func (w *wire) committedTopics(g string) map[string]int {
	w.t.Helper()
	r := w.do(fetchReq(7, g, nil)).(*kmsg.OffsetFetchResponse)
	wantCode(w.t, "fetch all", r.ErrorCode, 0)
	out := map[string]int{}
	for _, t := range r.Topics {
		out[t.Topic] = len(t.Partitions)
	}
	return out
}

// DeleteTopics drops every group's committed offsets of the deleted topics, in groups
// with a live actor and in groups that exist only on disk, and it stays so across a
// restart (GroupCoordinator.onPartitionsDeleted; §5.3 rule 8).
func TestDeleteTopicsDropsOffsets(t *testing.T) {
	w := startWire(t, ptProfile)
	w.createTopics(2, "a", "b")
	parts := map[string][]int32{"a": {0, 1}, "b": {0, 1}}
	for _, g := range []string{"live", "disk", "untouched"} {
		allCodes(t, "commit "+g, commitCodes(w.do(commitReq(g, 8, "", -1, parts)).(*kmsg.OffsetCommitResponse)), 0)
	}
	// After a restart both groups exist only as files; "live" gets an actor again.
	w.restart()
	if got := w.committedTopics("live"); got["a"] != 2 || got["b"] != 2 {
		t.Fatalf("before delete: %v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := w.admin().DeleteTopics(ctx, "a")
	if err != nil || res["a"].Err != nil {
		t.Fatalf("delete topic: %v %v", err, res["a"].Err)
	}
	for _, g := range []string{"live", "disk"} {
		testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond(g+" drops a", func() bool {
			got := w.committedTopics(g)
			return got["a"] == 0 && got["b"] == 2
		}))
	}
	// "untouched" was never asked for: only the manager's wake-up of on-disk groups
	// can drop its offsets.
	testwait.For(t, 5*time.Second, 2*time.Millisecond, testwait.Cond("untouched drops a", func() bool {
		got := w.fileTopics("untouched")
		return got["a"] == 0 && got["b"] == 2
	}))
	w.restart()
	for _, g := range []string{"live", "disk", "untouched"} {
		if got := w.committedTopics(g); got["a"] != 0 || got["b"] != 2 {
			t.Fatalf("%s after restart: %v", g, got)
		}
	}
}

// fileTopics reads g's offsets file as the broker left it: topic → partitions.
func (w *wire) fileTopics(g string) map[string]int {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(offsets.Dir(w.cfg.DataDir), offsets.FileName(g)))
	if errors.Is(err, fs.ErrNotExist) {
		// A start leaves the group files behind the journal and writes them after it
		// serves: not written yet.
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	var f struct {
		Offsets []struct {
			Topic string `json:"topic"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, o := range f.Offsets {
		out[o.Topic]++
	}
	return out
}
