package broker_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// emfileListener fails its first n Accepts as a listener out of file descriptors does,
// then closes blocked and waits for release before accepting for real: the test looks
// at the broker while every failure has been handled and none succeeded yet.
type emfileListener struct {
	net.Listener
	n       int
	blocked chan struct{}
	release chan struct{}

	mu     sync.Mutex
	failed int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.failed < l.n {
		l.failed++
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	first := l.failed == l.n
	l.failed++
	l.mu.Unlock()
	if first {
		close(l.blocked)
		select {
		case <-l.release:
		case <-time.After(30 * time.Second): // the test failed; let Stop close the listener
		}
	}
	return l.Listener.Accept()
}

// readyz is the status and body of GET /readyz.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A listener out of file descriptors (EMFILE) does not stop the broker accepting: it
// retries with a backoff, logs the episode once with a count, counts every failure, is
// not ready while accepting fails and ready again after the next accept.
func TestAcceptRetriesAfterEMFILE(t *testing.T) {
	const failures = 5
	fl := &emfileListener{n: failures, blocked: make(chan struct{}), release: make(chan struct{})}
	c := brokertest.Config(t)
	c.HTTPListen = "127.0.0.1:0"
	b, sink, err := brokertest.StartLogged(t, c, broker.WithListenerWrap(func(_ string, ln net.Listener) net.Listener {
		fl.Listener = ln
		return fl
	}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-fl.blocked:
	case <-time.After(20 * time.Second):
		t.Fatalf("the broker stopped accepting after an EMFILE (accept called %d times)", func() int {
			fl.mu.Lock()
			defer fl.mu.Unlock()
			return fl.failed
		}())
	}
	if code, body := readyz(t, b.HTTPAddr()); code != http.StatusServiceUnavailable || !strings.Contains(body, "accept") {
		t.Fatalf("/readyz while accepting fails: %d %q, want 503 naming the failing accept", code, body)
	}
	fams := scrape(t, b.HTTPAddr())
	if n := sample(fams, "kaas_accept_errors_total", "listener", "PLAINTEXT", "reason", "emfile"); n != failures {
		t.Fatalf("kaas_accept_errors_total{reason=emfile} = %v, want %d", n, failures)
	}
	// The other reasons are exported at zero from the start (the dashboard's rate needs them).
	if n := sample(fams, "kaas_accept_errors_total", "listener", "PLAINTEXT", "reason", "enfile"); n != 0 {
		t.Fatalf("kaas_accept_errors_total{reason=enfile} = %v, want 0", n)
	}
	if n := sample(fams, "kaas_connections_refused_total", "listener", "PLAINTEXT", "reason", "max_connections_per_ip"); n != 0 {
		t.Fatalf("kaas_connections_refused_total = %v, want 0", n)
	}
	if n := sample(fams, "kaas_accept_paused_total", "listener", "PLAINTEXT"); n != 0 {
		t.Fatalf("kaas_accept_paused_total = %v, want 0", n)
	}
	if got := sink.Events("listener_accept_failed"); len(got) != 1 || !strings.Contains(got[0], "emfile") {
		t.Fatalf("accept failures logged as %q, want one line (rate-limited) naming emfile", got)
	}

	close(fl.release)
	r := brokertest.Dial(t, b.Addr())
	req := kmsg.NewPtrApiVersionsRequest()
	if resp := r.Roundtrip(req, 1).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after the accept failures: error %d", resp.ErrorCode)
	}
	if code, body := readyz(t, b.HTTPAddr()); code != http.StatusOK {
		t.Fatalf("/readyz after a successful accept: %d %q, want 200", code, body)
	}
	if got := sink.Events("listener_accept_recovered"); len(got) != 1 || !strings.Contains(got[0], `"failures":5`) {
		t.Fatalf("recovery logged as %q, want one line counting the 5 failures", got)
	}
}

// served sends an ApiVersions on r and reads its answer: the connection is served.
func served(t *testing.T, r *brokertest.Raw, corr int32) {
	t.Helper()
	if resp := r.Roundtrip(kmsg.NewPtrApiVersionsRequest(), corr).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
}

// max.connections.per.ip: a connection past the limit from one address is closed as soon
// as it is accepted (and counted), the others go on; a closed one frees its place; an
// override for the address raises its limit.
func TestMaxConnectionsPerIP(t *testing.T) {
	c := brokertest.Config(t)
	c.HTTPListen = "127.0.0.1:0"
	c.MaxConnectionsPerIP = 2
	b, sink, err := brokertest.StartLogged(t, c)
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := brokertest.Dial(t, b.Addr()), brokertest.Dial(t, b.Addr())
	served(t, c1, 1)
	served(t, c2, 1)
	c3 := brokertest.Dial(t, b.Addr())
	if !c3.Closed(10 * time.Second) {
		t.Fatal("a third connection from 127.0.0.1 was kept open past max.connections.per.ip=2")
	}
	served(t, c1, 2)
	served(t, c2, 2)
	if n := sample(scrape(t, b.HTTPAddr()), "kaas_connections_refused_total", "listener", "PLAINTEXT", "reason", "max_connections_per_ip"); n != 1 {
		t.Fatalf("kaas_connections_refused_total{reason=max_connections_per_ip} = %v, want 1", n)
	}
	if got := sink.Events("connection_refused"); len(got) != 1 || !strings.Contains(got[0], `"limit":2`) {
		t.Fatalf("refusal logged as %q, want one line with the limit", got)
	}

	// c1 closes: once the broker has seen it go, a new connection takes its place.
	c1.C.Close()
	// A poll: the broker counts c1 out once its actor has stopped.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		r := brokertest.Dial(t, b.Addr())
		r.Send(kmsg.NewPtrApiVersionsRequest(), 1)
		if _, err := r.ReadFrame(10 * time.Second); err != nil {
			return fmt.Errorf("a connection closed did not free its place under max.connections.per.ip: %w", err)
		}
		return nil
	})

	c = brokertest.Config(t)
	c.MaxConnectionsPerIP = 2
	c.MaxConnectionsPerIPOverrides = map[string]int32{"localhost": 3} // a name, resolved at start
	b2 := brokertest.StartWith(t, c)
	for i := 0; i < 3; i++ {
		served(t, brokertest.Dial(t, b2.Addr()), 1)
	}
	if !brokertest.Dial(t, b2.Addr()).Closed(10 * time.Second) {
		t.Fatal("a fourth connection from 127.0.0.1 was kept open past its override of 3")
	}
}

// An override whose host does not resolve stops the broker from starting.
func TestMaxConnectionsPerIPOverrideUnresolvable(t *testing.T) {
	c := brokertest.Config(t)
	c.MaxConnectionsPerIPOverrides = map[string]int32{"no-such-host.invalid": 1}
	if _, _, err := brokertest.StartLogged(t, c); err == nil || !strings.Contains(err.Error(), "max.connections.per.ip.overrides") {
		t.Fatalf("start with an unresolvable override: %v, want a refusal naming the setting", err)
	}
}

// max.connections: at the limit the listener stops accepting until a connection closes,
// then serves the one that waited; the count comes back down exactly once per connection.
func TestMaxConnectionsWaitsForAClose(t *testing.T) {
	c := brokertest.Config(t)
	c.HTTPListen = "127.0.0.1:0"
	c.MaxConnections = 2
	b := brokertest.StartWith(t, c)
	paused := func(n float64) {
		t.Helper()
		waitMetric(t, b.HTTPAddr(), "kaas_accept_paused_total", func(f map[string]*dto.MetricFamily) bool {
			return sample(f, "kaas_accept_paused_total", "listener", "PLAINTEXT") == n
		})
	}
	c1, c2 := brokertest.Dial(t, b.Addr()), brokertest.Dial(t, b.Addr())
	served(t, c1, 1)
	served(t, c2, 1)
	c3 := brokertest.Dial(t, b.Addr())
	c3.Send(kmsg.NewPtrApiVersionsRequest(), 1)
	paused(1)
	// The listener waits for a slot: c3 is not served, nor counted as a connection.
	if n := sample(scrape(t, b.HTTPAddr()), "kaas_connections_accepted_total", "listener", "PLAINTEXT"); n != 2 {
		t.Fatalf("kaas_connections_accepted_total = %v while at max.connections=2, want 2", n)
	}
	if _, err := c3.ReadFrame(100 * time.Millisecond); err == nil {
		t.Fatal("a third connection was served at max.connections=2")
	}
	c1.C.Close()
	resp := kmsg.NewPtrApiVersionsResponse()
	if corr := c3.Recv(resp); corr != 1 || resp.ErrorCode != 0 {
		t.Fatalf("the waiting connection's ApiVersions: corr %d error %d", corr, resp.ErrorCode)
	}
	served(t, c2, 2)

	// c2 and c3 close: two new connections are served and a third waits again, so each
	// connection was counted out once (twice would let the third in).
	c2.C.Close()
	c3.C.Close()
	c4, c5 := brokertest.Dial(t, b.Addr()), brokertest.Dial(t, b.Addr())
	served(t, c4, 1)
	served(t, c5, 1)
	// c4 or c5 may have waited for c2 and c3 to be counted out; both are served now, so
	// the next pause is c6's.
	before := sample(scrape(t, b.HTTPAddr()), "kaas_accept_paused_total", "listener", "PLAINTEXT")
	c6 := brokertest.Dial(t, b.Addr())
	c6.Send(kmsg.NewPtrApiVersionsRequest(), 1)
	paused(before + 1)
	c4.C.Close()
	if corr := c6.Recv(kmsg.NewPtrApiVersionsResponse()); corr != 1 {
		t.Fatalf("corr %d", corr)
	}
}

// The real thing, in a child process (the file descriptor limit is process-wide): with
// its limit lowered and every descriptor but one taken, a client's socket takes the last
// one, so the broker's accept of that client fails with EMFILE. The broker is not ready
// while it cannot accept, and serves the client once descriptors are free again.
func TestAcceptSurvivesRealEMFILE(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	if os.Getenv("KAAS_TEST_EMFILE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesRealEMFILE$", "-test.v")
		cmd.Env = append(os.Environ(), "KAAS_TEST_EMFILE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestAcceptSurvivesRealEMFILE") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	b, sink, err := brokertest.StartLogged(t, brokertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{Cur: uint64(len(open) + 32), Max: uint64(len(open) + 32)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("lower RLIMIT_NOFILE: %v", err)
	}
	var burnt []int
	defer func() {
		for _, fd := range burnt {
			_ = syscall.Close(fd)
		}
	}()
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatalf("open /dev/null: %v", err)
		}
		burnt = append(burnt, fd)
	}
	_ = syscall.Close(burnt[len(burnt)-1])
	burnt = burnt[:len(burnt)-1]
	r := brokertest.Dial(t, b.Addr()) // takes the last descriptor
	r.Send(kmsg.NewPtrApiVersionsRequest(), 1)

	// A poll: Ready is a function, not an event.
	testwait.For(t, 20*time.Second, 5*time.Millisecond, func() error {
		if err := b.Ready(); err == nil || !strings.Contains(err.Error(), "cannot accept") {
			return fmt.Errorf("Ready while the listener is out of descriptors: %v", err)
		}
		return nil
	})
	for _, fd := range burnt {
		_ = syscall.Close(fd)
	}
	burnt = nil
	resp := kmsg.NewPtrApiVersionsResponse()
	if corr := r.Recv(resp); corr != 1 || resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after descriptors were freed: corr %d error %d", corr, resp.ErrorCode)
	}
	// Ready is a function, not an event: polled until the accept loop has taken the
	// recovery in (a loaded machine may answer the request first).
	testwait.For(t, 10*time.Second, 5*time.Millisecond, func() error {
		if err := b.Ready(); err != nil {
			return fmt.Errorf("not ready after accepting again: %w", err)
		}
		return nil
	})
	if got := sink.Events("listener_accept_failed"); len(got) != 1 || !strings.Contains(got[0], `"reason":"emfile"`) {
		t.Fatalf("accept failures logged as %q, want one emfile line", got)
	}
}
