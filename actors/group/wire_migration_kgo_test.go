package group_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/testwait"
)

// franz-go consumers through an online upgrade and back: classic members
// (cooperative-sticky) consume, members on the consumer protocol
// (kgo.ServerSideBalancer) join the same group and convert it, the classic ones leave;
// then classic members join the consumer-protocol group, the consumer-protocol ones
// leave and the group goes back to the classic protocol. Throughout, no partition has
// two owners at once (the assign and revoke callbacks), every record is consumed, and a
// record is consumed again only when its partition changed hands before its offset was
// committed (at-least-once), never otherwise.
func TestMigrationFranzGo(t *testing.T) {
	w := startWire(t, migrationProfile(""))
	const parts = 6
	w.createTopics(parts, "t")
	prod, err := kgo.NewClient(kgo.SeedBrokers(w.b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const perRound = 10 // per partition
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
	handoffs := map[int32]int{} // partition → times it changed hands
	dups := 0
	var commitErrs []string
	type consumer struct {
		cl   *kgo.Client
		done chan struct{}
	}
	start := func(name string, serverSide bool) *consumer {
		c := &consumer{done: make(chan struct{})}
		opts := []kgo.Opt{
			kgo.SeedBrokers(w.b.Addr()), kgo.ClientID(name),
			kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.AutoCommitInterval(100 * time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				own.assigned(name, ps)
				mu.Lock()
				for _, p := range ps["t"] {
					handoffs[p]++
				}
				mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.released(name, ps) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.released(name, ps) }),
			kgo.AutoCommitCallback(func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && !errors.Is(err, context.Canceled) {
					commitErrs = append(commitErrs, name+": "+err.Error())
				}
				if resp != nil {
					for _, tt := range resp.Topics {
						for _, p := range tt.Partitions {
							// A classic member's commit racing its own rejoin is refused at the old
							// generation, as a classic group refuses it (the offsets are committed
							// again, or consumed again: at-least-once).
							if p.ErrorCode != 0 && p.ErrorCode != kerr.IllegalGeneration.Code && p.ErrorCode != kerr.RebalanceInProgress.Code {
								commitErrs = append(commitErrs, name+": partition "+strconv.Itoa(int(p.Partition))+" code "+codeName(p.ErrorCode))
							}
						}
					}
				}
			}),
		}
		if serverSide {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		c.cl, err = kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.done)
			for {
				fs := c.cl.PollFetches(context.Background())
				if fs.IsClientClosed() {
					return
				}
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) {
					if seen[string(r.Value)]++; seen[string(r.Value)] > 1 {
						dups++
					}
				})
				mu.Unlock()
			}
		}()
		return c
	}
	stop := func(cs ...*consumer) {
		for _, c := range cs {
			c.cl.Close()
			<-c.done
		}
	}
	// mixed waits until ConsumerGroupDescribe shows the group Stable with the named
	// members of each type, all partitions assigned.
	mixed := func(classic, consumer []string) {
		t.Helper()
		testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			d := w.cgDescribe(1, "g").Groups[0]
			if d.ErrorCode != 0 {
				return fmt.Errorf("describe: %s", codeName(d.ErrorCode))
			}
			if d.State != "Stable" || len(d.Members) != len(classic)+len(consumer) {
				return fmt.Errorf("state %s with %d members", d.State, len(d.Members))
			}
			want := map[string]int8{}
			for _, n := range classic {
				want[n] = 0
			}
			for _, n := range consumer {
				want[n] = 1
			}
			total := 0
			for _, m := range d.Members {
				if ty, ok := want[m.ClientID]; !ok || ty != m.MemberType {
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
	}
	// classicStable waits until DescribeGroups shows a Stable classic group of n members.
	classicStable := func(n int) {
		t.Helper()
		testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			dg := describe(w, 5, "g").Groups[0]
			if dg.ErrorCode != 0 || dg.State != "Stable" || len(dg.Members) != n || dg.ProtocolType != "consumer" {
				return fmt.Errorf("classic group %s with %d members (code %d, type %q)", dg.State, len(dg.Members), dg.ErrorCode, dg.ProtocolType)
			}
			return nil
		})
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

	// Classic members consume.
	produce()
	c1, c2 := start("c1", false), start("c2", false)
	classicStable(2)
	consumedAll()
	// Members on the consumer protocol join: the group is upgraded and shared.
	n1 := start("n1", true)
	mixed([]string{"c1", "c2"}, []string{"n1"})
	n2 := start("n2", true)
	mixed([]string{"c1", "c2"}, []string{"n1", "n2"})
	produce()
	consumedAll()
	checkOwners()
	// The classic members leave.
	stop(c1)
	mixed([]string{"c2"}, []string{"n1", "n2"})
	stop(c2)
	mixed(nil, []string{"n1", "n2"})
	produce()
	consumedAll()
	checkOwners()

	// The reverse: classic members join the consumer-protocol group, the
	// consumer-protocol ones leave, and the group is classic again.
	c3, c4 := start("c3", false), start("c4", false)
	mixed([]string{"c3", "c4"}, []string{"n1", "n2"})
	produce()
	consumedAll()
	stop(n1)
	mixed([]string{"c3", "c4"}, []string{"n2"})
	stop(n2)
	classicStable(2)
	wantCode(t, "ConsumerGroupDescribe after the downgrade", w.cgDescribe(1, "g").Groups[0].ErrorCode, kerr.GroupIDNotFound.Code)
	produce()
	consumedAll()
	checkOwners()
	stop(c3, c4)

	mu.Lock()
	defer mu.Unlock()
	if len(commitErrs) > 0 {
		t.Fatalf("commits refused: %v", commitErrs)
	}
	// A record is consumed twice only if its partition changed hands (at-least-once):
	// at most one uncommitted autocommit interval's worth per handoff.
	moves := 0
	for _, n := range handoffs {
		moves += n
	}
	if dups > moves*perRound {
		t.Fatalf("%d records consumed twice for %d handoffs", dups, moves)
	}
	t.Logf("%d records, %d consumed twice, %d partition handoffs", len(seen), dups, moves)
}
