package group_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
)

// logCapture keeps every log event of a broker (zerolog writes one event per Write).
type logCapture struct {
	mu     sync.Mutex
	events []string
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.events = append(c.events, string(bytes.TrimRight(p, "\n")))
	c.mu.Unlock()
	return len(p), nil
}

func (c *logCapture) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

func (c *logCapture) has(s string) bool {
	for _, e := range c.all() {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// startCaptured starts a broker whose log (debug and up) goes to the returned capture.
func startCaptured(t *testing.T, mutate func(*config.Config)) (*wire, *logCapture) {
	t.Helper()
	c := brokertest.Config(t)
	if mutate != nil {
		mutate(&c)
	}
	logs := &logCapture{}
	b, err := broker.Start(c, zerolog.New(logs).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	w := &wire{t: t, b: b, cfg: c}
	t.Cleanup(func() { w.stop() })
	return w, logs
}

func (w *wire) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.b.Stop(ctx)
}

// The first group of a fresh data dir, deleted before its file was ever checkpointed:
// the delete succeeds, and neither the checkpoint nor the stop fails on the offsets
// directory that was never made.
func TestFirstGroupDeletedBeforeCheckpoint(t *testing.T) {
	w, logs := startCaptured(t, func(c *config.Config) { c.OffsetsCheckpointInterval = 50 * time.Millisecond })
	w.createTopics(1, "t")
	const g = "early"
	c := w.do(commitReq(g, 2, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "commit", c.Topics[0].Partitions[0].ErrorCode, 0)
	d := kmsg.NewPtrDeleteGroupsRequest()
	d.Version = 2
	d.Groups = []string{g}
	dr := w.do(d).(*kmsg.DeleteGroupsResponse)
	wantCode(t, "delete", dr.Groups[0].ErrorCode, 0)
	// The delete's checkpoint runs 50 ms later or, if the stop comes first, the stop
	// writes it: either way it removes a file from a directory that was never made.
	w.stop()
	for _, e := range logs.all() {
		if strings.Contains(e, "offsets_checkpoint_failed") {
			t.Fatalf("logged %s", e)
		}
	}
}
