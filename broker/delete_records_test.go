package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/broker/brokertest"
)

// segmentBases lists the base offsets of a partition's segment files.
func segmentBases(t *testing.T, dataDir, topic string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "topics", topic, "0", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimLeft(strings.TrimSuffix(filepath.Base(f), ".log"), "0"))
	}
	return out
}

func deleteRecords(t *testing.T, adm *kadm.Client, topic string, p int32, at int64) kadm.DeleteRecordsResponse {
	t.Helper()
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: topic, Partition: p, At: at})
	res, err := adm.DeleteRecords(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.Lookup(topic, p)
	if !ok {
		t.Fatalf("no answer for %s/%d: %+v", topic, p, res)
	}
	return r
}

func startOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	l, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := l.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("earliest of %s: %+v", topic, o)
	}
	return o.Offset
}

// DeleteRecords moves a partition's log start offset: ListOffsets earliest and Fetch
// follow it, the segments wholly below it are deleted, -1 is the high watermark, an
// offset past it OFFSET_OUT_OF_RANGE, one below the start changes nothing; the start is
// kept by the image a crash leaves and across a restart.
func TestDeleteRecords(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	// A segment per record.
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": kmsg.StringPtr("100")}, "del"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "del", Value: []byte("a record of forty bytes or so, or more")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if got := segmentBases(t, c.DataDir, "del"); len(got) < 6 {
		t.Fatalf("segments %v, want one per record", got)
	}

	if r := deleteRecords(t, adm, "del", 0, 3); r.Err != nil || r.LowWatermark != 3 {
		t.Fatalf("delete below 3: %+v", r)
	}
	if s := startOffset(t, adm, "del"); s != 3 {
		t.Fatalf("earliest %d after deleting below 3", s)
	}
	if got := segmentBases(t, c.DataDir, "del"); slices.Contains(got, "") || slices.Contains(got, "1") || slices.Contains(got, "2") || !slices.Contains(got, "3") {
		t.Fatalf("segments %v after deleting below 3", got)
	}
	raw := brokertest.Dial(t, b.Addr())
	p := raw.Roundtrip(fetchReq(12, "del", [16]byte{}, 0, 2, 0), 1).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.OffsetOutOfRange.Code || p.LogStartOffset != 3 {
		t.Fatalf("fetch at 2: %+v", p)
	}
	p = raw.Roundtrip(fetchReq(12, "del", [16]byte{}, 0, 3, 0), 2).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.LogStartOffset != 3 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch at 3: %+v", p)
	}

	// Not past the high watermark; below the start changes nothing.
	if r := deleteRecords(t, adm, "del", 0, 7); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete below 7 of 6: %+v", r)
	}
	if r := deleteRecords(t, adm, "del", 0, 1); r.Err != nil || r.LowWatermark != 3 {
		t.Fatalf("delete below 1: %+v", r)
	}
	if r := deleteRecords(t, adm, "del", 0, 9); r.Err == nil {
		t.Fatalf("unknown partition 9: %+v", r)
	}

	// Once more, to a start the image below keeps.
	if r := deleteRecords(t, adm, "del", 0, 4); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("delete below 4: %+v", r)
	}
	// The image a crash would leave keeps it.
	img := t.TempDir()
	brokertest.CopyTree(t, c.DataDir, img)

	// -1 is the high watermark; the log goes on past it.
	if r := deleteRecords(t, adm, "del", 0, -1); r.Err != nil || r.LowWatermark != 6 {
		t.Fatalf("delete all: %+v", r)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "del", Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if s := startOffset(t, adm, "del"); s != 6 {
		t.Fatalf("earliest %d after deleting all", s)
	}

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	if s := startOffset(t, kadm.NewClient(mustClient(t, b.Addr())), "del"); s != 6 {
		t.Fatalf("earliest %d after a restart, want 6", s)
	}
	if err := b.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	c.DataDir = img
	b = brokertest.StartWith(t, c)
	if s := startOffset(t, kadm.NewClient(mustClient(t, b.Addr())), "del"); s != 4 {
		t.Fatalf("earliest %d from the crash image, want 4", s)
	}
}

// DeleteRecords at each version; unknown topics, and the DELETE right per topic.
func TestDeleteRecordsWire(t *testing.T) {
	b, admin := authzBroker(t)
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "gone"); err != nil {
		t.Fatal(err)
	}
	req := func(topics ...string) *kmsg.DeleteRecordsRequest {
		r := kmsg.NewPtrDeleteRecordsRequest()
		r.TimeoutMillis = 5000
		for _, name := range topics {
			rt := kmsg.NewDeleteRecordsRequestTopic()
			rt.Topic = name
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = 0, -1
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
		}
		return r
	}
	anon := b.ListenerAddr("PLAINTEXT")
	setACLs(t, admin, allow(auth.Topic, "gone", auth.Delete), allow(auth.Topic, "nope", auth.Delete))
	for v := int16(0); v <= 2; v++ {
		r := request[*kmsg.DeleteRecordsResponse](t, anon, req("gone", "nope", "other"), v)
		var got []int16
		for _, rt := range r.Topics {
			got = append(got, rt.Partitions[0].ErrorCode)
		}
		if len(r.Topics) != 3 || r.Topics[0].Partitions[0].LowWatermark != 0 || r.Topics[2].Topic != "other" ||
			!slices.Equal(got, []int16{0, kerr.UnknownTopicOrPartition.Code, kerr.TopicAuthorizationFailed.Code}) {
			t.Fatalf("v%d: codes %v, %+v", v, got, r.Topics)
		}
	}
}
