package broker_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker"
	"kaas/broker/brokertest"
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
