package group_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/internal/testwait"
)

// franz-go classic consumers (an eager balancer: a member gives up everything before it
// rejoins) are in a rebalance, one of them still busy giving up its partitions, when a
// member on the consumer protocol joins: the group is converted at once, the classic
// members rejoin the consumer group through its classic path, the busy one when it is
// done; nobody gets a partition its owner has not given up, and every record is
// consumed.
func TestMigrationFranzGoDuringRebalance(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	const parts, perRound = 6, 10
	w.createTopics(parts, "t")
	prod, err := kgo.NewClient(kgo.SeedBrokers(w.b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	rounds := 0
	produce := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rs []*kgo.Record
		for p := int32(0); p < parts; p++ {
			for i := 0; i < perRound; i++ {
				rs = append(rs, &kgo.Record{Topic: "t", Partition: p, Value: []byte(fmt.Sprintf("%d-%d-%d", rounds, p, i))})
			}
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		rounds++
	}

	own := &ownership{t: t, owner: map[int32]string{}, dead: map[string]bool{}, revoked: map[string]int{}}
	var mu sync.Mutex
	seen := map[string]int{}
	// The busy member: once armed, its next revocation of partitions waits for gate,
	// having said so on blocked, still owning them.
	var armed atomic.Bool
	blocked, gate := make(chan struct{}), make(chan struct{})
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	type consumer struct {
		cl   *kgo.Client
		done chan struct{}
	}
	var started []*consumer
	stopAll := func() {
		open()
		for _, c := range started {
			c.cl.Close()
			<-c.done
		}
		started = nil
	}
	t.Cleanup(stopAll) // a failed test does not leave clients behind
	start := func(name string, serverSide, busy bool) *consumer {
		c := &consumer{done: make(chan struct{})}
		opts := []kgo.Opt{
			kgo.SeedBrokers(w.b.Addr()), kgo.ClientID(name),
			kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.AutoCommitInterval(100 * time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.assigned(name, ps) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				if busy && len(ps["t"]) > 0 && armed.CompareAndSwap(true, false) {
					close(blocked)
					<-gate
				}
				own.released(name, ps)
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.released(name, ps) }),
		}
		if serverSide {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		c.cl, err = kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, c)
		go func() {
			defer close(c.done)
			for {
				fs := c.cl.PollFetches(context.Background())
				if fs.IsClientClosed() {
					return
				}
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
				mu.Unlock()
			}
		}()
		return c
	}
	consumedAll := func() {
		t.Helper()
		testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if want := rounds * parts * perRound; len(seen) != want {
				return fmt.Errorf("%d records consumed of %d", len(seen), want)
			}
			return nil
		})
	}
	checkOwners := func() {
		t.Helper()
		own.mu.Lock()
		defer own.mu.Unlock()
		if len(own.bad) > 0 {
			t.Fatalf("a partition had two owners: %v", own.bad)
		}
	}

	produce()
	start("c1", false, false)
	start("c2", false, true)
	testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		dg := describe(w, 5, "g").Groups[0]
		if dg.State != "Stable" || len(dg.Members) != 2 {
			return fmt.Errorf("classic group %s with %d members", dg.State, len(dg.Members))
		}
		return nil
	})
	consumedAll()

	// A third classic member starts a rebalance; c2 is held in its revocation, so the
	// round waits for it.
	armed.Store(true)
	start("c3", false, false)
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("c2 was never asked to give up its partitions")
	}
	testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		dg := describe(w, 5, "g").Groups[0]
		if dg.State != "PreparingRebalance" || len(dg.Members) != 3 {
			return fmt.Errorf("classic group %s with %d members", dg.State, len(dg.Members))
		}
		return nil
	})
	// The consumer-protocol member joins in the middle of it.
	start("n1", true, false)
	testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		d := w.cgDescribe(1, "g").Groups[0]
		if d.ErrorCode != 0 {
			return fmt.Errorf("describe: %s", codeName(d.ErrorCode))
		}
		for _, m := range d.Members {
			if m.ClientID == "n1" && m.MemberType == 1 {
				return nil
			}
		}
		return fmt.Errorf("n1 not in the group yet")
	})
	checkOwners()
	open()

	// Everybody settles in the converted group, every partition assigned once.
	testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		d := w.cgDescribe(1, "g").Groups[0]
		if d.ErrorCode != 0 {
			return fmt.Errorf("describe: %s", codeName(d.ErrorCode))
		}
		if d.State != "Stable" || len(d.Members) != 4 {
			return fmt.Errorf("state %s with %d members", d.State, len(d.Members))
		}
		total := 0
		for _, m := range d.Members {
			want := int8(0) // classic
			if m.ClientID == "n1" {
				want = 1
			}
			if m.MemberType != want {
				return fmt.Errorf("member %s of type %d", m.ClientID, m.MemberType)
			}
			for _, tp := range m.Assignment.TopicPartitions {
				total += len(tp.Partitions)
			}
		}
		if total != parts {
			return fmt.Errorf("%d partitions assigned", total)
		}
		return nil
	})
	produce()
	consumedAll()
	checkOwners()
	stopAll()
	checkOwners()
}
