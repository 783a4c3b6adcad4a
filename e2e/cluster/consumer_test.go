package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/testwait"
	"kaas/registry"
)

// The consumer group protocol (KIP-848) across coordinator moves: the group epoch, the
// target assignment and every member's epoch are durable (group file and journal), so
// when the coordinator is killed -9, or paused past its lease, the broker that adopts
// the group carries every member on at its epoch. A member fenced (FENCED_MEMBER_EPOCH,
// UNKNOWN_MEMBER_ID) would rejoin at epoch 0 and lose its partitions; a state not kept
// would fence all three, and the rejoins would show in the member ids, their epochs and
// the group epoch read back through ConsumerGroupDescribe, and in the clients' hooks.

// consumerFlags make the protocol's timers fit a test: a member is fenced 10 s after its
// last heartbeat (past the 3 s lease and an adoption), heartbeats every 300 ms.
var consumerFlags = []string{
	"--group.consumer.min.session.timeout.ms=1000", "--group.consumer.session.timeout.ms=10000",
	"--group.consumer.min.heartbeat.interval.ms=100", "--group.consumer.heartbeat.interval.ms=300",
}

// cpMember is one kgo member on the consumer protocol and what its hooks saw.
type cpMember struct {
	name string
	cl   *kgo.Client

	mu     sync.Mutex
	id     string // the member id it first held at a positive epoch
	epoch  int32  // the last epoch it was seen at
	resets []string
	lost   int
	errs   []string
}

// sample reads the member's id and epoch from the client; a new id, or an epoch that went
// down (to 0: a rejoin), is a reset.
func (m *cpMember) sample() {
	id, epoch := m.cl.GroupMetadata()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case epoch <= 0 && m.epoch > 0:
		m.resets = append(m.resets, fmt.Sprintf("%s: epoch %d after %d", m.name, epoch, m.epoch))
	case epoch > 0 && m.id != "" && id != m.id:
		m.resets = append(m.resets, fmt.Sprintf("%s: member id %s after %s", m.name, id, m.id))
	}
	if epoch > 0 {
		m.id = id
	}
	m.epoch = epoch
}

// fenced is what the member's hooks and samples counted against it.
func (m *cpMember) fenced() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]string(nil), m.resets...)
	if m.lost > 0 {
		out = append(out, fmt.Sprintf("%s: partitions lost %d times", m.name, m.lost))
	}
	return append(out, m.errs...)
}

// cpGroup is the group as ConsumerGroupDescribe shows it.
type cpGroup struct {
	state   string
	epoch   int32
	members map[string]int32 // member id -> epoch
	parts   int
}

// describeCP asks the coordinator FindCoordinator names now (the client's cached one may
// be the broker just killed).
func describeCP(ctx context.Context, cl *kgo.Client) (cpGroup, error) {
	coord, err := coordinatorOf(ctx, cl)
	if err != nil {
		return cpGroup{}, err
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	kr, err := cl.Broker(int(coord)).Request(ctx, req)
	if err != nil {
		return cpGroup{}, err
	}
	resp := kr.(*kmsg.ConsumerGroupDescribeResponse)
	if len(resp.Groups) != 1 {
		return cpGroup{}, fmt.Errorf("%d groups described", len(resp.Groups))
	}
	g := resp.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
		return cpGroup{}, err
	}
	out := cpGroup{state: g.State, epoch: g.Epoch, members: map[string]int32{}}
	for _, m := range g.Members {
		out.members[m.MemberID] = m.MemberEpoch
		for _, tp := range m.Assignment.TopicPartitions {
			out.parts += len(tp.Partitions)
		}
	}
	return out, nil
}

// stableCP: Stable, three members each at the group epoch, every partition assigned.
func (g cpGroup) stable() error {
	if g.state != "Stable" || len(g.members) != 3 || g.parts != parts {
		return fmt.Errorf("group %s at epoch %d with %d members and %d partitions assigned", g.state, g.epoch, len(g.members), g.parts)
	}
	for id, e := range g.members {
		if e != g.epoch {
			return fmt.Errorf("member %s at epoch %d, the group at %d", id, e, g.epoch)
		}
	}
	return nil
}

// TestClusterConsumerProtocolMove: a consumer-protocol group of three kgo members
// consuming six partitions while its coordinator is killed -9 (then restarted, and the
// group moves home again) or paused past its lease (then resumed). The members carry on
// at their epochs on the adopting broker: the group epoch, member ids and member epochs
// are what they were, no member's hooks saw a partition lost or an epoch reset, every
// acknowledged record is consumed, committed offsets never go backwards and every
// acknowledged commit is still there at the end.
func TestClusterConsumerProtocolMove(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three broker processes and a consumer group")
	}
	for _, f := range []fault{killCoordinator, pauseBroker} {
		t.Run(map[fault]string{killCoordinator: "kill", pauseBroker: "pause"}[f], func(t *testing.T) { runConsumerMove(t, f) })
	}
}

func runConsumerMove(t *testing.T, f fault) {
	c := newCluster(t, false, consumerFlags...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	end, _ := ctx.Deadline()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	testwait.For(t, time.Until(end), 100*time.Millisecond, func() error {
		resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
		if err != nil || resp.Err != nil {
			return fmt.Errorf("create topic: %v / %v", err, resp.Err)
		}
		return nil
	})
	l := &ledger{acked: map[string]string{}, consumed: map[string]bool{}, committed: map[int32]int64{}, commitAcked: map[int32]int64{},
		consumedAt: map[int32]int64{}}

	prodCtx, stopProd := context.WithCancel(ctx)
	var prodWG, wg sync.WaitGroup
	prodWG.Add(1)
	go func() {
		defer prodWG.Done()
		prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RecordDeliveryTimeout(90*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		defer prod.Close()
		for i := 0; prodCtx.Err() == nil; i++ {
			prod.Produce(prodCtx, kgo.StringRecord(strconv.Itoa(i)), func(r *kgo.Record, err error) {
				if err == nil {
					l.ack(r)
				}
			})
			if i%50 == 49 {
				_ = prod.Flush(prodCtx)
				time.Sleep(20 * time.Millisecond) // load pacing
			}
		}
		_ = prod.Flush(context.Background())
	}()

	consCtx, stopCons := context.WithCancel(ctx)
	var members []*cpMember
	for i := range 3 {
		m := &cpMember{name: fmt.Sprintf("member-%d", i)}
		m.cl, err = kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ClientID(m.name),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ServerSideBalancer(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {
				m.mu.Lock()
				m.lost++
				m.mu.Unlock()
			}),
			kgo.WithHooks(groupErrHook{m}))
		if err != nil {
			t.Fatal(err)
		}
		defer m.cl.Close()
		members = append(members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for consCtx.Err() == nil {
				fs := m.cl.PollFetches(consCtx)
				fs.EachRecord(l.consume)
				m.cl.CommitOffsetsSync(consCtx, m.cl.UncommittedOffsets(), func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					if err != nil {
						return
					}
					for i, rt := range resp.Topics {
						for j, rp := range rt.Partitions {
							if rp.ErrorCode == kerr.FencedMemberEpoch.Code || rp.ErrorCode == kerr.UnknownMemberID.Code {
								m.mu.Lock()
								m.errs = append(m.errs, fmt.Sprintf("%s: commit of partition %d at epoch %d: %v", m.name, rp.Partition, req.Generation, kerr.ErrorForCode(rp.ErrorCode)))
								m.mu.Unlock()
							}
							if rp.ErrorCode == 0 && i < len(req.Topics) && j < len(req.Topics[i].Partitions) {
								l.commitAck(rp.Partition, req.Topics[i].Partitions[j].Offset)
							}
						}
					}
				})
			}
		}()
	}
	// The watcher: committed offsets read back never go backwards; every member's id and
	// epoch sampled, so a rejoin between two reads of the group shows.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond) // sampling the clients' state
		defer tick.Stop()
		for n := 0; consCtx.Err() == nil; n++ {
			for _, m := range members {
				m.sample()
			}
			if n%10 == 0 {
				if offs, err := adm.FetchOffsets(consCtx, group); err == nil {
					l.observe(offs)
				}
			}
			<-tick.C
		}
	}()
	progress := func(what string, n int) {
		t.Helper()
		_, from := l.counts()
		testwait.For(t, 60*time.Second, 20*time.Millisecond, func() error {
			if a, now := l.counts(); now < from+n {
				return fmt.Errorf("%s: consumption stalled (%d acked, %d consumed)", what, a, now)
			}
			return nil
		})
	}
	fencedSoFar := func() []string {
		var out []string
		for _, m := range members {
			out = append(out, m.fenced()...)
		}
		return out
	}
	// settle: the group Stable, unchanged over 100 records consumed, and on the consumer
	// protocol (ConsumerGroupDescribe answers only for such a group).
	settle := func() cpGroup {
		for {
			var g cpGroup
			testwait.For(t, time.Until(end), 50*time.Millisecond, func() error {
				var err error
				if g, err = describeCP(ctx, admCl); err != nil {
					return err
				}
				return g.stable()
			})
			progress("settling", 100)
			if again, err := describeCP(ctx, admCl); err == nil && again.stable() == nil && maps.Equal(again.members, g.members) && again.epoch == g.epoch {
				return g
			}
		}
	}
	// same: the group read back is the one before the move, every member at its epoch.
	same := func(what string, before cpGroup) {
		t.Helper()
		var now cpGroup
		testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			var err error
			if now, err = describeCP(ctx, admCl); err != nil {
				return err
			}
			return now.stable()
		})
		if now.epoch != before.epoch || !maps.Equal(now.members, before.members) {
			t.Errorf("%s: group epoch %d, members %v; before: epoch %d, members %v (members fenced and rejoined)", what, now.epoch, now.members, before.epoch, before.members)
		}
		if fs := fencedSoFar(); len(fs) > 0 {
			t.Errorf("%s: members fenced: %v", what, fs)
		}
	}

	progress("start", 300)
	before := settle()
	if fs := fencedSoFar(); len(fs) > 0 {
		// The protocol's own join never fences: anything here is a broker fault.
		t.Fatalf("members fenced before any fault: %v", fs)
	}
	coord, err := coordinatorOf(ctx, admCl)
	if err != nil {
		t.Fatal(err)
	}
	switch f {
	case killCoordinator:
		t.Logf("killing coordinator %d (group epoch %d, members %v)", coord, before.epoch, before.members)
		c.procs[coord].Kill()
		progress("after the coordinator's kill", 300)
		if now, err := coordinatorOf(ctx, admCl); err != nil || now == coord {
			t.Fatalf("the group is on %d after broker %d's kill (%v)", now, coord, err)
		}
		same("on the adopting broker", before)
		// Restarted, the killed broker takes its group back: a move the other way.
		c.start(int(coord))
		home, _ := registry.View{Size: brokers, Alive: []int32{0, 1, 2}}.GroupOwner(group)
		testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			if now, err := coordinatorOf(ctx, admCl); err != nil || now != home {
				return fmt.Errorf("with broker %d restarted, the group never returned to broker %d (now %d, %v)", coord, home, now, err)
			}
			return nil
		})
		progress("after the coordinator's restart", 300)
		same("back on its own broker", before)
	case pauseBroker:
		t.Logf("pausing coordinator %d (group epoch %d, members %v)", coord, before.epoch, before.members)
		c.procs[coord].Pause()
		other := (coord + 1) % brokers
		testwait.For(t, 30*time.Second, 20*time.Millisecond, func() error {
			if viewHas(t, c.dir, other, coord) {
				return fmt.Errorf("broker %d still routes to paused broker %d", other, coord)
			}
			return nil
		})
		progress("during the coordinator's pause", 300)
		same("on the adopting broker", before)
		c.procs[coord].Resume()
		progress("after the resume", 300)
		same("after the resume", before)
	}

	stopProd()
	prodWG.Wait()
	var missing []string
	testwait.For(t, 90*time.Second, 50*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		missing = missing[:0]
		for v := range l.acked {
			if !l.consumed[v] {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("%d acknowledged records not consumed (%v ...)", len(missing), missing[:min(10, len(missing))])
		}
		return nil
	})
	// The commits of what was consumed reach every partition's end.
	testwait.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for p := int32(0); p < parts; p++ {
			if at := l.consumedAt[p]; l.commitAcked[p] < at+1 {
				return fmt.Errorf("partition %d: commit acknowledged to %d, consumed to %d", p, l.commitAcked[p], at)
			}
		}
		return nil
	})
	stopCons()
	wg.Wait()
	a, n := l.counts()
	t.Logf("%d records acknowledged, %d distinct consumed", a, n)
	if fs := fencedSoFar(); len(fs) > 0 {
		t.Errorf("members fenced: %v", fs)
	}
	if len(l.backwards) > 0 {
		t.Errorf("committed offsets went backwards: %v", l.backwards)
	}
	// The paused broker, running again, closes the connections it held: a request the
	// admin client had on one may end with EOF, which it does not always retry.
	var offs kadm.OffsetResponses
	testwait.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		var err error
		offs, err = adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return fmt.Errorf("fetch offsets: %w", err)
		}
		return nil
	})
	for p, at := range l.commitAcked {
		if got, ok := offs.Lookup(topic, p); !ok || got.Err != nil || got.At < at {
			t.Errorf("partition %d: commit of %d acknowledged, %+v committed now", p, at, got)
		}
	}
}

// groupErrHook keeps the errors that ended a member's group session: a fence shows here
// as FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID before the member rejoins.
type groupErrHook struct{ m *cpMember }

func (h groupErrHook) OnGroupManageError(err error) {
	if errors.Is(err, kerr.FencedMemberEpoch) || errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.StaleMemberEpoch) {
		h.m.mu.Lock()
		h.m.errs = append(h.m.errs, fmt.Sprintf("%s: group session ended: %v", h.m.name, err))
		h.m.mu.Unlock()
	}
}
