package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/internal/testwait"
	"kaas/logs/logtest"
)

// startLogged starts a broker on c whose JSON log goes to the returned sink (and to the
// test log when it fails).
func startLogged(t *testing.T, c config.Config) (*broker.Broker, *logtest.Sink, error) {
	t.Helper()
	return brokertest.StartLogged(t, c)
}

// smallVolume mounts a tmpfs of size bytes for the test, or skips it.
func smallVolume(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes path until the volume is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 0xa5
	}
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
	// The last partial block too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

func commitRaw(c *brokertest.Raw, corr int32, group string, offset int64) int16 {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(7)
	req.Group, req.Generation = group, -1
	tp := kmsg.NewOffsetCommitRequestTopic()
	tp.Topic = "orders"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset, p.LeaderEpoch = 0, offset, -1
	tp.Partitions = append(tp.Partitions, p)
	req.Topics = append(req.Topics, tp)
	resp := c.Roundtrip(req, corr).(*kmsg.OffsetCommitResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// fetchRaw is group's committed offset of orders-0 and the response's error code.
func fetchRaw(c *brokertest.Raw, corr int32, group string) (int64, int16) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(5)
	req.Group = group
	tp := kmsg.NewOffsetFetchRequestTopic()
	tp.Topic, tp.Partitions = "orders", []int32{0}
	req.Topics = append(req.Topics, tp)
	resp := c.Roundtrip(req, corr).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		return -1, resp.ErrorCode
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// TestStartsOnFullVolume: a broker killed on a full volume starts again on it. It serves
// every acknowledged offset (and record), answers commits NOT_COORDINATOR without
// leaving an empty segment per failed write and without a log line per failure, and
// takes commits again, without a restart, once space returns.
func TestStartsOnFullVolume(t *testing.T) {
	vol := smallVolume(t, "2m")
	dir := t.TempDir()
	b := brokertest.Start(t, func(c *config.Config) {
		c.DataDir = dir
		c.OffsetsCheckpointInterval = time.Hour
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("one")}, &kgo.Record{Value: []byte("two")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	groups := map[string]int64{"billing": 41, "shipping": 42}
	c := brokertest.Dial(t, b.Addr())
	for g, o := range groups {
		if code := commitRaw(c, 1, g, o); code != 0 {
			t.Fatalf("commit %s: code %d", g, code)
		}
	}

	data := filepath.Join(vol, "data")
	brokertest.CopyTreeSparse(t, dir, data)
	fill(t, filepath.Join(vol, "filler"))

	cfg := brokertest.Config(t)
	cfg.DataDir = data
	b2, logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatalf("start on a full volume: %v", err)
	}
	c2 := brokertest.Dial(t, b2.Addr())
	for g, want := range groups {
		if got, code := fetchRaw(c2, 2, g); code != 0 || got != want {
			t.Fatalf("fetch %s on a full volume: offset %d code %d, want %d", g, got, code, want)
		}
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b2.Addr()), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		fs := consumer.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if strings.Join(got, ",") != "one,two" {
		t.Fatalf("records on a full volume: %q", got)
	}

	const attempts = 30
	for i := range attempts {
		code := commitRaw(c2, int32(10+i), "billing", 100+int64(i))
		if code != kerr.NotCoordinator.Code {
			t.Fatalf("commit %d on a full volume: code %d, want NOT_COORDINATOR", i, code)
		}
	}
	jdir := offsets.JournalDir(data, cfg.NodeID)
	names, _ := filepath.Glob(filepath.Join(jdir, "*"))
	var segs []string
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil && !fi.IsDir() {
			segs = append(segs, filepath.Base(n))
		}
	}
	// The replayed segment stays (its groups' files are not written yet); failed writes
	// leave nothing behind.
	if len(segs) > 2 {
		t.Fatalf("%d failed commits left %d files in the journal: %q", attempts, len(segs), segs)
	}
	// One line for the first failure and then one per interval, with a count.
	for _, event := range []string{"offsets_journal_write_failed", "offsets_write_failed"} {
		if n := logs.Count(`"` + event + `"`); n == 0 || n > 3 {
			t.Fatalf("%d failed commits logged %s %d times", attempts, event, n)
		}
	}
	if n := logs.Count("no space left on device"); n > 12 {
		t.Fatalf("%d failed commits logged %d lines about the full disk", attempts, n)
	}
	for g, want := range groups {
		if got, code := fetchRaw(c2, 3, g); code != 0 || got != want {
			t.Fatalf("fetch %s after failed commits: offset %d code %d, want %d", g, got, code, want)
		}
	}

	if os.Getenv("KAAS_TEST_SHOWLOG") != "" {
		t.Logf("log on a full volume:\n%s", logs)
	}
	if err := os.Remove(filepath.Join(vol, "filler")); err != nil {
		t.Fatal(err)
	}
	// Both waits share one deadline; each commit is answered, so its retries need no
	// pause of their own.
	deadline := time.Now().Add(30 * time.Second)
	corr := int32(100)
	testwait.For(t, time.Until(deadline), 0, func() error {
		code := commitRaw(c2, corr, "billing", 500)
		corr++
		switch code {
		case 0:
			return nil
		case kerr.NotCoordinator.Code:
			return errors.New("commit once space returned: still NOT_COORDINATOR")
		}
		t.Fatalf("commit once space returned: code %d", code)
		return nil
	})
	if got, code := fetchRaw(c2, 200, "billing"); code != 0 || got != 500 {
		t.Fatalf("fetch after space returned: offset %d code %d, want 500", got, code)
	}
	// The group files are written at their next checkpoint, and the replayed segment,
	// unpinned, goes.
	replayed := filepath.Join(jdir, "00000000000000000001.log")
	testwait.For(t, time.Until(deadline), 20*time.Millisecond, func() error {
		_, errB := os.Stat(filepath.Join(offsets.Dir(data), offsets.FileName("billing")))
		_, errS := os.Stat(filepath.Join(offsets.Dir(data), offsets.FileName("shipping")))
		_, errJ := os.Stat(replayed)
		if errB == nil && errS == nil && os.IsNotExist(errJ) {
			return nil
		}
		return fmt.Errorf("group files (%v, %v) or replayed segment (%v) once space returned", errB, errS, errJ)
	})
}

// TestJournalDamagedMidSegment: one flipped bit in the middle of a journal segment, with
// valid frames after it, is not taken for a torn tail. The later frames replay (the
// committed offset is 100, not 49), and the segment's groups answer
// COORDINATOR_NOT_AVAILABLE, with an error logged and a metric counted, until the
// operator removes the hold marker; then they serve, without a restart.
func TestJournalDamagedMidSegment(t *testing.T) {
	dir := t.TempDir()
	b := brokertest.Start(t, func(c *config.Config) {
		c.DataDir = dir
		c.OffsetsCheckpointInterval = time.Hour
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	c := brokertest.Dial(t, b.Addr())
	// shipping commits first and last: it has a record in every segment the commits go
	// to (the first is closed once its zero-filled successor is ready).
	if code := commitRaw(c, 200, "shipping", 6); code != 0 {
		t.Fatalf("commit shipping: code %d", code)
	}
	// One commit per journal write.
	for o := int64(1); o <= 100; o++ {
		if code := commitRaw(c, int32(o), "billing", o); code != 0 {
			t.Fatalf("commit %d: code %d", o, code)
		}
	}
	if code := commitRaw(c, 201, "shipping", 7); code != 0 {
		t.Fatalf("commit shipping: code %d", code)
	}

	img := t.TempDir()
	brokertest.CopyTree(t, dir, img)
	jdir := offsets.JournalDir(img, b.Env().NodeID)
	// Frames: length uint32, whose top bit flags a sequence number in the payload;
	// crc32c uint32; payload. Flip one bit in the middle frame of a segment with frames
	// after it.
	frameLen := func(b []byte) int {
		return int((uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) &^ (1 << 31))
	}
	segs, _ := filepath.Glob(filepath.Join(jdir, "*.log"))
	var damaged string
	for _, path := range segs {
		seg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var starts []int
		for pos := 0; pos+8 <= len(seg) && frameLen(seg[pos:]) > 0; pos += 8 + frameLen(seg[pos:]) {
			starts = append(starts, pos)
		}
		if len(starts) < 3 {
			continue
		}
		pos := starts[len(starts)/2]
		seg[pos+8+frameLen(seg[pos:])/2] ^= 0x04
		if err := os.WriteFile(path, seg, 0o644); err != nil {
			t.Fatal(err)
		}
		damaged = path
		break
	}
	if damaged == "" {
		t.Fatalf("no journal segment with three frames in %q", segs)
	}

	cfg := brokertest.Config(t)
	cfg.DataDir = img
	cfg.HTTPListen = "127.0.0.1:0"
	b2, logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c2 := brokertest.Dial(t, b2.Addr())
	for _, g := range []string{"billing", "shipping"} {
		if got, code := fetchRaw(c2, 1, g); code != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("fetch %s after a damaged segment: offset %d code %d, want COORDINATOR_NOT_AVAILABLE", g, got, code)
		}
	}
	if code := commitRaw(c2, 2, "billing", 101); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("commit to a held group: code %d, want COORDINATOR_NOT_AVAILABLE", code)
	}
	if n := logs.Count(`"level":"error"`); n == 0 || logs.Count("offsets_journal_damaged_mid_segment_groups_held_until_marker_removed") != 1 {
		t.Fatalf("damage not logged at error level once")
	}
	resp, err := http.Get("http://" + b2.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "kaas_offsets_journal_corrupt_frames_total 1") {
		t.Fatal("metrics lack kaas_offsets_journal_corrupt_frames_total 1")
	}
	quarantine := filepath.Join(jdir, "quarantine")
	name := filepath.Base(damaged)
	// It goes to quarantine once its groups' files are written (behind the start).
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, err := os.Stat(filepath.Join(quarantine, name)); err != nil {
			return fmt.Errorf("damaged segment not kept in quarantine: %w", err)
		}
		if _, err := os.Stat(damaged); !os.IsNotExist(err) {
			return fmt.Errorf("damaged segment still in the journal (err %v)", err)
		}
		return nil
	})

	// The operator has looked: removing the marker releases the groups.
	if err := os.Remove(filepath.Join(quarantine, name+".held")); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"billing": 100, "shipping": 7}
	corr := int32(10)
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		for g, o := range want {
			got, code := fetchRaw(c2, corr, g)
			switch {
			case code == 0 && got == o:
				delete(want, g)
			case code == 0:
				t.Fatalf("fetch %s after the marker went: offset %d, want %d", g, got, o)
			case code != kerr.CoordinatorNotAvailable.Code:
				t.Fatalf("fetch %s after the marker went: code %d", g, code)
			}
		}
		corr++
		if len(want) > 0 {
			return fmt.Errorf("groups still COORDINATOR_NOT_AVAILABLE after the marker went: %v", slices.Sorted(maps.Keys(want)))
		}
		return nil
	})
	if code := commitRaw(c2, 500, "billing", 101); code != 0 {
		t.Fatalf("commit after the hold: code %d", code)
	}
}
