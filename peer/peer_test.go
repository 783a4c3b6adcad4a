package peer

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"kaas/registry"
)

// noLeaks checks, after every other cleanup, that the test left no goroutine.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

type fakeRegistry map[int32]registry.Broker

func (f fakeRegistry) Broker(id int32) (registry.Broker, bool) { b, ok := f[id]; return b, ok }

// stalled is a listener that accepts connections and never answers: a peer that is
// paused (SIGSTOP) or wedged.
func stalled(t *testing.T) (host string, port int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	a := ln.Addr().(*net.TCPAddr)
	return a.IP.String(), int32(a.Port)
}

func clientTo(t *testing.T, host string, port int32, timeout time.Duration, reg prometheus.Registerer) *Client {
	return New(Config{
		Self: 0, Listener: "PLAINTEXT", Timeout: timeout, MaxInFlight: 2, Log: zerolog.Nop(), Registerer: reg,
		Registry: fakeRegistry{1: {ID: 1, Alive: true, Endpoints: map[string]registry.Endpoint{"PLAINTEXT": {Host: host, Port: port}}}},
	})
}

// A peer that never answers costs a request its timeout, not a hang, and the result is
// counted as a timeout.
func TestRequestTimesOut(t *testing.T) {
	noLeaks(t)
	host, port := stalled(t)
	reg := prometheus.NewRegistry()
	c := clientTo(t, host, port, 300*time.Millisecond, reg)
	defer c.Close()
	start := time.Now()
	_, err := c.Request(context.Background(), 1, kmsg.NewPtrCreateTopicsRequest())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline exceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the request took %v with a 300ms timeout", took)
	}
	if n := testutil.ToFloat64(c.metrics.requests.WithLabelValues("CreateTopics", "timeout")); n != 1 {
		t.Fatalf("timeouts counted: %v, want 1", n)
	}
}

// Close fails the requests in flight at once, joins their goroutines, and later
// requests fail with ErrClosed without dialling.
func TestCloseEndsRequestsInFlight(t *testing.T) {
	noLeaks(t)
	host, port := stalled(t)
	c := clientTo(t, host, port, time.Hour, nil)
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		c.Send(1, kmsg.NewPtrIncrementalAlterConfigsRequest(), func(_ kmsg.Response, err error) { errs <- err })
	}
	// The bound is 2: a third fails at once.
	if _, err := c.Request(context.Background(), 1, kmsg.NewPtrIncrementalAlterConfigsRequest()); !errors.Is(err, ErrBusy) {
		t.Fatalf("third request: %v, want ErrBusy", err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with two requests in flight")
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("request in flight ended with %v, want ErrClosed", err)
			}
		default:
			t.Fatal("Close returned before a request in flight was answered")
		}
	}
	if _, err := c.Request(context.Background(), 1, kmsg.NewPtrCreateTopicsRequest()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// A broker the registry does not know, or one without the inter-broker listener, fails
// at once.
func TestUnknownPeer(t *testing.T) {
	c := clientTo(t, "127.0.0.1", 1, time.Second, nil)
	defer c.Close()
	if _, err := c.Request(context.Background(), 7, kmsg.NewPtrCreateTopicsRequest()); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown broker: %v, want ErrUnknownPeer", err)
	}
}

// A refused connection (the peer is gone) ends the request with an error well before
// its timeout.
func TestRefusedFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr)
	ln.Close()
	c := clientTo(t, "127.0.0.1", int32(a.Port), time.Minute, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Request(ctx, 1, kmsg.NewPtrCreateTopicsRequest()); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refused peer: %v, want a connection error before the timeout", err)
	}
}
