package conn

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/config"
	"kaas/metrics"
)

// idleConn is a connection actor's state without its goroutines or socket, enough to
// run frames through handleFrame and take what it queues for the writer.
func idleConn(t testing.TB, log zerolog.Logger) *connActor {
	t.Helper()
	cfg := config.Default()
	env := &Env{Config: &cfg, ClusterID: "test", Metrics: metrics.New(), Log: log}
	c1, c2 := net.Pipe()
	t.Cleanup(func() { c1.Close(); c2.Close() })
	a := &connActor{cfg: Config{Env: env, Conn: c1, Listener: "PLAINTEXT", MaxInflight: 64}, env: env,
		met: env.Metrics, log: log, remote: c1.RemoteAddr(), out: make(chan outFrame, 64),
		tokens: make(chan struct{}, 64)}
	return a
}

func apiVersionsFrame(t testing.TB, corr int32) *frame {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "bench", "1.0"
	b := kmsg.NewRequestFormatter(kmsg.FormatterClientID("client")).AppendRequest(nil, req, corr)
	return &frame{b: b[4:], read: time.Now()}
}

// An ApiVersions request with logging at Warn costs its decode, its response and its
// encoding: no per-request logger, no reflection and no label formatting for metrics.
func TestRequestPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself")
	}
	a := idleConn(t, zerolog.New(io.Discard).Level(zerolog.WarnLevel))
	f := apiVersionsFrame(t, 7)
	run := func() {
		a.handleFrame(nil, f)
		<-a.out
	}
	run() // label children and caches are made once
	allocs := testing.AllocsPerRun(200, run)
	t.Logf("allocations per ApiVersions request: %.0f", allocs)
	if allocs > apiVersionsAllocs {
		t.Fatalf("an ApiVersions request made %.0f allocations, want at most %d", allocs, apiVersionsAllocs)
	}
}

// apiVersionsAllocs is what one ApiVersions request may allocate through the connection:
// header and body decode, the response (its table of keys), its encoding, the call.
const apiVersionsAllocs = 8

// The request counter is labelled with the response's top-level error code.
func TestRequestMetricCarriesErrorCode(t *testing.T) {
	a := idleConn(t, zerolog.Nop())
	a.handleFrame(nil, apiVersionsFrame(t, 1))
	<-a.out
	bad := kmsg.NewPtrApiVersionsRequest()
	bad.SetVersion(3)
	bad.ClientSoftwareName, bad.ClientSoftwareVersion = "-bad-", "1"
	b := kmsg.NewRequestFormatter().AppendRequest(nil, bad, 2)
	a.handleFrame(nil, &frame{b: b[4:], read: time.Now()})
	<-a.out
	if got := counted(a.met.Requests.WithLabelValues("ApiVersions", "3", "0")); got != 1 {
		t.Fatalf("ApiVersions v3 error 0: %v requests counted, want 1", got)
	}
	code := kerr.InvalidRequest.Code
	if got := counted(a.met.Requests.WithLabelValues("ApiVersions", "3", itoa(code))); got != 1 {
		t.Fatalf("ApiVersions v3 error %d: %v requests counted, want 1", code, got)
	}
}

func itoa(v int16) string { return metrics.Version(v) }

func counted(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.Counter.GetValue()
}
