package registry

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"kaas/internal/testwait"
)

// fakePeer is a listener that keeps what it accepts, so a test can close them as a
// peer's kernel does when its process dies, or one of them as an idle timeout does.
type fakePeer struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted chan struct{}
}

func newFakePeer(t *testing.T) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePeer{ln: ln, accepted: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.accepted <- struct{}{}
		}
	}()
	t.Cleanup(p.die)
	return p
}

func (p *fakePeer) endpoint() map[string]Endpoint {
	a := p.ln.Addr().(*net.TCPAddr)
	return map[string]Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: int32(a.Port)}}
}

// die closes the listener and every connection: what a kill -9 does to the process's
// sockets.
func (p *fakePeer) die() {
	_ = p.ln.Close()
	p.closeConns()
}

func (p *fakePeer) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// waitAlive waits for the registry to report peer id's liveness as want.
func waitAlive(t *testing.T, r *Registry, sub <-chan struct{}, id int32, want bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if b, ok := r.Broker(id); ok && b.Alive == want && r.Synced() {
			return
		}
		select {
		case <-sub:
		case <-deadline:
			b, _ := r.Broker(id)
			t.Fatalf("broker %d alive=%v, want %v", id, b.Alive, want)
		}
	}
}

// A peer that dies is seen dead from its connection closing, not at the next probe
// round: the probe interval here is an hour, so only the event can tell.
func TestStaticSeesPeerDieAtOnce(t *testing.T) {
	p1, p2 := newFakePeer(t), newFakePeer(t)
	s := &Static{
		Self:  Broker{ID: 0, Endpoints: map[string]Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: 1}}},
		Peers: []StaticPeer{{ID: 0}, {ID: 1, Endpoints: p1.endpoint()}, {ID: 2, Endpoints: p2.endpoint()}},
		Probe: "PLAINTEXT", Interval: time.Hour,
	}
	r := New(0, 3)
	sub, unsub := r.Subscribe()
	defer unsub()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx, r); close(done) }()
	defer func() { cancel(); <-done }()

	waitAlive(t, r, sub, 1, true)
	waitAlive(t, r, sub, 2, true)
	<-p2.accepted

	p1.die()
	waitAlive(t, r, sub, 1, false)

	// A connection closed by a live peer (its idle timeout) is dialled again at once,
	// and the peer stays alive.
	p2.closeConns()
	<-p2.accepted
	if b, _ := r.Broker(2); !b.Alive {
		t.Fatal("a peer that closed an idle connection and accepted the next one is not alive")
	}
	if got := r.Brokers(); len(got) != 2 || got[0].ID != 0 || got[1].ID != 2 {
		t.Fatalf("alive brokers %v, want 0 and 2", got)
	}
}

// Run returns once ctx ends, with every watcher joined, also while a connection is held.
func TestStaticStopsWhileHolding(t *testing.T) {
	p1 := newFakePeer(t)
	s := &Static{Self: Broker{ID: 0}, Peers: []StaticPeer{{ID: 0}, {ID: 1, Endpoints: p1.endpoint()}},
		Probe: "PLAINTEXT", Interval: time.Hour}
	r := New(0, 2)
	sub, unsub := r.Subscribe()
	defer unsub()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx, r); close(done) }()
	waitAlive(t, r, sub, 1, true)
	cancel()
	<-done
}

// From the moment a held connection ends until the dial that follows has an answer,
// the peer is suspect: a client that saw its own connections end at the same moment
// may ask for metadata before the dial is refused, and must not be told the dead peer
// leads. A dial that succeeds clears it.
func TestStaticSuspectUntilDialled(t *testing.T) {
	p1 := newFakePeer(t)
	var dials sync.Mutex
	second := make(chan struct{})
	n := 0
	d := &net.Dialer{}
	s := &Static{
		Self:  Broker{ID: 0},
		Peers: []StaticPeer{{ID: 0}, {ID: 1, Endpoints: p1.endpoint()}},
		Probe: "PLAINTEXT", Interval: time.Hour,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Lock()
			n++
			again := n == 2
			dials.Unlock()
			if again {
				<-second // the dial after the connection ended waits for the test
			}
			return d.DialContext(ctx, "tcp", addr)
		},
	}
	r := New(0, 2)
	sub, unsub := r.Subscribe()
	defer unsub()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx, r); close(done) }()
	defer func() { cancel(); <-done }()

	waitAlive(t, r, sub, 1, true)
	<-p1.accepted
	if r.Suspect(1) {
		t.Fatal("a peer whose connection is held is suspect")
	}
	p1.closeConns()
	// Both waits share one deadline. Polled: the watcher sets it.
	deadline := time.Now().Add(30 * time.Second)
	testwait.For(t, time.Until(deadline), time.Millisecond, testwait.Cond("the peer is not suspect while the dial after its connection ended waits", func() bool { return r.Suspect(1) }))
	if b, _ := r.Broker(1); !b.Alive {
		t.Fatal("a suspect peer was taken for dead before the dial said so")
	}
	if r.Reachable(1) {
		t.Fatal("a suspect peer is reachable")
	}
	close(second)
	<-p1.accepted
	testwait.For(t, time.Until(deadline), time.Millisecond, testwait.Cond("the peer is still suspect after a dial reached it", func() bool { return !r.Suspect(1) }))
	if !r.Reachable(1) {
		t.Fatal("a peer dialled again is not reachable")
	}
	if r.Reachable(7) {
		t.Fatal("an unknown broker is reachable")
	}
}

// The held connection's end is seen by a peek at the socket, before the watcher that
// reads it has run: Suspect is true as soon as the peer's kernel has closed it. Here
// the watcher is not even reading (the connection is registered by hand), so only the
// peek can tell.
func TestStaticClosedPeeksTheSocket(t *testing.T) {
	p1 := newFakePeer(t)
	c, err := net.Dial("tcp", p1.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-p1.accepted
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	r := New(0, 2)
	w := &staticWatch{r: r, held: map[int32]syscall.RawConn{}}
	r.SetClosed(w.closed)
	w.holding(1, rc)
	if r.Suspect(1) {
		t.Fatal("an open, quiet connection reads as ended")
	}
	p1.die()
	// Polled: the FIN crosses the loopback.
	testwait.For(t, 30*time.Second, time.Millisecond, testwait.Cond("a connection the peer closed does not read as ended", func() bool { return r.Suspect(1) }))
	if r.Suspect(2) {
		t.Fatal("a peer with no held connection is suspect")
	}
}
