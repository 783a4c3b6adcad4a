package conn

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/auth"
	"kaas/metrics"
)

// The connection actor: its configuration, its state, what it does with each message,
// how it starts and stops, and how a request frame reaches its handler. The socket's
// goroutines are in socket.go, the ordering of responses in order.go, the bounds on what
// is read ahead in hold.go, closing in close.go, and the messages in messages.go.

// Config is what one connection actor needs.
type Config struct {
	Env      *Env
	Conn     net.Conn
	Listener string
	// MaxFrame bounds a request frame (socket.request.max.bytes).
	MaxFrame int32
	// Idle closes the connection when nothing was read or written for this long.
	Idle time.Duration
	// MaxInflight bounds the requests read but not yet answered; past it reading pauses.
	MaxInflight int
	// MaxQueuedResponseBytes bounds the bytes of this connection's responses built and
	// not yet written (connection.max.queued.response.bytes); zero: no bound.
	MaxQueuedResponseBytes int64
	// FrameTimeout closes the connection when a request frame has not arrived whole this
	// long after its first byte (socket.request.read.timeout.ms); zero: no deadline.
	FrameTimeout time.Duration
	// SASL makes the connection authenticate with one of Mechanisms before anything but
	// ApiVersions and the SASL APIs (SASL_PLAINTEXT, SASL_SSL listeners).
	SASL       bool
	Mechanisms []string
	// FailedAuthDelay is how long a connection that failed authentication stays open
	// after its answer (connection.failed.authentication.delay.ms).
	FailedAuthDelay time.Duration
	// MaxUnauthenticatedFrame bounds a frame read before SASL authentication
	// (sasl.server.max.receive.size); zero: MaxFrame.
	MaxUnauthenticatedFrame int32
	// HandshakeTimeout bounds a TLS handshake (Conn is a *tls.Conn on SSL listeners).
	HandshakeTimeout time.Duration
	// OnStop is called once when the connection is done: the actor stopped and its last
	// responses were written (the server counts live connections, and a graceful stop
	// waits for them before the process exits).
	OnStop func()
}

// Props makes one connection actor. It owns the socket: a reader goroutine feeds it
// frames, a writer goroutine writes the responses it releases in request order.
//
// A connection actor that panics is stopped, never restarted: its socket and its reader
// and writer goroutines belong to the incarnation that started them, and a fresh one
// would start a second pair on the same socket. The client sees its connection close.
func Props(cfg Config) *actor.Props {
	return actor.PropsOf(func() actor.Actor { return &connActor{cfg: cfg} }, actor.NoRestart())
}

type connActor struct {
	cfg Config
	env *Env
	log zerolog.Logger
	met *metrics.Metrics

	self   *actor.PID
	ctx    actor.Context // the same context for every message of this actor
	remote net.Addr
	out    chan outFrame // to the writer; never blocks (see tokens)
	// rbuf[rpos:rend] is read from the socket and not yet consumed; the reader
	// goroutine alone touches them.
	rbuf       []byte
	rpos, rend int
	// frameStart is when the first byte of the frame being read arrived (zero between
	// frames), frameEnd its deadline; lastShort is the bytes a timed-out read lacked.
	// Reader goroutine only.
	frameStart, frameEnd time.Time
	lastShort            int
	quit                 chan struct{} // closed on drain or stop: the reader stops waiting for budget
	tokens               chan struct{} // one per request read and not yet written: the in-flight bound
	done                 chan struct{} // closed when the actor stops
	stopped              atomic.Bool   // read by the reader and writer goroutines
	saslDone             atomic.Bool   // authenticated: the reader's frame bound is MaxFrame
	// unwritten is the bytes of responses built and not yet written: the actor adds, the
	// writer takes away what it wrote.
	unwritten atomic.Int64

	slots slotQueue // in request order
	// held are frames read and not yet handed to handlers because this connection's
	// responses are not being written (or the broker's are over budget); they go on in
	// order as the writer drains.
	held       []*frame
	granted    int64 // response bytes promised to Fetches in flight (ResponseBudget)
	wantWake   atomic.Bool
	brokerWait bool
	resuming   bool
	quitClosed bool
	nextSeq    uint64
	awaiting   actor.Pending[pending]
	draining   bool
	readDone   bool
	closed     bool
	// gathers are the requests waiting for partition actors' answers and fetches the
	// Fetches being served (route.go); watched the partition actors this connection
	// watches.
	gathers map[*partGather]struct{}
	fetches map[*partition.FetchRun]struct{}
	watched map[string]*actor.PID
	// txnOrder are the Produces holding transactional batches, in request order: a
	// verified batch is sent again only after those of the Produces before it
	// (txnproduce.go), so a producer's batches reach each partition in sequence order.
	txnOrder []*txnProduce
	// requests and seconds are the metric children this connection counted into, by
	// labels: found once, not per response.
	requests map[requestLabels]prometheus.Counter
	seconds  map[int16]prometheus.Observer
	// principal is who the connection is (auth.Anonymous until TLS or SASL says
	// otherwise), host its address as ACLs name hosts; sasl its SASL exchange.
	principal auth.Principal
	host      string
	sasl      saslState
	// txnWarned: this connection's client was told (in the log) that transactions are
	// not supported yet; once per connection, however often it retries.
	txnWarned bool
}

func (a *connActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopping:
		a.onStopping()
	case *frame:
		a.onFrame(ctx, m)
	case *actor.Settled:
		a.onSettled(m)
	case *readerDone:
		a.onReaderDone(ctx, m)
	case *writerDone:
		a.closeFor(closeWriteFailed, noRequest(m.err))
	case *Drain:
		a.closeFor(closeBrokerStopping, noRequest(nil))
	case *tlsReady:
		a.onTLSReady(m)
	case *authFailedClose:
		a.closeFor(closeAuthFailed, noRequest(nil))
	case *resume:
		a.brokerWait = false
		a.resumeHeld(ctx)
	case *gatherExpired:
		a.finishGather(m.g)
	case *actor.Terminated:
		a.onPartitionStopped(m.Who)
		a.offerFetches(m)
	default:
		if partition.IsFetchMessage(m) {
			a.offerFetches(m)
		}
	}
}

func (a *connActor) onStarted(ctx actor.Context) {
	a.env = a.cfg.Env
	a.met = a.env.Metrics
	a.self = ctx.Self()
	a.ctx = ctx
	a.remote = a.cfg.Conn.RemoteAddr()
	a.log = a.env.Log.With().Str("remote", a.remote.String()).Str("listener", a.cfg.Listener).Logger()
	a.principal = auth.Anonymous
	a.host = hostOf(a.remote)
	a.sasl.required = a.cfg.SASL
	a.out = make(chan outFrame, a.cfg.MaxInflight)
	a.tokens = make(chan struct{}, a.cfg.MaxInflight)
	a.done = make(chan struct{})
	a.quit = make(chan struct{})
	if a.met != nil {
		a.met.OpenConnections.Inc()
		a.met.Connections.WithLabelValues(a.cfg.Listener).Inc()
	}
	sys := a.env.System
	self := a.self
	go a.readLoop(func(m any) { sys.Send(self, m) })
	go a.writeLoop(func(m any) { sys.Send(self, m) })
}

func (a *connActor) onStopping() {
	if i := intercept.Load(); i != nil {
		i.i.Closed(a.remote.String())
	}
	a.stopped.Store(true)
	a.stopGathers()
	if a.draining {
		// Graceful: the writer sends what is queued (bounded by a deadline, so a client
		// that stopped reading cannot hold the stop), then closes the socket.
		_ = a.cfg.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	} else {
		_ = a.cfg.Conn.Close()
	}
	a.closeQuit()
	if !a.closed {
		a.closed = true
		close(a.out)
		close(a.done)
	}
	// What the writer was not handed is given back here; the writer gives back the rest.
	a.slots.each(func(s *slot) {
		a.unwritten.Add(-s.built)
		a.env.ResponseBytes.Release(s.built)
		s.built = 0
	})
	if a.met != nil && len(a.held) > 0 {
		a.met.RequestsHeld.Sub(float64(len(a.held)))
	}
	a.held = nil
	if a.met != nil {
		a.met.OpenConnections.Dec()
	}
}

func (a *connActor) handleFrame(ctx actor.Context, f *frame) {
	if a.sasl.raw {
		a.onRawToken(ctx, f.b)
		return
	}
	h, body, err := parseHeader(f.b)
	if err != nil {
		a.closeFor(closeBadHeader, closeDetail{err: err, key: h.key, version: h.version})
		return
	}
	if !a.saslAllows(h.key) {
		if a.sasl.failed {
			// Closing: nothing more is answered, and the frame's in-flight token goes
			// back, so the reader is never stuck on it while the connection drains.
			<-a.tokens
			return
		}
		a.closeFor(closeSASLRequired, closeDetail{err: fmt.Errorf("api key %d before SASL authentication", h.key),
			key: h.key, version: h.version})
		return
	}
	entry, known := apis[h.key]
	if !known {
		a.closeFor(closeUnknownAPIKey, closeDetail{err: fmt.Errorf("api key %d is not supported", h.key),
			key: h.key, version: h.version})
		return
	}
	call := &Call{
		Key: h.key, Version: h.version, CorrelationID: h.correlationID, ClientID: h.clientID,
		Listener: a.cfg.Listener, Remote: a.remote, Env: a.env, conn: a, api: entry,
		Principal: a.principal, Host: a.host,
		seq: a.nextSeq, start: f.read,
	}
	a.nextSeq++
	if h.version < entry.min || h.version > entry.max {
		if h.key == apiVersionsKey {
			// Apache answers an ApiVersions it cannot parse with UNSUPPORTED_VERSION and
			// its table, at version 0, so the client can pick a version both speak.
			call.own = slot{call: call}
			call.slot = &call.own
			a.slots.push(call.slot)
			if i := intercept.Load(); i != nil {
				i.i.Request(a.remote.String(), call) // seen, never faulted: no body to answer from
			}
			a.respondUnsupportedApiVersions(call)
			return
		}
		a.closeFor(closeUnsupportedVersion, closeDetail{err: fmt.Errorf("version %d not in %d-%d", h.version, entry.min, entry.max),
			key: h.key, version: h.version})
		return
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	if err := req.ReadFrom(body); err != nil {
		a.closeFor(closeMalformedBody, closeDetail{err: err, key: h.key, version: h.version})
		return
	}
	call.Req = req
	call.own = slot{call: call}
	call.slot = &call.own
	a.slots.push(call.slot)
	if i := intercept.Load(); i != nil && a.intercepted(i.i, call) {
		return
	}
	a.invoke(call, func() { entry.handle(call) })
}

// invoke runs fn, turning a panic into a closed connection (with the stack logged): a bug
// reached by one client's request must not take the broker down.
func (a *connActor) invoke(call *Call, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			a.closeFor(closeHandlerPanicked, closeDetail{key: call.Key, version: call.Version, panicked: r})
		}
	}()
	fn()
}
