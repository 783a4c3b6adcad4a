package group_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
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

// Ids longer than the protocol's string length (32,767 bytes, which only a compact string
// of a flexible version can carry) are a malformed request, as in Apache's generated
// readers: the connection is closed with one log line. An id at the limit is served.
// No log event of the broker carries an id whole: none is longer than maxEvent.
func TestLongIdsRefusedAndLogsBounded(t *testing.T) {
	const maxEvent = 4096
	w, logs := startCaptured(t, nil)
	w.createTopics(1, "t")
	huge := strings.Repeat("g", 1<<20)
	long := strings.Repeat("h", 32767)

	join := joinReq(huge, joinOpts{version: 9})
	instance := strings.Repeat("i", 40000)
	joinInstance := joinReq("ok", joinOpts{version: 9, instance: instance})
	commit := commitReq(huge, 8, "", -1, map[string][]int32{"t": {0}})
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Version = 5
	describe.Groups = []string{"a", huge}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version = 2
	del.Groups = []string{huge}
	fetch := fetchReq(8, "", nil)
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: huge}}
	for _, req := range []kmsg.Request{join, joinInstance, commit, describe, del, fetch} {
		raw := brokertest.Dial(t, w.b.Addr())
		raw.Send(req, 1)
		if !raw.Closed(10 * time.Second) {
			t.Fatalf("%T v%d with an id over 32767 bytes: the connection stayed open", req, req.GetVersion())
		}
	}

	// At the limit: a commit and a join with a 32767-byte group id are served.
	c := w.do(commitReq(long, 8, "", -1, map[string][]int32{"t": {0}})).(*kmsg.OffsetCommitResponse)
	wantCode(t, "commit with a 32767-byte group id", c.Topics[0].Partitions[0].ErrorCode, 0)
	j := w.do(joinReq(long, joinOpts{version: 9})).(*kmsg.JoinGroupResponse)
	wantCode(t, "join with a 32767-byte group id", j.ErrorCode, kerr.MemberIDRequired.Code)
	r := joinReq(long, joinOpts{version: 9, member: j.MemberID})
	r.Reason = &long
	j = w.do(r).(*kmsg.JoinGroupResponse)
	wantCode(t, "second join", j.ErrorCode, 0)
	w.stop()

	for _, e := range logs.all() {
		if len(e) > maxEvent {
			t.Fatalf("a log event of %d bytes: %.300s", len(e), e)
		}
	}
	if !logs.has("connection_closed_bad_input") {
		t.Fatal("the refused requests were not logged")
	}
}
