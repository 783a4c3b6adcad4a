// Package peer sends Kafka requests from this broker to another broker of its cluster:
// the inter-broker client. It speaks the Kafka protocol through franz-go's kgo (one
// kgo.Client per peer, its one seed the peer's address on the inter-broker listener, as
// the registry has it), authenticated as any client is (TLS, SASL), with a timeout per
// request, a bound on the requests in flight, and every goroutine joined by Close.
//
// Actors never call it from their Receive and wait: Send returns at once and calls back
// from a goroutine the client owns (an actor resolves a promise there, and gets the
// answer as a message).
package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"kaas/logs"
	"kaas/registry"
)

// ClientIDPrefix starts the client id of every inter-broker request ("kaas-broker-<id>"):
// a broker does not forward again a request that came from a peer.
const ClientIDPrefix = "kaas-broker-"

// Errors a request may end with, besides the transport's own.
var (
	// ErrClosed: the client is closed (the broker is stopping).
	ErrClosed = errors.New("peer: inter-broker client closed")
	// ErrBusy: max in-flight requests are already out.
	ErrBusy = errors.New("peer: too many inter-broker requests in flight")
	// ErrUnknownPeer: the registry names no such broker, or it has no endpoint on the
	// inter-broker listener.
	ErrUnknownPeer = errors.New("peer: no endpoint for the broker on the inter-broker listener")
)

// Registry is what the client needs of the broker set: where a broker is.
type Registry interface {
	Broker(id int32) (registry.Broker, bool)
}

// Config is everything a client needs.
type Config struct {
	Self     int32
	Registry Registry
	// Listener names the listener peers are reached on (inter.broker.listener.name).
	Listener string
	// TLS, when set, wraps every connection (SSL and SASL_SSL listeners).
	TLS *tls.Config
	// SASL, when set, authenticates every connection (SASL_PLAINTEXT, SASL_SSL).
	SASL sasl.Mechanism
	// Timeout bounds one request, dial and authentication included (default 10 s).
	Timeout time.Duration
	// MaxInFlight bounds the requests out at once, across peers (default 64); one more
	// fails at once with ErrBusy.
	MaxInFlight int
	Log         zerolog.Logger
	// Registerer, when set, gets the client's metrics.
	Registerer prometheus.Registerer
	// dial, in tests, replaces the network dial.
	dial func(ctx context.Context, network, host string) (net.Conn, error)
}

// Client is the inter-broker client of one broker.
type Client struct {
	cfg     Config
	sem     chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	metrics *metrics

	failLog *logs.Limiter // inter_broker_request_failed: one line per second at most

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	peers  map[int32]*conn
}

// conn is one peer's kgo client and the address it was made for.
type conn struct {
	addr string
	cl   *kgo.Client
}

// New makes a client; it dials nothing until the first request.
func New(cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cfg: cfg, sem: make(chan struct{}, cfg.MaxInFlight), ctx: ctx, cancel: cancel,
		metrics: newMetrics(cfg.Registerer), peers: map[int32]*conn{}, failLog: logs.NewLimiter(time.Second)}
}

// Send sends req to broker id and calls done, once, from a goroutine the client owns,
// with the peer's response or why there is none. It never blocks: a closed client or
// one at its bound calls done at once (still on its own goroutine when it can start one,
// else in the caller).
func (c *Client) Send(id int32, req kmsg.Request, done func(kmsg.Response, error)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.finish(id, req, time.Now(), nil, ErrClosed, done)
		return
	}
	select {
	case c.sem <- struct{}{}:
	default:
		c.mu.Unlock()
		c.finish(id, req, time.Now(), nil, ErrBusy, done)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer func() { <-c.sem }()
		start := time.Now()
		resp, err := c.request(id, req)
		c.finish(id, req, start, resp, err, done)
	}()
}

// Request sends req to broker id and waits for its response, at most the client's
// timeout or until ctx ends. For goroutines, never an actor's Receive.
func (c *Client) Request(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	type result struct {
		resp kmsg.Response
		err  error
	}
	ch := make(chan result, 1)
	c.Send(id, req, func(r kmsg.Response, err error) { ch <- result{r, err} })
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Client) request(id int32, req kmsg.Request) (kmsg.Response, error) {
	cl, err := c.peer(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil && c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return resp, err
}

// peer is broker id's kgo client, made on first use and made again when the registry
// moves the broker to another address.
func (c *Client) peer(id int32) (*kgo.Client, error) {
	b, ok := c.cfg.Registry.Broker(id)
	if !ok {
		return nil, ErrUnknownPeer
	}
	ep, ok := b.Endpoints[c.cfg.Listener]
	if !ok || ep.Host == "" || ep.Port <= 0 {
		return nil, ErrUnknownPeer
	}
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if p := c.peers[id]; p != nil {
		if p.addr == addr {
			return p.cl, nil
		}
		p.cl.Close()
		delete(c.peers, id)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(ClientIDPrefix + strconv.Itoa(int(c.cfg.Self))),
		kgo.ConnIdleTimeout(time.Minute),
		kgo.WithLogger(kgoLogger{c.cfg.Log}),
	}
	if c.cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.cfg.TLS.Clone()))
	}
	if c.cfg.SASL != nil {
		opts = append(opts, kgo.SASL(c.cfg.SASL))
	}
	if c.cfg.dial != nil {
		opts = append(opts, kgo.Dialer(c.cfg.dial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	c.peers[id] = &conn{addr: addr, cl: cl}
	c.cfg.Log.Debug().Int32("peer", id).Str("address", addr).Str("listener", c.cfg.Listener).Msg("inter_broker_client_made")
	return cl, nil
}

// finish counts, logs and answers one request.
func (c *Client) finish(id int32, req kmsg.Request, start time.Time, resp kmsg.Response, err error, done func(kmsg.Response, error)) {
	api := kmsg.NameForKey(req.Key())
	res := result(err)
	c.metrics.observe(api, res, time.Since(start))
	if err != nil {
		// A peer that is gone fails every request sent to it: the log gets one line a
		// second with a count, the metric every one.
		c.failLog.Event(c.cfg.Log.Warn()).Err(err).Int32("peer", id).Str("api", api).Str("result", res).
			Dur("took_ms", time.Since(start)).Msg("inter_broker_request_failed")
	} else {
		c.cfg.Log.Debug().Int32("peer", id).Str("api", api).Dur("took_ms", time.Since(start)).Msg("inter_broker_request_done")
	}
	done(resp, err)
}

// result names an outcome for the metrics: ok, timeout, busy, closed, unknown_peer or
// error (the peer refused the connection, the authentication failed, the connection
// broke).
func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrUnknownPeer):
		return "unknown_peer"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "error"
	}
}

// Close fails every request in flight (ErrClosed), waits for their goroutines to end,
// and closes every peer's connections. Requests sent afterwards fail at once.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	peers := c.peers
	c.peers = map[int32]*conn{}
	c.mu.Unlock()
	for _, p := range peers {
		p.cl.Close()
	}
}

// kgoLogger passes kgo's warnings and errors to zerolog; its info and debug lines are
// per-connection chatter.
type kgoLogger struct{ log zerolog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	ev := l.log.Warn()
	if level == kgo.LogLevelError {
		ev = l.log.Error()
	}
	if level > kgo.LogLevelWarn {
		return
	}
	ev = ev.Str("kgo", msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, ok := keyvals[i].(string); ok {
			ev = ev.Interface("kgo_"+k, keyvals[i+1])
		}
	}
	ev.Msg("inter_broker_client_log")
}

type metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kaas_inter_broker_requests_total",
			Help: "Requests this broker sent to another broker of its cluster, by API and result (ok, timeout, busy, closed, unknown_peer, error).",
		}, []string{"api", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kaas_inter_broker_request_duration_seconds",
			Help:    "Time an inter-broker request took, by API.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"api"}),
	}
	if r != nil {
		r.MustRegister(m.requests, m.seconds)
	}
	return m
}

func (m *metrics) observe(api, res string, d time.Duration) {
	m.requests.WithLabelValues(api, res).Inc()
	m.seconds.WithLabelValues(api).Observe(d.Seconds())
}
