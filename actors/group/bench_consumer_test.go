package group_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/config"
)

// The consumer group protocol side by side with kfake, same run
// (go test -run x -bench ConsumerProtocol -benchtime 1x ./actors/group): members driven by
// raw ConsumerGroupHeartbeats in rounds as fast as the coordinator answers (no
// heartbeat interval; a round's heartbeats in flight together, one client), until ConsumerGroupDescribe shows every member stable at the
// target. Figures: time for n members to settle from nothing, for a join and a leave in
// a settled group of n, and heartbeats per second while settled. CG_BENCH_N=100 runs one
// size only (for a profile).

type cgSim struct {
	cl    *kgo.Client
	group string
	ids   map[string][16]byte
	names map[[16]byte]string
}

type cgSimMember struct {
	id    string
	epoch int32
	own   []kmsg.ConsumerGroupHeartbeatRequestTopic
}

func (s *cgSim) beat(m *cgSimMember, join bool) error {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = s.group, m.id, m.epoch, -1
	req.Topics = m.own
	if join {
		req.MemberEpoch, req.RebalanceTimeoutMillis = 0, 60000
		req.SubscribedTopicNames, req.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	if req.Topics == nil {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	resp, err := req.RequestWith(context.Background(), s.cl)
	if err != nil {
		return err
	}
	if resp.ErrorCode != 0 {
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		m.own = nil
		for _, t := range resp.Assignment.Topics {
			m.own = append(m.own, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: t.TopicID, Partitions: t.Partitions})
		}
	}
	return nil
}

// settled: every member stable at the target epoch, as the coordinator describes it.
func (s *cgSim) settled(ms []*cgSimMember) (bool, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{s.group}
	resp, err := req.RequestWith(context.Background(), s.cl)
	if err != nil {
		return false, err
	}
	g := resp.Groups[0]
	if g.State != "Stable" || len(g.Members) != len(ms) {
		return false, nil
	}
	for _, m := range ms {
		if m.epoch != g.AssignmentEpoch {
			return false, nil
		}
	}
	return true, nil
}

// settle heartbeats every member in rounds until settled; the time it took.
func (s *cgSim) settle(b *testing.B, ms []*cgSimMember) time.Duration {
	start := time.Now()
	for round := 0; round < 200; round++ {
		// Each member heartbeats on its own, as real members do: the round's heartbeats
		// are in flight together.
		errs := make(chan error, len(ms))
		for _, m := range ms {
			go func() { errs <- s.beat(m, false) }()
		}
		for range ms {
			if err := <-errs; err != nil {
				b.Fatalf("heartbeat: %v", err)
			}
		}
		if ok, err := s.settled(ms); err != nil {
			b.Fatal(err)
		} else if ok {
			return time.Since(start)
		}
	}
	b.Fatal("the group did not settle in 200 rounds")
	return 0
}

// join has n members join at once (their joins in flight together).
func (s *cgSim) join(b *testing.B, n int) []*cgSimMember {
	ms := make([]*cgSimMember, n)
	errs := make(chan error, n)
	for i := range ms {
		ms[i] = &cgSimMember{id: uuid.NewString()}
		go func() { errs <- s.beat(ms[i], true) }()
	}
	for range ms {
		if err := <-errs; err != nil {
			b.Fatalf("join: %v", err)
		}
	}
	return ms
}

func cgTargets(b *testing.B, partitions int32) []target {
	kb := brokertest.Start(b, func(c *config.Config) { c.LogLevel = "warn" })
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kb.Addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, "t"); err != nil {
		b.Fatal(err)
	}
	return []target{{"kaas", kb.Addr()}, {"kfake", kf.ListenAddrs()[0]}}
}

func BenchmarkConsumerProtocol(b *testing.B) {
	ns := []int{100, 1000}
	if v := os.Getenv("CG_BENCH_N"); v != "" {
		n, _ := strconv.Atoi(v)
		ns = []int{n}
	}
	for _, n := range ns {
		var settle, join, leave, rate [2]float64
		for i, t := range cgTargets(b, int32(n)) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(t.addr))
			if err != nil {
				b.Fatal(err)
			}
			s := &cgSim{cl: cl, group: fmt.Sprintf("bench-%d", n)}
			start := time.Now()
			ms := s.join(b, n)
			s.settle(b, ms)
			settle[i] = float64(time.Since(start).Milliseconds())
			extra := s.join(b, 1)
			join[i] = float64(s.settle(b, append(ms, extra...)).Milliseconds())
			gone := extra[0]
			gone.epoch = -1
			if err := s.beat(gone, false); err != nil {
				b.Fatal(err)
			}
			leave[i] = float64(s.settle(b, ms).Milliseconds())
			beats := 0
			start = time.Now()
			for time.Since(start) < time.Second {
				for _, m := range ms {
					if err := s.beat(m, false); err != nil {
						b.Fatal(err)
					}
					beats++
				}
			}
			rate[i] = float64(beats) / time.Since(start).Seconds()
			cl.Close()
		}
		for _, f := range []struct {
			what, unit string
			v          [2]float64
		}{
			{fmt.Sprintf("%d members: join and settle", n), "ms", settle},
			{fmt.Sprintf("%d members: one more joins, settled", n), "ms", join},
			{fmt.Sprintf("%d members: one leaves, settled", n), "ms", leave},
			{fmt.Sprintf("%d members: heartbeats/s (one client)", n), "hb/s", rate},
		} {
			fmt.Printf("%-44s kaas %10.1f %s   kfake %10.1f %s   kaas/kfake %.2f\n", f.what, f.v[0], f.unit, f.v[1], f.unit, f.v[0]/f.v[1])
		}
	}
}
