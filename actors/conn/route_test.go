package conn

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

func (s *seen) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[kind]
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

// Produce and ListOffsets go from the connection to the partition actors: the topics
// manager, whose mailbox carries topic administration, sees none of them. Pipelined
// idempotent produces still reach the partition in the order they were sent.
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
	if k := s.count("*partition.Produce") + s.count("*partition.ListOffsets"); k != 0 {
		t.Fatalf("the topics manager got %d produce and %d list-offsets requests, want none",
			s.count("*partition.Produce"), s.count("*partition.ListOffsets"))
	}
}
