package conn

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/config"
	"kaas/metrics"
	"kaas/registry"
)

// serve runs connection actors for every connection accepted on a loopback listener.
func serve(t *testing.T) (string, *Env) {
	t.Helper()
	return serveWith(t, nil)
}

// serveWith is serve with the Env changed by mutate before the first connection.
func serveWith(t *testing.T, mutate func(*Env)) (string, *Env) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	env := &Env{
		Config: &cfg, ClusterID: "test", System: actor.NewSystem(zerolog.Nop()),
		Registry: registry.NewDev(registry.Broker{}), Metrics: metrics.New(), Log: zerolog.Nop(),
	}
	if mutate != nil {
		mutate(env)
	}
	var pids []*actor.PID
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			pids = append(pids, env.System.Spawn(Props(Config{Env: env, Conn: nc, Listener: "PLAINTEXT",
				MaxFrame: 1 << 20, Idle: time.Minute, MaxInflight: 8})))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, pid := range pids {
			_ = env.System.Stop(pid, 5*time.Second)
		}
		if !env.System.Shutdown() {
			t.Error("the actor system's goroutines did not end")
		}
	})
	return ln.Addr().String(), env
}

func roundtrip(t *testing.T, nc net.Conn, req kmsg.Request) (kmsg.Response, error) {
	t.Helper()
	f := kmsg.NewRequestFormatter()
	if _, err := nc.Write(f.AppendRequest(nil, req, 1)); err != nil {
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := readFull(nc, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
	if _, err := readFull(nc, b); err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	return resp, resp.ReadFrom(b[4:])
}

func readFull(nc net.Conn, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := nc.Read(b[got:])
		got += n
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// panicKey is an API no client is served (AllocateProducerIds goes from brokers to the
// controller); the test binary registers a handler for it that panics. Registered at
// init, the table is never written while connection actors read it.
const panicKey = 67

func init() { register(panicKey, 0, 0, func(c *Call) { panic("boom") }) }

func TestPanickingHandlerClosesOnlyItsConnection(t *testing.T) {
	addr, _ := serve(t)

	bystander, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	if _, err := roundtrip(t, bystander, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}

	victim, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	if _, err := roundtrip(t, victim, kmsg.NewPtrAllocateProducerIDsRequest()); err == nil {
		t.Fatal("panicking request got a response")
	} else {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection left open after a handler panic")
		}
	}
	// The other connection, and new ones, are served.
	if _, err := roundtrip(t, bystander, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("bystander: %v", err)
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := roundtrip(t, fresh, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("fresh: %v", err)
	}
}
