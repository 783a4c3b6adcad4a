package conn

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/config"
	"kaas/metrics"
	"kaas/registry"
)

// seen counts, by type, the messages a proxy in front of the topics manager passed on.
type seen struct {
	mu sync.Mutex
	by map[string]int
}

func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.by))
	for k, n := range s.by {
		out[k] = n
	}
	return out
}

// since is what the proxy passed on after before was taken, by type.
func (s *seen) since(before map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range s.snapshot() {
		if n > before[k] {
			out[k] = n - before[k]
		}
	}
	return out
}

// serveWithTopics runs connection actors on a loopback listener over a real topics
// manager (in dir), whose mailbox is reached through a proxy that counts what it gets.
func serveWithTopics(t *testing.T) (string, *seen) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	sys := actor.NewSystem(zerolog.Nop())
	catalog := partition.NewCatalog()
	topics := sys.Spawn(partition.ManagerProps(partition.Config{Broker: &cfg, Log: zerolog.Nop(), Catalog: catalog}))
	<-catalog.Loaded() // as the broker waits before it accepts connections
	s := &seen{by: map[string]int{}}
	proxy := sys.Spawn(actor.PropsOf(func() actor.Actor {
		return actorFunc(func(ctx actor.Context) {
			switch m := ctx.Message().(type) {
			case *actor.Started, *actor.Stopping, *actor.Stopped:
			default:
				s.mu.Lock()
				s.by[fmt.Sprintf("%T", m)]++
				s.mu.Unlock()
				ctx.Send(topics, m)
			}
		})
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	env := &Env{
		Config: &cfg, ClusterID: "test", System: sys, Metrics: metrics.New(), Log: zerolog.Nop(),
		Registry: registry.NewDev(registry.Broker{Alive: true, Endpoints: map[string]registry.Endpoint{
			"PLAINTEXT": {Host: "127.0.0.1", Port: int32(addr.Port)}}}),
		Topics: proxy, Catalog: catalog,
	}
	var conns sync.WaitGroup
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			sys.Spawn(Props(Config{Env: env, Conn: nc, Listener: "PLAINTEXT", MaxFrame: 1 << 20,
				Idle: time.Minute, MaxInflight: 64, OnStop: conns.Done}))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		_ = sys.Poison(topics, 5*time.Second)
		sys.Shutdown()
	})
	return ln.Addr().String(), s
}

type actorFunc func(ctx actor.Context)

func (f actorFunc) Receive(ctx actor.Context) { f(ctx) }

// Produce, ListOffsets, OffsetForLeaderEpoch and Fetch go from the connection to the
// partition actors: the topics manager, whose mailbox carries topic administration, gets
// nothing from them (only the clients' Metadata and the producer's InitProducerId). Pipelined idempotent produces
// still reach the partition in the order they were sent.
func TestDataRequestsBypassTheTopicsManager(t *testing.T) {
	addr, s := serveWithTopics(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("routed"),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(10000), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(512))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "routed", 2, -1
	create.Topics = append(create.Topics, ct)
	if resp, err := create.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}
	before := s.snapshot()
	const n = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	last := map[int32]int64{0: -1, 1: -1}
	var failed error
	for i := range n {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
			if err == nil {
				if r.Offset <= last[r.Partition] && failed == nil {
					failed = fmt.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition])
				}
				last[r.Partition] = r.Offset
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 5 // roundtrip reads a v0 response header
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "routed"
	for p := range int32(3) {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = append(lo.Topics, lt)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r, err := roundtrip(t, nc, lo)
	if err != nil {
		t.Fatal(err)
	}
	got := r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions
	if got[0].ErrorCode != 0 || got[0].Offset != n/2 || got[1].ErrorCode != 0 || got[1].Offset != n/2 ||
		got[2].ErrorCode != 3 {
		t.Fatalf("list offsets: %+v", got)
	}
	ofe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ofe.Version, ofe.ReplicaID = 3, -1 // roundtrip reads a v0 response header
	ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
	ot.Topic = "routed"
	for _, q := range []struct{ partition, epoch int32 }{{0, 0}, {1, 3}, {2, 0}} {
		op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		op.Partition, op.CurrentLeaderEpoch, op.LeaderEpoch = q.partition, -1, q.epoch
		ot.Partitions = append(ot.Partitions, op)
	}
	ofe.Topics = append(ofe.Topics, ot)
	r, err = roundtrip(t, nc, ofe)
	if err != nil {
		t.Fatal(err)
	}
	ends := r.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions
	if ends[0].ErrorCode != 0 || ends[0].LeaderEpoch != 0 || ends[0].EndOffset != n/2 ||
		ends[1].ErrorCode != 0 || ends[1].EndOffset != -1 || ends[2].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("offset for leader epoch: %+v", ends)
	}
	// Fetch: everything produced, then a long poll parked at the end that the next
	// produce wakes.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"routed": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}), kgo.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for got := 0; got < n; {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	polled := make(chan []*kgo.Record, 1)
	go func() { polled <- consumer.PollFetches(ctx).Records() }()
	// The poll is parked once the partition holds its watch; a produce then wakes it.
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("late")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if recs := <-polled; len(recs) != 1 || string(recs[0].Value) != "late" {
		t.Fatalf("the long poll got %d records, want the late one", len(recs))
	}
	extra := s.since(before)
	delete(extra, "*partition.Describe")       // the clients' Metadata
	delete(extra, "*partition.InitProducerID") // the idempotent producer's id
	if len(extra) != 0 {
		t.Fatalf("the topics manager got %v from the data requests, want nothing", extra)
	}
}

// A Fetch parked on a topic that is then deleted is answered (NOT_LEADER_OR_FOLLOWER,
// or UNKNOWN_TOPIC_OR_PARTITION when the deletion came first), not left to its
// max_wait_ms; the connection goes on serving.
func TestParkedFetchOnDeletedTopicIsAnswered(t *testing.T) {
	addr, _ := serveWithTopics(t)
	admin, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 4
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "doomed", 1, -1
	create.Topics = append(create.Topics, ct)
	if r, err := roundtrip(t, admin, create); err != nil || r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, r)
	}
	fetcher, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fetcher.Close()
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 11
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes, fetch.SessionEpoch = 60000, 1, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "doomed"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 1<<20, -1
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	if _, err := fetcher.Write(kmsg.NewRequestFormatter().AppendRequest(nil, fetch, 9)); err != nil {
		t.Fatal(err)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version = 3
	del.TopicNames = []string{"doomed"}
	if r, err := roundtrip(t, admin, del); err != nil || r.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %+v", err, r)
	}
	_ = fetcher.SetReadDeadline(time.Now().Add(30 * time.Second))
	var size [4]byte
	if _, err := readFull(fetcher, size[:]); err != nil {
		t.Fatalf("the parked fetch was not answered: %v", err)
	}
	b := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
	if _, err := readFull(fetcher, b); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = 11
	if err := resp.ReadFrom(b[4:]); err != nil {
		t.Fatal(err)
	}
	code := resp.Topics[0].Partitions[0].ErrorCode
	if code != kerr.NotLeaderForPartition.Code && code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("the parked fetch on a deleted topic answered %d", code)
	}
	if _, err := roundtrip(t, fetcher, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("the connection after: %v", err)
	}
}
