package broker_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rawBatch is an uncompressed RecordBatch v2 as a producer sends it.
func rawBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(values)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func produceReq(topic string, part int32, acks int16, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = acks
	req.TimeoutMillis = 5000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = topic
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition = part
	p.Records = batch
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

func produceCode(t *testing.T, c *brokertest.Raw, req *kmsg.ProduceRequest) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp := c.Roundtrip(req, 1).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

func fetchReq(v int16, topic string, id [16]byte, part int32, offset int64, wait int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(v)
	req.ReplicaID = -1
	req.MaxWaitMillis = wait
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = topic, id
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition, p.FetchOffset, p.PartitionMaxBytes, p.CurrentLeaderEpoch = part, offset, 1<<20, -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

func createTopic(t *testing.T, addr, name string, partitions int32) kadm.TopicDetail {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, name); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	md, err := adm.ListTopics(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return md[name]
}

func TestProduceBadInput(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.MessageMaxBytes = 2000 })
	createTopic(t, b.Addr(), "bad", 1)
	c := brokertest.Dial(t, b.Addr())

	good := rawBatch(-1, -1, -1, "a", "b")
	if r := produceCode(t, c, produceReq("bad", 0, -1, good)); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("good batch: %+v", r)
	}
	corrupt := rawBatch(-1, -1, -1, "a")
	corrupt[len(corrupt)-1] ^= 0xff
	if r := produceCode(t, c, produceReq("bad", 0, 1, corrupt)); r.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("corrupt CRC: %+v", r)
	}
	big := rawBatch(-1, -1, -1, string(make([]byte, 3000)))
	if r := produceCode(t, c, produceReq("bad", 0, 1, big)); r.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("oversized: %+v", r)
	}
	if r := produceCode(t, c, produceReq("nope", 0, 1, good)); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %+v", r)
	}
	if r := produceCode(t, c, produceReq("bad", 9, 1, good)); r.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown partition: %+v", r)
	}
	if r := produceCode(t, c, produceReq("bad", 0, 2, good)); r.ErrorCode != kerr.InvalidRequiredAcks.Code {
		t.Fatalf("acks=2: %+v", r)
	}
	// Idempotence: in order, duplicate, out of order.
	if r := produceCode(t, c, produceReq("bad", 0, -1, rawBatch(5, 0, 0, "x", "y"))); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("idempotent first: %+v", r)
	}
	if r := produceCode(t, c, produceReq("bad", 0, -1, rawBatch(5, 0, 0, "x", "y"))); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("duplicate: %+v", r)
	}
	if r := produceCode(t, c, produceReq("bad", 0, -1, rawBatch(5, 0, 7, "z"))); r.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("out of order: %+v", r)
	}
	// Nothing rejected reached the log.
	f := c.Roundtrip(fetchReq(11, "bad", [16]byte{}, 0, 0, 0), 2).(*kmsg.FetchResponse)
	if p := f.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.HighWatermark != 4 {
		t.Fatalf("after bad input: %+v", p)
	}
	// acks=0 gets no response; the next request's response arrives first.
	c.Send(produceReq("bad", 0, 0, rawBatch(-1, -1, -1, "q")), 3)
	md := c.Roundtrip(metadata(9, "bad"), 4).(*kmsg.MetadataResponse)
	if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata after acks=0: %+v", md.Topics)
	}
}

func TestFetchWire(t *testing.T) {
	b := brokertest.Start(t, nil)
	td := createTopic(t, b.Addr(), "f", 1)
	c := brokertest.Dial(t, b.Addr())
	produceCode(t, c, produceReq("f", 0, -1, rawBatch(-1, -1, -1, "one", "two")))

	for _, v := range []int16{4, 11, 12, 13, 16, 18} {
		req := fetchReq(v, "f", td.ID, 0, 1, 0)
		if v >= 13 {
			req.Topics[0].Topic = ""
		}
		resp := c.Roundtrip(req, 5).(*kmsg.FetchResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 2 || len(p.RecordBatches) == 0 {
			t.Fatalf("v%d: %+v", v, p)
		}
		if v >= 13 && resp.Topics[0].TopicID != td.ID {
			t.Fatalf("v%d: topic id %x", v, resp.Topics[0].TopicID)
		}
	}
	// Produce v13 names the topic by id.
	byID := produceReq("", 0, -1, rawBatch(-1, -1, -1, "by-id"))
	byID.SetVersion(13)
	byID.Topics[0].TopicID = td.ID
	if r := produceCode(t, c, byID); r.ErrorCode != 0 || r.BaseOffset != 2 {
		t.Fatalf("produce v13 by id: %+v", r)
	}
	byID.Topics[0].TopicID = [16]byte{7}
	if r := produceCode(t, c, byID); r.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("produce v13 unknown id: %+v", r)
	}
	// Beyond the end.
	p := c.Roundtrip(fetchReq(11, "f", [16]byte{}, 0, 4, 0), 6).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("beyond end: %+v", p)
	}
	// Unknown topic, unknown topic id.
	p = c.Roundtrip(fetchReq(11, "zz", [16]byte{}, 0, 0, 0), 7).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %+v", p)
	}
	req := fetchReq(13, "", [16]byte{1}, 0, 0, 0)
	p = c.Roundtrip(req, 8).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: %+v", p)
	}
	// Long poll: a fetch at the end waits and is answered by the next produce.
	c.Send(fetchReq(11, "f", [16]byte{}, 0, 3, 10000), 9)
	other := brokertest.Dial(t, b.Addr())
	produceCode(t, other, produceReq("f", 0, 1, rawBatch(-1, -1, -1, "three")))
	var fr kmsg.FetchResponse
	fr.Version = 11
	if corr := c.Recv(&fr); corr != 9 || len(fr.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatalf("long poll: corr %d %+v", corr, fr.Topics[0].Partitions[0])
	}
}

func TestTopicAdminWire(t *testing.T) {
	b := brokertest.Start(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	r, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"retention.ms": kmsg.StringPtr("1000")}, "adm")
	if err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	for _, bad := range []struct {
		name string
		p    int32
		rf   int16
		cfg  map[string]*string
		want error
	}{
		{"adm", 1, 1, nil, kerr.TopicAlreadyExists},
		{"a/b", 1, 1, nil, kerr.InvalidTopicException},
		{"..", 1, 1, nil, kerr.InvalidTopicException},
		{"zero", 0, 1, nil, kerr.InvalidPartitions},
		{"rf", 1, 3, nil, kerr.InvalidReplicationFactor},
		{"cfg", 1, 1, map[string]*string{"no.such.config": kmsg.StringPtr("1")}, kerr.InvalidConfig},
		{"none", 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("")}, kerr.InvalidConfig},
		// Apache's LogConfig.validateValues: the lags in order, and max at least 1.
		{"lag", 1, 1, map[string]*string{"min.compaction.lag.ms": kmsg.StringPtr("60001"), "max.compaction.lag.ms": kmsg.StringPtr("60000")}, kerr.InvalidConfig},
		{"maxlag", 1, 1, map[string]*string{"max.compaction.lag.ms": kmsg.StringPtr("0")}, kerr.InvalidConfig},
		// Apache's ranges of the compaction settings.
		{"ratio", 1, 1, map[string]*string{"min.cleanable.dirty.ratio": kmsg.StringPtr("1.5")}, kerr.InvalidConfig},
		{"minlag", 1, 1, map[string]*string{"min.compaction.lag.ms": kmsg.StringPtr("-1")}, kerr.InvalidConfig},
		{"tombs", 1, 1, map[string]*string{"delete.retention.ms": kmsg.StringPtr("-5")}, kerr.InvalidConfig},
		{"typo", 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("delet")}, kerr.InvalidConfig},
	} {
		r, _ := adm.CreateTopic(ctx, bad.p, bad.rf, bad.cfg, bad.name)
		if r.Err != bad.want {
			t.Errorf("create %s: %v, want %v", bad.name, r.Err, bad.want)
		}
	}
	// Validate only creates nothing.
	vr, err := adm.ValidateCreateTopics(ctx, 1, 1, nil, "dry")
	if err != nil || vr["dry"].Err != nil {
		t.Fatalf("validate: %v %v", err, vr["dry"].Err)
	}
	td, err := adm.ListTopics(ctx)
	if err != nil || len(td) != 1 || len(td["adm"].Partitions) != 2 {
		t.Fatalf("list: %v %+v", err, td)
	}
	// Describe configs shows the override and the defaults.
	rc, err := adm.DescribeTopicConfigs(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := rc.On("adm", nil)
	found := false
	for _, c := range cfg.Configs {
		if c.Key == "retention.ms" {
			found = c.MaybeValue() == "1000" && c.Source == kmsg.ConfigSourceDynamicTopicConfig
		}
	}
	if !found {
		t.Fatalf("retention.ms override not described: %+v", cfg.Configs)
	}
	if _, err := adm.DescribeBrokerConfigs(ctx); err != nil {
		t.Fatalf("broker configs: %v", err)
	}
	// Partitions only grow.
	cp, err := adm.CreatePartitions(ctx, 2, "adm")
	if err != nil || cp["adm"].Err != nil {
		t.Fatalf("create partitions: %v %v", err, cp["adm"].Err)
	}
	cp, _ = adm.UpdatePartitions(ctx, 3, "adm")
	if cp["adm"].Err != kerr.InvalidPartitions {
		t.Fatalf("shrink: %v", cp["adm"].Err)
	}
	// Offsets by time on an empty topic, then delete.
	lo, err := adm.ListEndOffsets(ctx, "adm")
	if err != nil || lo.Error() != nil {
		t.Fatalf("end offsets: %v %v", err, lo.Error())
	}
	dr, err := adm.DeleteTopics(ctx, "adm", "missing")
	if err != nil || dr["adm"].Err != nil || dr["missing"].Err != kerr.UnknownTopicOrPartition {
		t.Fatalf("delete: %v %+v", err, dr)
	}
	// kgo caches metadata briefly: ask the broker itself.
	all := kmsg.NewPtrMetadataRequest()
	all.SetVersion(12)
	md := brokertest.Dial(t, b.Addr()).Roundtrip(all, 1).(*kmsg.MetadataResponse)
	if len(md.Topics) != 0 {
		t.Fatalf("after delete: %+v", md.Topics)
	}
}

func TestKgoProduceConsume(t *testing.T) {
	b := brokertest.Start(t, nil)
	const n = 2000
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("e2e"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("e2e"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := 0
	for next < n {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != fmt.Sprint(next) || r.Offset != int64(next) {
				t.Fatalf("record %d: offset %d value %s", next, r.Offset, r.Value)
			}
			next++
		})
	}
	// Restart keeps everything.
}

func TestMetadataTopicsWire(t *testing.T) {
	b := brokertest.Start(t, nil)
	c := brokertest.Dial(t, b.Addr())
	// Auto-created on first ask (v4+ asks for it explicitly), with num.partitions.
	req := metadata(10, "auto")
	req.AllowAutoTopicCreation = true
	md := c.Roundtrip(req, 1).(*kmsg.MetadataResponse)
	mt := md.Topics[0]
	if mt.ErrorCode != 0 || len(mt.Partitions) != 1 || mt.Partitions[0].Leader != 0 || mt.TopicID == [16]byte{} {
		t.Fatalf("auto-created: %+v", mt)
	}
	// Not created when the request does not allow it.
	md = c.Roundtrip(metadata(9, "manual"), 2).(*kmsg.MetadataResponse)
	if md.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("not allowed: %+v", md.Topics[0])
	}
	// Invalid names.
	req = metadata(9, "bad name!")
	req.AllowAutoTopicCreation = true
	md = c.Roundtrip(req, 3).(*kmsg.MetadataResponse)
	if md.Topics[0].ErrorCode != kerr.InvalidTopicException.Code {
		t.Fatalf("invalid name: %+v", md.Topics[0])
	}
	// By id (v12), known and unknown.
	byID := kmsg.NewPtrMetadataRequest()
	byID.SetVersion(12)
	for _, id := range [][16]byte{mt.TopicID, {9}} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		byID.Topics = append(byID.Topics, rt)
	}
	md = c.Roundtrip(byID, 4).(*kmsg.MetadataResponse)
	if md.Topics[0].ErrorCode != 0 || *md.Topics[0].Topic != "auto" || md.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("by id: %+v", md.Topics)
	}
	// v0 (empty list = all topics) and null list = all.
	md = c.Roundtrip(metadata(0), 5).(*kmsg.MetadataResponse)
	if len(md.Topics) != 1 {
		t.Fatalf("v0 all: %+v", md.Topics)
	}
}

func TestMetadataAutoCreateDisabled(t *testing.T) {
	b := brokertest.Start(t, func(c *config.Config) { c.AutoCreateTopics = false })
	c := brokertest.Dial(t, b.Addr())
	req := metadata(9, "auto")
	req.AllowAutoTopicCreation = true
	if md := c.Roundtrip(req, 1).(*kmsg.MetadataResponse); md.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("created although disabled: %+v", md.Topics[0])
	}
}

func TestOffsetsWire(t *testing.T) {
	b := brokertest.Start(t, nil)
	createTopic(t, b.Addr(), "o", 1)
	c := brokertest.Dial(t, b.Addr())
	for i := 0; i < 3; i++ {
		produceCode(t, c, produceReq("o", 0, -1, rawBatch(-1, -1, -1, "a", "b")))
	}
	list := func(ts int64, epoch int32) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		req.SetVersion(7)
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "o"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return c.Roundtrip(req, 1).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	if p := list(-2, -1); p.ErrorCode != 0 || p.Offset != 0 {
		t.Fatalf("earliest: %+v", p)
	}
	if p := list(-1, -1); p.ErrorCode != 0 || p.Offset != 6 || p.LeaderEpoch != 0 {
		t.Fatalf("latest: %+v", p)
	}
	if p := list(-3, -1); p.ErrorCode != 0 || p.Offset < 0 || p.Timestamp <= 0 {
		t.Fatalf("max timestamp: %+v", p)
	}
	if p := list(time.Now().Add(-time.Hour).UnixMilli(), -1); p.ErrorCode != 0 || p.Offset != 0 {
		t.Fatalf("by old timestamp: %+v", p)
	}
	if p := list(time.Now().Add(time.Hour).UnixMilli(), -1); p.ErrorCode != 0 || p.Offset != -1 {
		t.Fatalf("by future timestamp: %+v", p)
	}
	if p := list(-1, 5); p.ErrorCode != kerr.UnknownLeaderEpoch.Code {
		t.Fatalf("newer epoch: %+v", p)
	}
	// OffsetForLeaderEpoch: epoch 0 ends at the log end; a newer one is unknown.
	ofe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ofe.SetVersion(4)
	ofe.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "o"
	for _, ep := range []int32{0, 3} {
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, -1, ep
		rt.Partitions = append(rt.Partitions, rp)
	}
	ofe.Topics = append(ofe.Topics, rt)
	ps := c.Roundtrip(ofe, 2).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions
	if ps[0].ErrorCode != 0 || ps[0].LeaderEpoch != 0 || ps[0].EndOffset != 6 || ps[1].EndOffset != -1 {
		t.Fatalf("offset for leader epoch: %+v", ps)
	}
	// InitProducerId: fresh ids; a transactional one from the coordinator, never an
	// idempotent producer's.
	ipid := kmsg.NewPtrInitProducerIDRequest()
	ipid.SetVersion(4)
	ipid.ProducerID, ipid.ProducerEpoch = -1, -1
	r1 := c.Roundtrip(ipid, 3).(*kmsg.InitProducerIDResponse)
	r2 := c.Roundtrip(ipid, 4).(*kmsg.InitProducerIDResponse)
	if r1.ErrorCode != 0 || r2.ErrorCode != 0 || r1.ProducerID == r2.ProducerID {
		t.Fatalf("init producer id: %+v %+v", r1, r2)
	}
	ipid.TransactionalID = kmsg.StringPtr("txn")
	ipid.TransactionTimeoutMillis = 60000
	if r := c.Roundtrip(ipid, 5).(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 || r.ProducerID == r1.ProducerID || r.ProducerID == r2.ProducerID {
		t.Fatalf("transactional: %+v", r)
	}
}

func TestDataSurvivesRestart(t *testing.T) {
	c := brokertest.Config(t)
	b := brokertest.StartWith(t, c)
	createTopic(t, b.Addr(), "keep", 2)
	raw := brokertest.Dial(t, b.Addr())
	produceCode(t, raw, produceReq("keep", 1, -1, rawBatch(3, 0, 0, "a", "b", "c")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.StartWith(t, c)
	raw = brokertest.Dial(t, b.Addr())
	// Producer state is rebuilt: the same batch is a duplicate, the next one follows.
	if r := produceCode(t, raw, produceReq("keep", 1, -1, rawBatch(3, 0, 0, "a", "b", "c"))); r.ErrorCode != 0 || r.BaseOffset != 0 {
		t.Fatalf("duplicate after restart: %+v", r)
	}
	if r := produceCode(t, raw, produceReq("keep", 1, -1, rawBatch(3, 0, 3, "d"))); r.ErrorCode != 0 || r.BaseOffset != 3 {
		t.Fatalf("next after restart: %+v", r)
	}
	p := raw.Roundtrip(fetchReq(11, "keep", [16]byte{}, 1, 0, 0), 9).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.HighWatermark != 4 {
		t.Fatalf("after restart: %+v", p)
	}
}
