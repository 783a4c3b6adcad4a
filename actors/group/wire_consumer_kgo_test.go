package group_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/config"
	"kaas/internal/testwait"
)

// franz-go consumers on the consumer group protocol (kgo.ServerSideBalancer, used when
// the broker advertises ConsumerGroupHeartbeat v1). Every step is checked through
// ConsumerGroupDescribe, so a silent fallback to the classic protocol cannot pass.

// ownership tracks which member owns each partition, from the members' assign and
// revoke callbacks, and fails the test the moment two own one at once.
type ownership struct {
	t       *testing.T
	mu      sync.Mutex
	owner   map[int32]string
	dead    map[string]bool // members cut off: the group fenced them, their view is stale
	revoked map[string]int
	bad     []string
}

func (o *ownership) assigned(who string, ps map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead[who] {
		return
	}
	for _, p := range ps["t"] {
		if cur, ok := o.owner[p]; ok && cur != who {
			o.bad = append(o.bad, fmt.Sprintf("%s got partition %d still owned by %s", who, p, cur))
		}
		o.owner[p] = who
	}
}

func (o *ownership) released(who string, ps map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps["t"] {
		o.revoked[who]++
		if o.owner[p] == who {
			delete(o.owner, p)
		}
	}
}

func (o *ownership) cut(who string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dead[who] = true
	for p, w := range o.owner {
		if w == who {
			delete(o.owner, p)
		}
	}
}

// cuttable is a dialer whose connections a test can cut (a member cut off from the
// broker without leaving).
type cuttable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func (c *cuttable) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut off")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cuttable) cutOff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
}

func TestConsumerProtocolFranzGo(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.GroupConsumerSessionTimeout = 2 * time.Second
	})
	w.createTopics(6, "t")
	const perPartition = 50
	prod, err := kgo.NewClient(kgo.SeedBrokers(w.b.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(round int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rs []*kgo.Record
		for p := int32(0); p < 6; p++ {
			for i := 0; i < perPartition/5; i++ {
				rs = append(rs, &kgo.Record{Topic: "t", Partition: p, Value: []byte(fmt.Sprintf("%d-%d-%d", round, p, i))})
			}
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	own := &ownership{t: t, owner: map[int32]string{}, dead: map[string]bool{}, revoked: map[string]int{}}
	var mu sync.Mutex
	seen := map[string]bool{}
	var commitErrs []string
	type consumer struct {
		cl   *kgo.Client
		dial *cuttable
		done chan struct{}
	}
	start := func(name string) *consumer {
		c := &consumer{dial: &cuttable{}, done: make(chan struct{})}
		c.cl, err = kgo.NewClient(
			kgo.SeedBrokers(w.b.Addr()), kgo.ClientID(name), kgo.Dialer(c.dial.dial),
			kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.ServerSideBalancer(),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.AutoCommitInterval(100*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.assigned(name, ps) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.released(name, ps) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { own.released(name, ps) }),
			kgo.AutoCommitCallback(func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				mu.Lock()
				defer mu.Unlock()
				if own.isDead(name) {
					return
				}
				if err != nil && !errors.Is(err, context.Canceled) {
					commitErrs = append(commitErrs, name+": "+err.Error())
				}
				if resp != nil {
					for _, tt := range resp.Topics {
						for _, p := range tt.Partitions {
							if p.ErrorCode != 0 {
								commitErrs = append(commitErrs, name+": partition "+strconv.Itoa(int(p.Partition))+" code "+codeName(p.ErrorCode))
							}
						}
					}
				}
			}),
		)
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
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
				mu.Unlock()
			}
		}()
		return c
	}
	// describe waits until ConsumerGroupDescribe shows the group Stable with the named
	// clients, each with its share of the six partitions.
	describe := func(names ...string) map[string]int {
		t.Helper()
		got := map[string]int{}
		testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			d := w.cgDescribe(1, "g").Groups[0]
			if d.ErrorCode != 0 {
				return fmt.Errorf("describe: %s", codeName(d.ErrorCode))
			}
			if d.State != "Stable" || len(d.Members) != len(names) {
				return fmt.Errorf("state %s with %d members, want Stable with %d", d.State, len(d.Members), len(names))
			}
			got = map[string]int{}
			total := 0
			for _, m := range d.Members {
				if m.MemberType != 1 {
					return fmt.Errorf("member %s of type %d", m.ClientID, m.MemberType)
				}
				n := 0
				for _, tp := range m.Assignment.TopicPartitions {
					n += len(tp.Partitions)
				}
				got[m.ClientID] = n
				total += n
			}
			for _, name := range names {
				if _, ok := got[name]; !ok {
					return fmt.Errorf("%s not a member: %v", name, got)
				}
			}
			lo, hi := 6/len(names), (6+len(names)-1)/len(names)
			for name, n := range got {
				if n < lo || n > hi {
					return fmt.Errorf("%s has %d partitions: %v", name, n, got)
				}
			}
			if total != 6 {
				return fmt.Errorf("%d partitions assigned: %v", total, got)
			}
			return nil
		})
		return got
	}
	checkOwners := func() {
		t.Helper()
		own.mu.Lock()
		defer own.mu.Unlock()
		if len(own.bad) > 0 {
			t.Fatalf("a partition had two owners: %v", own.bad)
		}
	}

	produce(0)
	a, b, c := start("a"), start("b"), start("c")
	describe("a", "b", "c")
	produce(1)
	// A fourth member joins incrementally: members keep what they may keep.
	own.mu.Lock()
	before := map[string]int{"a": own.revoked["a"], "b": own.revoked["b"], "c": own.revoked["c"]}
	own.mu.Unlock()
	d := start("d")
	describe("a", "b", "c", "d")
	own.mu.Lock()
	moved := 0
	for _, n := range []string{"a", "b", "c"} {
		r := own.revoked[n] - before[n]
		if r > 1 {
			t.Errorf("%s revoked %d partitions for the fourth member; at most 1 should move from each", n, r)
		}
		moved += r
	}
	own.mu.Unlock()
	if moved != 1 {
		// 2,2,2 → 2,2,1,1: one partition is all the fourth member needs.
		t.Errorf("%d partitions moved for the fourth member, want 1", moved)
	}
	produce(2)
	// A leave: b closes (epoch -1).
	b.cl.Close()
	<-b.done
	describe("a", "c", "d")
	produce(3)
	// A member cut off without leaving: fenced at its session timeout (2 s), its
	// partitions go to the others.
	cutAt := time.Now()
	own.cut("c")
	c.dial.cutOff()
	describe("a", "d")
	if took := time.Since(cutAt); took < 1500*time.Millisecond {
		t.Fatalf("c's partitions moved after %v, before its session timeout", took)
	}
	c.cl.Close()
	produce(4)
	checkOwners()
	// Nothing lost: every record consumed, and every commit accepted.
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := 5 * 6 * (perPartition / 5); len(seen) != want {
			return fmt.Errorf("%d records consumed of %d", len(seen), want)
		}
		return nil
	})
	// The autocommits of the members still there reach every partition's end.
	want := int64(5 * (perPartition / 5))
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs, err := w.admin().FetchOffsets(ctx, "g")
		if err != nil {
			return err
		}
		n := 0
		for _, ps := range offs {
			for p, o := range ps {
				if o.Err != nil || o.At != want {
					return fmt.Errorf("partition %d committed at %d (%v), want %d", p, o.At, o.Err, want)
				}
				n++
			}
		}
		if n != 6 {
			return fmt.Errorf("%d partitions committed", n)
		}
		return nil
	})
	for _, x := range []*consumer{a, d} {
		x.cl.Close()
		<-x.done
	}
	mu.Lock()
	if len(commitErrs) > 0 {
		t.Fatalf("commits refused: %v", commitErrs)
	}
	mu.Unlock()
	checkOwners()
}

func (o *ownership) isDead(who string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dead[who]
}

// kgo static members on the consumer protocol. franz-go v1.22.3 leaves a static member
// with epoch -2 but without its instance id, which Apache refuses (INVALID_REQUEST,
// "InstanceId can't be null.") and so does kaas: the member stays, holding its
// partitions, until its session expires; then the other member gets them.
func TestConsumerProtocolFranzGoStatic(t *testing.T) {
	w := startWire(t, func(c *config.Config) {
		consumerProfile(c)
		c.GroupConsumerSessionTimeout = time.Second
	})
	w.createTopics(4, "t")
	start := func(name, instance string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.b.Addr()), kgo.ClientID(name),
			kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.ServerSideBalancer(), kgo.InstanceID(instance),
			kgo.Balancers(kgo.CooperativeStickyBalancer()))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if cl.PollFetches(context.Background()).IsClientClosed() {
					return
				}
			}
		}()
		return cl
	}
	stable := func(want int) map[string]int {
		t.Helper()
		out := map[string]int{}
		testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			d := w.cgDescribe(1, "g").Groups[0]
			if d.State != "Stable" || len(d.Members) != want {
				return fmt.Errorf("state %s, %d members", d.State, len(d.Members))
			}
			for _, m := range d.Members {
				n := 0
				for _, tp := range m.Assignment.TopicPartitions {
					n += len(tp.Partitions)
				}
				out[*m.InstanceID] = n
			}
			return nil
		})
		return out
	}
	a := start("a", "ia")
	defer a.Close()
	b := start("b", "ib")
	if got := stable(2); got["ia"] != 2 || got["ib"] != 2 {
		t.Fatalf("two static members: %v", got)
	}
	closed := time.Now()
	b.Close()
	if got := stable(2); got["ib"] != 2 {
		t.Fatalf("b's partitions moved at once: %v", got)
	}
	if got := stable(1); got["ia"] != 4 {
		t.Fatalf("after b's session: %v", got)
	}
	if took := time.Since(closed); took < 800*time.Millisecond {
		t.Fatalf("b's partitions moved after %v, before its session timeout", took)
	}
}
