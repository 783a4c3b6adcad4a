package group_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// simMember behaves like a real consumer: JoinGroup (with the KIP-394 step), SyncGroup
// (the leader assigns), Heartbeat every hb, rejoin on REBALANCE_IN_PROGRESS or
// ILLEGAL_GENERATION, start over on UNKNOWN_MEMBER_ID. It records the generation it
// last synced at and whether it led it.
type simMember struct {
	id     atomic.Pointer[string]
	gen    atomic.Int32
	leader atomic.Bool
	joins  atomic.Int64
}

func runSim(tb testing.TB, addr, g string, hb time.Duration, stop <-chan struct{}, m *simMember) {
	raw := brokertest.Dial(tb, addr)
	defer raw.C.Close() // a storm of thousands: do not wait for the test's cleanup
	corr := int32(0)
	rt := func(req kmsg.Request) (kmsg.Response, bool) {
		corr++
		raw.Send(req, corr)
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		b, err := raw.ReadFrame(time.Minute)
		if err != nil {
			return nil, false
		}
		if _, err := brokertest.Decode(b, resp); err != nil {
			return nil, false
		}
		return resp, true
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	member := ""
	for !stopped() {
		jr := joinReq(g, joinOpts{version: 9, member: member, session: 10000, rebalance: 10000})
		r, ok := rt(jr)
		if !ok {
			return
		}
		j := r.(*kmsg.JoinGroupResponse)
		m.joins.Add(1)
		switch j.ErrorCode {
		case kerr.MemberIDRequired.Code:
			member = j.MemberID
			continue
		case 0:
		case kerr.UnknownMemberID.Code:
			member = ""
			continue
		default:
			continue
		}
		member = j.MemberID
		sr := syncReq(g, member, j.Generation, nil)
		sr.Version = 5
		ct, name := "consumer", "range"
		sr.ProtocolType, sr.Protocol = &ct, &name
		if j.LeaderID == member {
			for _, o := range j.Members {
				sr.GroupAssignment = append(sr.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: o.MemberID, MemberAssignment: []byte{1}})
			}
		}
		r, ok = rt(sr)
		if !ok {
			return
		}
		if s := r.(*kmsg.SyncGroupResponse); s.ErrorCode != 0 {
			continue
		}
		id := member
		m.id.Store(&id)
		m.gen.Store(j.Generation)
		m.leader.Store(j.LeaderID == member)
		for !stopped() {
			time.Sleep(hb)
			r, ok := rt(hbReq(g, member, j.Generation))
			if !ok {
				return
			}
			if c := r.(*kmsg.HeartbeatResponse).ErrorCode; c != 0 {
				if c == kerr.UnknownMemberID.Code {
					member = ""
				}
				break
			}
		}
	}
}

// converged: every member synced the same generation, and exactly one led it.
func converged(ms []*simMember) (int32, bool) {
	gen := ms[0].gen.Load()
	leaders := 0
	for _, m := range ms {
		if m.gen.Load() != gen || gen == 0 {
			return 0, false
		}
		if m.leader.Load() {
			leaders++
		}
	}
	return gen, leaders == 1
}

func runSims(tb testing.TB, addr, g string, n int, hb time.Duration) ([]*simMember, func()) {
	stop := make(chan struct{})
	ms := make([]*simMember, n)
	var wg sync.WaitGroup
	for i := range ms {
		ms[i] = &simMember{}
		wg.Add(1)
		go func(m *simMember) {
			defer wg.Done()
			runSim(tb, addr, g, hb, stop, m)
		}(ms[i])
	}
	return ms, func() { close(stop); wg.Wait() }
}

// stopAll stops many runSims at once.
func stopAll(stops []func()) {
	var wg sync.WaitGroup
	for _, s := range stops {
		wg.Add(1)
		go func() { defer wg.Done(); s() }()
	}
	wg.Wait()
}

// A 20-member group converges on one generation with one leader.
func TestTwentyMembersConverge(t *testing.T) {
	w := startWire(t, nil)
	ms, stop := runSims(t, w.b.Addr(), "g", 20, 20*time.Millisecond)
	defer stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if gen, ok := converged(ms); ok {
			d := describe(w, 5, "g").Groups[0]
			if d.State == "Stable" && len(d.Members) == 20 && d.Members[0].MemberID != "" && gen > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			gens := map[int32]int{}
			for _, m := range ms {
				gens[m.gen.Load()]++
			}
			t.Fatalf("no convergence: generations %v", gens)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
