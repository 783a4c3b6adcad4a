package group_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// simMember behaves like a real consumer (Java AbstractCoordinator): JoinGroup (with the
// KIP-394 step), SyncGroup (the leader assigns), Heartbeat every hb, rejoin at once on
// REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, start over with no member id on
// UNKNOWN_MEMBER_ID. It records the generation it last synced at and whether it led it.
type simMember struct {
	id     atomic.Pointer[string]
	gen    atomic.Int32
	leader atomic.Bool
	joins  atomic.Int64
	// waited is the time spent waiting for answers, by request kind (simJoin, simSync,
	// simHeartbeat), and answered how many answers of each came.
	waited, answered [3]atomic.Int64
	// marks are when (UnixNano) the member's connection was up, its first JoinGroup
	// answered, and its last SyncGroup answered with no error.
	marks [3]atomic.Int64
}

// The request kinds a simMember counts.
const (
	simJoin = iota
	simSync
	simHeartbeat
)

// simConfig is how simulated members behave. Each member has its own connection, as a
// consumer has its own to the coordinator.
type simConfig struct {
	hb, session, rebalance time.Duration
	// dialed, when set, is told when the member's connection is up (or failed), and the
	// member waits for begin to close before its first request.
	dialed *sync.WaitGroup
	begin  chan struct{}
}

// simDefaults: heartbeat every hb, 10 s session and rebalance timeouts.
func simDefaults(hb time.Duration) simConfig {
	return simConfig{hb: hb, session: 10 * time.Second, rebalance: 10 * time.Second}
}

func runSim(tb testing.TB, addr, g string, cfg simConfig, stop <-chan struct{}, m *simMember) {
	mc, err := dialMux(addr)
	if cfg.dialed != nil {
		cfg.dialed.Done()
		<-cfg.begin
	}
	if err != nil {
		return
	}
	defer mc.close() // a storm of thousands: do not wait for the test's cleanup
	m.marks[0].Store(time.Now().UnixNano())
	rt := func(kind int, req kmsg.Request) (kmsg.Response, bool) {
		start := time.Now()
		r, ok := mc.roundTrip(req)
		if ok {
			m.waited[kind].Add(int64(time.Since(start)))
			m.answered[kind].Add(1)
		}
		return r, ok
	}
	hb := cfg.hb
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
		jr := joinReq(g, joinOpts{version: 9, member: member, session: int32(cfg.session.Milliseconds()), rebalance: int32(cfg.rebalance.Milliseconds())})
		r, ok := rt(simJoin, jr)
		if !ok {
			return
		}
		j := r.(*kmsg.JoinGroupResponse)
		if m.joins.Add(1) == 1 {
			m.marks[1].Store(time.Now().UnixNano())
		}
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
		r, ok = rt(simSync, sr)
		if !ok {
			return
		}
		if s := r.(*kmsg.SyncGroupResponse); s.ErrorCode != 0 {
			if s.ErrorCode == kerr.UnknownMemberID.Code {
				member = "" // the consumer resets its member id and joins as new
			}
			continue
		}
		m.marks[2].Store(time.Now().UnixNano())
		id := member
		m.id.Store(&id)
		m.gen.Store(j.Generation)
		m.leader.Store(j.LeaderID == member)
		for !stopped() {
			time.Sleep(hb)
			r, ok := rt(simHeartbeat, hbReq(g, member, j.Generation))
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
	return runSimsWith(tb, addr, g, n, simDefaults(hb))
}

func runSimsWith(tb testing.TB, addr, g string, n int, cfg simConfig) ([]*simMember, func()) {
	stop := make(chan struct{})
	ms := make([]*simMember, n)
	var wg sync.WaitGroup
	for i := range ms {
		ms[i] = &simMember{}
		if cfg.dialed != nil {
			cfg.dialed.Add(1)
		}
		wg.Add(1)
		go func(m *simMember) {
			defer wg.Done()
			runSim(tb, addr, g, cfg, stop, m)
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
	testwait.For(t, 20*time.Second, 5*time.Millisecond, func() error {
		if gen, ok := converged(ms); ok {
			d := describe(w, 5, "g").Groups[0]
			if d.State == "Stable" && len(d.Members) == 20 && d.Members[0].MemberID != "" && gen > 0 {
				return nil
			}
		}
		gens := map[int32]int{}
		for _, m := range ms {
			gens[m.gen.Load()]++
		}
		return fmt.Errorf("no convergence: generations %v", gens)
	})
}

// muxConn is a client connection: each request gets its own correlation id and its
// answer is handed to whoever sent it, so requests may be pipelined as a real client's
// are. Responses come back in request order (Apache and kfake even read one request at a
// time), so a parked JoinGroup holds back everything sent after it on its connection.
type muxConn struct {
	c   net.Conn
	fmt *kmsg.RequestFormatter

	mu      sync.Mutex
	corr    int32
	waiting map[int32]chan []byte
	err     error
}

var errConnClosed = errors.New("connection closed")

func dialMux(addr string) (*muxConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	m := &muxConn{c: c, fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("kaas-test")), waiting: map[int32]chan []byte{}}
	go m.read()
	return m, nil
}

func (m *muxConn) read() {
	r := bufio.NewReader(m.c)
	var size [4]byte
	for {
		if _, err := io.ReadFull(r, size[:]); err != nil {
			m.fail(err)
			return
		}
		b := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, b); err != nil || len(b) < 4 {
			m.fail(errConnClosed)
			return
		}
		corr := int32(binary.BigEndian.Uint32(b))
		m.mu.Lock()
		ch := m.waiting[corr]
		delete(m.waiting, corr)
		m.mu.Unlock()
		if ch != nil {
			ch <- b
		}
	}
}

func (m *muxConn) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
	}
	for corr, ch := range m.waiting {
		close(ch)
		delete(m.waiting, corr)
	}
}

// roundTrip sends req and waits for its answer; false when the connection failed.
func (m *muxConn) roundTrip(req kmsg.Request) (kmsg.Response, bool) {
	ch := make(chan []byte, 1)
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, false
	}
	m.corr++
	corr := m.corr
	m.waiting[corr] = ch
	_, err := m.c.Write(m.fmt.AppendRequest(nil, req, corr))
	m.mu.Unlock()
	if err != nil {
		m.fail(err)
		return nil, false
	}
	b, ok := <-ch
	if !ok {
		return nil, false
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if _, err := brokertest.Decode(b, resp); err != nil {
		return nil, false
	}
	return resp, true
}

func (m *muxConn) close() { m.c.Close() }
