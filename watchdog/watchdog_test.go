package watchdog

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// harness is a watchdog process over a listener whose lease end the test sets.
type harness struct {
	w        *Watchdog
	ln       net.Listener
	leaseEnd atomic.Pointer[time.Time]
	accepted chan net.Conn
	acceptEr chan error
}

func newHarness(t *testing.T, addr string) *harness {
	t.Helper()
	h := &harness{accepted: make(chan net.Conn, 16), acceptEr: make(chan error, 16)}
	far := time.Now().Add(time.Hour)
	h.leaseEnd.Store(&far)
	w, err := Start(Config{Interval: 10 * time.Millisecond, Stale: 100 * time.Millisecond,
		LeaseEnd: func() time.Time { return *h.leaseEnd.Load() }, Log: zerolog.New(os.Stderr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h.w, h.ln = w, w.Listener(l.(*net.TCPListener))
	t.Cleanup(func() { h.ln.Close() })
	go func() {
		for {
			c, err := h.ln.Accept()
			if err != nil {
				select {
				case h.acceptEr <- err:
				default:
				}
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(time.Millisecond) // as the broker's accept loop backs off
				continue
			}
			h.accepted <- c
		}
	}()
	return h
}

// dial connects a client and returns it with the broker's side of the connection.
func (h *harness) dial(t *testing.T) (client, server net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, <-h.accepted
}

// pause stands for a stopped broker: no heartbeats, and a lease that has ended.
// The last heartbeat carries the lease's end, as a broker's does.
func (h *harness) pause() {
	end := time.Now().Add(50 * time.Millisecond)
	h.leaseEnd.Store(&end)
	h.w.beat()
	h.w.beatMu.Lock()
	h.w.beats.Store(false)
	h.w.beatMu.Unlock()
}

// readEnds waits for c's read to end; a paused broker's client would wait forever.
func readEnds(t *testing.T, c net.Conn) error {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the client's connection stayed open after the lease ended and heartbeats stopped")
	}
	return err
}

// TestPausedBrokerSocketsEnd: once heartbeats stop and the lease has ended, the clients'
// connections end and new dials are refused; a broker running again listens again on the
// same address and accepts.
func TestPausedBrokerSocketsEnd(t *testing.T) {
	h := newHarness(t, "127.0.0.1:0")
	c1, _ := h.dial(t)
	c2, _ := h.dial(t)
	addr := h.ln.Addr().String()
	h.pause()
	if err := readEnds(t, c1); err != io.EOF {
		t.Fatalf("client read %v, want EOF", err)
	}
	if err := readEnds(t, c2); err != io.EOF {
		t.Fatalf("client read %v, want EOF", err)
	}
	if err := <-h.acceptEr; !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("accept after the shutdown: %v, want EINVAL", err)
	}
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial of a paused broker: %v, want connection refused", err)
	}
	// Running again: heartbeats, then the listener is put back.
	h.w.beats.Store(true)
	if err := h.ln.(interface{ Relisten() error }).Relisten(); err != nil {
		t.Fatal(err)
	}
	c3, s3 := h.dial(t)
	if _, err := s3.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c3, make([]byte, 1)); err != nil {
		t.Fatalf("connection after Relisten: %v", err)
	}
}

// TestRunningBrokerKeepsSockets: a lease that has ended is not enough while heartbeats
// come (the broker runs and handles its own lapse), and heartbeats alone keep sockets
// while the lease lasts. A connection the broker closes ends for its client at once,
// although the watchdog still holds a duplicate.
func TestRunningBrokerKeepsSockets(t *testing.T) {
	h := newHarness(t, "127.0.0.1:0")
	c1, s1 := h.dial(t)
	past := time.Now().Add(-time.Second)
	h.leaseEnd.Store(&past)
	// What is tested is the passing of time: many stale periods with the lease ended
	// and heartbeats coming. The connection stays; an echo proves it.
	<-time.After(5 * h.w.cfg.Stale)
	if _, err := s1.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
		t.Fatalf("connection of a running broker: %v", err)
	}
	c2, s2 := h.dial(t)
	s2.Close()
	if err := readEnds(t, c2); err != io.EOF {
		t.Fatalf("client read after the broker closed: %v, want EOF", err)
	}
	// The watchdog was watching all along: heartbeats stop, and it acts.
	h.pause()
	if err := readEnds(t, c1); err != io.EOF {
		t.Fatalf("client read %v, want EOF", err)
	}
}

// TestBrokerDeathEndsWatchdog: the watchdog exits when its broker's end of the pair
// closes, dropping what it holds.
func TestBrokerDeathEndsWatchdog(t *testing.T) {
	h := newHarness(t, "127.0.0.1:0")
	// The child sees its broker's end close, as when the kernel closes a killed
	// broker's descriptors.
	_ = unix.Shutdown(h.w.fd, unix.SHUT_WR)
	select {
	case <-h.w.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("watchdog still running after its broker's end closed")
	}
}
