package registry

import (
	"context"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StaticPeer is one broker of a static registry and where it is reached.
type StaticPeer struct {
	ID        int32
	Endpoints map[string]Endpoint
}

// Static is the source of a fixed peer list. This broker is alive by definition; a
// peer is alive while this broker holds a TCP connection to its first endpoint.
//
// Each peer has a watcher that dials it and then keeps the connection open, reading it:
// a peer process that dies has its sockets closed by its kernel at once, so the read
// ends within moments of a kill -9 and the watcher dials again, which is refused. The
// peer is then marked not alive without waiting for the next probe round, and its
// partitions and groups can move before clients that saw the same connection break ask
// for metadata again. A connection that ends for another reason (the peer's idle
// timeout) is dialled again at once and the peer stays alive. A peer that does not
// answer a dial is tried again every Interval, each dial bounded by the interval.
// Liveness for routing also needs the peer's lease (fence), which the ownership
// controller checks beside this: a paused peer keeps its connections open.
type Static struct {
	Self     Broker
	Peers    []StaticPeer
	Probe    string // the listener name whose endpoint is dialled
	Interval time.Duration
	// Dial replaces net.Dialer.DialContext in tests.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Run watches every peer until ctx ends. Once every peer has had its first dial, the
// registry is marked synced.
func (s *Static) Run(ctx context.Context, r *Registry) error {
	dial := s.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	w := &staticWatch{s: s, r: r, alive: map[int32]bool{}, first: map[int32]bool{}, held: map[int32]syscall.RawConn{}}
	r.SetClosed(w.closed)
	defer r.SetClosed(nil)
	var wg sync.WaitGroup
	for _, p := range s.Peers {
		if p.ID == s.Self.ID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, dial, p)
		}()
	}
	w.publish() // a cluster of one has nothing to wait for
	wg.Wait()
	return nil
}

// staticWatch is what the peers' watchers share: who is alive, and who has been dialled.
type staticWatch struct {
	s     *Static
	r     *Registry
	mu    sync.Mutex
	alive map[int32]bool
	first map[int32]bool // the peers whose first dial has ended

	heldMu sync.Mutex
	held   map[int32]syscall.RawConn // the connection held to each peer
}

// closed reports whether the connection held to peer id has ended already: the peer's
// kernel closed it (a killed process), and the watcher reading it has not run yet. It
// peeks at the socket without reading from it or waiting.
func (w *staticWatch) closed(id int32) bool {
	w.heldMu.Lock()
	rc := w.held[id]
	w.heldMu.Unlock()
	if rc == nil {
		return false
	}
	ended := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ended = n == 0 && err == nil || err != nil && err != unix.EAGAIN && err != unix.EINTR
	})
	return ended
}

// holding records (rc non-nil) or forgets the connection held to peer id.
func (w *staticWatch) holding(id int32, rc syscall.RawConn) {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if rc == nil {
		delete(w.held, id)
	} else {
		w.held[id] = rc
	}
}

// set records peer id's liveness and publishes the broker set when it changed or when
// this is the peer's first answer.
func (w *staticWatch) set(id int32, alive bool) {
	w.mu.Lock()
	changed := w.alive[id] != alive || !w.first[id]
	w.alive[id], w.first[id] = alive, true
	w.mu.Unlock()
	if changed {
		w.publish()
	}
}

// publish sets the registry's brokers; once every peer has been dialled, it is synced.
func (w *staticWatch) publish() {
	w.mu.Lock()
	bs := make([]Broker, 0, len(w.s.Peers))
	synced := true
	for _, p := range w.s.Peers {
		if p.ID == w.s.Self.ID {
			self := w.s.Self
			self.Alive = true
			bs = append(bs, self)
			continue
		}
		if !w.first[p.ID] {
			synced = false
		}
		bs = append(bs, Broker{ID: p.ID, Endpoints: p.Endpoints, Alive: w.alive[p.ID]})
	}
	// Set and MarkSynced under the lock, so two watchers' sets land in their order.
	w.r.Set(bs)
	if synced {
		w.r.MarkSynced()
	}
	w.mu.Unlock()
}

// watch keeps a connection to peer p open while it can, until ctx ends.
func (w *staticWatch) watch(ctx context.Context, dial func(context.Context, string) (net.Conn, error), p StaticPeer) {
	addr, ok := w.s.address(p)
	if !ok {
		w.set(p.ID, false)
		<-ctx.Done()
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dctx, cancel := context.WithTimeout(ctx, w.s.Interval)
		c, err := dial(dctx, addr)
		cancel()
		w.r.SetSuspect(p.ID, false)
		if ctx.Err() != nil {
			if err == nil {
				_ = c.Close()
			}
			return
		}
		if err != nil {
			w.set(p.ID, false)
			t.Reset(w.s.Interval)
			continue
		}
		w.set(p.ID, true)
		if sc, ok := c.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				w.holding(p.ID, rc)
			}
		}
		hold(ctx, c)
		// The connection ended: dial again at once; a dead peer refuses it. Until then
		// the peer is suspect (Registry.Suspect): a client that saw its own
		// connections to it end at the same moment may ask for metadata first. It is
		// marked before the connection is forgotten and closed, so no moment is
		// without one or the other.
		w.r.SetSuspect(p.ID, true)
		w.holding(p.ID, nil)
		_ = c.Close()
		t.Reset(0)
	}
}

// hold reads c until it ends (the peer closed it or died) or ctx ends (then it closes
// c). A broker sends nothing on a connection that sends it no request.
func hold(ctx context.Context, c net.Conn) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	buf := make([]byte, 1)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// address is where peer p is dialled: its endpoint on the probe listener, else any.
func (s *Static) address(p StaticPeer) (string, bool) {
	ep, ok := p.Endpoints[s.Probe]
	if !ok {
		for _, e := range p.Endpoints {
			ep, ok = e, true
			break
		}
	}
	if !ok {
		return "", false
	}
	return net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))), true
}
