package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/testwait"
)

// TestDeleteRecordsLeaderMove deletes the records below an offset of a partition, kills
// its leader with kill -9, and checks on the broker that takes the partition over that the
// log start offset moved with it: DeleteRecords below it answers the same low watermark,
// ListOffsets earliest is it, a Fetch below it is OFFSET_OUT_OF_RANGE with it as the log
// start offset, and a Fetch at it returns its record. Then the new leader moves it further,
// the killed broker comes back, and a consumer from the start begins there.
func TestDeleteRecordsLeaderMove(t *testing.T) {
	const (
		purged  = "purged"
		records = 50
		cut     = 20
		further = 30
	)
	c := newCluster(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testwait.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		resp, err := adm.CreateTopic(ctx, 2, 1, nil, purged)
		if err != nil || (resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists)) {
			return fmt.Errorf("create topic: %v / %v", err, resp.Err)
		}
		return nil
	})
	var rs []*kgo.Record
	for i := 0; i < records; i++ {
		rs = append(rs, &kgo.Record{Topic: purged, Partition: 0, Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	leaderOf := func() (int32, kadm.TopicDetail, error) {
		md, err := adm.Metadata(ctx, purged)
		if err != nil {
			return -1, kadm.TopicDetail{}, err
		}
		td := md.Topics[purged]
		if td.Err != nil {
			return -1, td, td.Err
		}
		return td.Partitions[0].Leader, td, nil
	}
	deleteBelow := func(at int64) (int64, error) {
		o := make(kadm.Offsets)
		o.Add(kadm.Offset{Topic: purged, Partition: 0, At: at, LeaderEpoch: -1})
		resps, err := adm.DeleteRecords(ctx, o)
		if err != nil {
			return -1, err
		}
		r, ok := resps.Lookup(purged, 0)
		if !ok {
			return -1, errors.New("partition 0 missing from the DeleteRecords response")
		}
		return r.LowWatermark, r.Err
	}
	earliest := func() (int64, error) {
		offs, err := adm.ListStartOffsets(ctx, purged)
		if err != nil {
			return -1, err
		}
		o, ok := offs.Lookup(purged, 0)
		if !ok {
			return -1, errors.New("partition 0 missing from ListOffsets")
		}
		return o.Offset, o.Err
	}

	old, _, err := leaderOf()
	if err != nil {
		t.Fatal(err)
	}
	if low, err := deleteBelow(cut); err != nil || low != cut {
		t.Fatalf("DeleteRecords before %d on leader %d: low watermark %d, %v", cut, old, low, err)
	}
	t.Logf("partition 0's records below %d deleted on leader %d; killing it", cut, old)
	c.procs[old].Kill()

	var leader int32
	var td kadm.TopicDetail
	testwait.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		if leader, td, err = leaderOf(); err != nil {
			return err
		}
		if leader == old || leader < 0 {
			return fmt.Errorf("partition 0 still led by %d", leader)
		}
		_, err := earliest()
		return err
	})
	t.Logf("partition 0 now led by %d", leader)

	if at, err := earliest(); err != nil || at != cut {
		t.Errorf("ListOffsets earliest on the new leader %d: %d, %v; want %d", leader, at, err, cut)
	}
	if low, err := deleteBelow(cut / 2); err != nil || low != cut {
		t.Errorf("DeleteRecords before %d (below the start) on the new leader: low watermark %d, %v; want %d", cut/2, low, err, cut)
	}
	fetch := func(at int64) *kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = purged, td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, at, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			t.Fatalf("fetch from %d on broker %d: %v", at, leader, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch from %d: %d topics in the response (error %d)", at, len(resp.Topics), resp.ErrorCode)
		}
		return &resp.Topics[0].Partitions[0]
	}
	if p := fetch(cut / 2); p.ErrorCode != kerr.OffsetOutOfRange.Code || p.LogStartOffset != cut {
		t.Errorf("Fetch from %d on the new leader: error %v, log start offset %d; want OFFSET_OUT_OF_RANGE, %d", cut/2, kerr.ErrorForCode(p.ErrorCode), p.LogStartOffset, cut)
	}
	if first := consumeFrom(ctx, t, c.seeds(), purged, kgo.NewOffset().At(cut)); first.Offset != cut || string(first.Value) != "v"+strconv.Itoa(cut) {
		t.Errorf("a consumer from %d on the new leader began with %d (%s), want %d", cut, first.Offset, first.Value, cut)
	}

	// The new leader moves the start further; the killed broker comes back; a consumer
	// from the start begins there.
	if low, err := deleteBelow(further); err != nil || low != further {
		t.Errorf("DeleteRecords before %d on the new leader: low watermark %d, %v", further, low, err)
	}
	c.start(int(old))
	if first := consumeFrom(ctx, t, c.seeds(), purged, kgo.NewOffset().AtStart()); first.Offset != further || string(first.Value) != "v"+strconv.Itoa(further) {
		t.Errorf("a consumer from the start began with %d (%s), want %d", first.Offset, first.Value, further)
	}
	if at, err := earliest(); err != nil || at != further {
		t.Errorf("ListOffsets earliest after the old leader's restart: %d, %v; want %d", at, err, further)
	}
}

// consumeFrom returns the first record of partition 0 of topic a consumer starting at
// offset is given.
func consumeFrom(ctx context.Context, t *testing.T, seeds []string, topic string, offset kgo.Offset) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: offset}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume partition 0 of %s: %v", topic, err)
		}
		if err := fs.Err(); err != nil {
			t.Fatalf("consume partition 0 of %s: %v", topic, err)
		}
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0]
		}
	}
}
