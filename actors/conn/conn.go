package conn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/partition"
	"kaas/auth"
	"kaas/logs"
	"kaas/metrics"
)

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

// errFrameTooLarge and friends are the typed reasons a connection closes.
var (
	errFrameTooLarge = errors.New("frame larger than socket.request.max.bytes")
	errNegativeFrame = errors.New("negative frame size")
	errIdle          = errors.New("idle timeout")
	errDraining      = errors.New("broker stopping")
	errFrameTimeout  = errors.New("request frame not read whole within socket.request.read.timeout.ms")
)

type slot struct {
	call  *Call
	done  bool
	bytes []byte // the encoded response, size prefix included; nil for no response
	built int64  // len(bytes) while counted as unwritten and not yet handed to the writer
	grant int64  // response bytes promised to this call's handler (part of granted)
}

// pending is a reply the connection waits for: a call's (convert makes its response), or
// answer i of a gather's.
type pending struct {
	call    *Call
	convert func(any) kmsg.Response
	g       *partGather
	i       int
}

// slotQueue is the connection's calls in request order, a ring: a response completes
// its slot through its call, and the head leaves as soon as it is done.
type slotQueue struct {
	buf     []*slot
	head, n int
}

func (q *slotQueue) len() int { return q.n }

func (q *slotQueue) push(s *slot) {
	if q.n == len(q.buf) {
		nb := make([]*slot, max(8, 2*len(q.buf)))
		for i := range q.n {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
}

// front is the oldest slot; the queue must not be empty.
func (q *slotQueue) front() *slot { return q.buf[q.head] }

func (q *slotQueue) pop() {
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
}

func (q *slotQueue) each(fn func(*slot)) {
	for i := range q.n {
		fn(q.buf[(q.head+i)%len(q.buf)])
	}
}

// requestLabels are the labels of one kaas_requests_total child.
type requestLabels struct{ key, version, code int16 }

type connActor struct {
	cfg Config
	env *Env
	log zerolog.Logger
	met *metrics.Metrics

	self   *actor.PID
	ctx    actor.Context // the same context for every message of this actor
	remote net.Addr
	out    chan []byte // to the writer; never blocks (see tokens)
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
		a.closeWith(ctx, "write_failed", m.err, zerolog.DebugLevel)
	case *Drain:
		a.onDrain(ctx)
	case *tlsReady:
		a.onTLSReady(m)
	case *authFailedClose:
		// Drained, not cut: the failure's answer is written before the socket closes.
		a.log.Debug().Str("reason", "sasl_authentication_failed").Msg("connection_closed")
		a.onDrain(ctx)
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
	a.out = make(chan []byte, a.cfg.MaxInflight)
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

// readLoop reads frames until the socket fails. It takes an in-flight token before each
// frame, so a client with MaxInflight unanswered requests is simply not read from.
//
// A frame's buffer starts at firstChunk and doubles as its bytes arrive. A frame larger
// than firstChunk reserves the rest of its size from the broker's request budget
// (queued.max.request.bytes) and gives it back when the frame is whole: a reader that
// cannot get budget stops reading until it can, and a client that announces 100 MB and
// sends a byte a second holds a buffer the size of what it sent, until
// socket.request.read.timeout.ms closes it.
func (a *connActor) readLoop(send func(any)) {
	nc := a.cfg.Conn
	if !a.handshakeTLS(send) {
		return
	}
	a.rbuf = make([]byte, readBuffer)
	var size [4]byte
	for {
		select {
		case a.tokens <- struct{}{}:
		case <-a.done:
			// Stopped with the bound reached: the unanswered requests never give their
			// tokens back, so do not wait for one.
			return
		}
		if a.stopped.Load() {
			send(&readerDone{err: errDraining})
			return
		}
		a.frameStart = time.Time{}
		if err := a.readFull(nc, size[:]); err != nil {
			send(&readerDone{err: err})
			return
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		switch {
		case n < 0:
			send(&readerDone{err: errNegativeFrame})
			return
		case n > a.cfg.MaxFrame:
			send(&readerDone{err: fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)})
			return
		case a.cfg.SASL && !a.saslDone.Load() && a.cfg.MaxUnauthenticatedFrame > 0 && n > a.cfg.MaxUnauthenticatedFrame:
			// A client that has not authenticated does not get to make the broker hold
			// 100 MiB (Apache's sasl.server.max.receive.size).
			send(&readerDone{err: fmt.Errorf("%w: %d bytes before SASL authentication", errFrameTooLarge, n)})
			return
		}
		b, err := a.readBody(nc, int(n))
		if err != nil {
			send(&readerDone{err: err})
			return
		}
		send(&frame{b: b, read: time.Now()})
	}
}

// firstChunk is what a frame's buffer starts at, outside the request budget (a
// connection holds at most one frame being read): most requests fit.
const firstChunk = 32 << 10

// readBody reads a frame body of n bytes into a buffer that grows as its bytes arrive.
func (a *connActor) readBody(nc net.Conn, n int) ([]byte, error) {
	budget := a.env.RequestBytes
	b := make([]byte, min(n, firstChunk))
	var reserved int64
	defer func() { budget.Release(reserved) }()
	got := 0
	for {
		if err := a.readFull(nc, b[got:]); err != nil {
			if errors.Is(err, errFrameTimeout) {
				err = fmt.Errorf("%w: %d of %d bytes after %d ms", err, len(b)-a.lastShort, n, a.cfg.FrameTimeout.Milliseconds())
			}
			return nil, err
		}
		got = len(b)
		if got == n {
			return b, nil
		}
		if reserved == 0 {
			// The rest of the frame is reserved at once, as Apache's memory pool does: a
			// reader never waits while holding part of the budget, so readers cannot
			// deadlock one another. The buffer itself still grows only as bytes arrive.
			waited := time.Now()
			if !budget.Acquire(int64(n-len(b)), a.quit) {
				return nil, errDraining
			}
			// Time spent waiting for the budget is the broker's, not the client's.
			a.frameEnd = a.frameEnd.Add(time.Since(waited))
			reserved = int64(n - len(b))
		}
		next := min(n, 2*len(b))
		nb := make([]byte, next)
		copy(nb, b)
		b = nb
	}
}

// readFull reads len(b) bytes. Between frames the idle deadline applies, and closes only
// when no request is in flight (a JoinGroup may legitimately wait minutes for its round).
// From a frame's first byte the frame has FrameTimeout to arrive whole, and the idle
// deadline is not re-armed by its bytes: a client sending a byte a second is closed.
//
// Small reads go through rbuf: one system call usually brings a frame's size and body,
// or several pipelined frames. A read at least as large as rbuf goes straight into b.
func (a *connActor) readFull(nc net.Conn, b []byte) error {
	got := copy(b, a.rbuf[a.rpos:a.rend])
	a.rpos += got
	if got > 0 {
		a.startFrame()
	}
	for got < len(b) {
		_ = nc.SetReadDeadline(a.readDeadline())
		var n int
		var err error
		if len(b)-got >= len(a.rbuf) {
			n, err = nc.Read(b[got:])
			got += n
		} else {
			n, err = nc.Read(a.rbuf)
			a.rend = n
			a.rpos = copy(b[got:], a.rbuf[:n])
			got += a.rpos
		}
		if n > 0 {
			a.startFrame()
		}
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if a.stopped.Load() {
				return errDraining
			}
			if !a.frameStart.IsZero() && a.cfg.FrameTimeout > 0 && !time.Now().Before(a.frameEnd) {
				a.lastShort = len(b) - got
				return errFrameTimeout
			}
			if len(a.tokens) > 1 {
				continue
			}
			return errIdle
		}
		if got > 0 && errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// startFrame notes the first byte of a frame.
func (a *connActor) startFrame() {
	if a.frameStart.IsZero() {
		a.frameStart = time.Now()
		a.frameEnd = a.frameStart.Add(a.cfg.FrameTimeout)
	}
}

// readDeadline is the deadline of the next read: the frame's when one is being read, the
// idle one counted from the frame's first byte (or from now between frames) when no
// request is in flight; none when neither applies.
func (a *connActor) readDeadline() time.Time {
	var d time.Time
	if !a.frameStart.IsZero() && a.cfg.FrameTimeout > 0 {
		d = a.frameEnd
	}
	if a.cfg.Idle > 0 {
		from := a.frameStart
		if from.IsZero() || len(a.tokens) > 1 {
			from = time.Now()
		}
		if idle := from.Add(a.cfg.Idle); d.IsZero() || idle.Before(d) {
			d = idle
		}
	}
	return d
}

// readBuffer is the read-ahead of a connection: a few typical requests (a heartbeat is
// about 100 bytes), small enough that idle connections stay cheap.
const readBuffer = 1024

func (a *connActor) writeLoop(send func(any)) {
	nc := a.cfg.Conn
	failed := false
	for b := range a.out {
		// Responses already queued behind this one leave with it in one writev: a
		// pipelining client gets a burst of answers for one system call.
		bufs := net.Buffers{b}
	more:
		for len(bufs) < cap(a.out) {
			select {
			case nb, ok := <-a.out:
				if !ok {
					break more
				}
				bufs = append(bufs, nb)
			default:
				break more
			}
		}
		n := len(bufs)
		var written int64
		for _, b := range bufs {
			written += int64(len(b))
		}
		if !failed {
			if _, err := bufs.WriteTo(nc); err != nil {
				failed = true
				send(&writerDone{err: err})
			}
		}
		a.unwritten.Add(-written)
		a.env.ResponseBytes.Release(written)
		if a.wantWake.Swap(false) {
			send(&resume{})
		}
		for range n {
			<-a.tokens
		}
	}
	_ = nc.Close()
	if a.cfg.OnStop != nil {
		a.cfg.OnStop()
	}
}

func (a *connActor) onReaderDone(ctx actor.Context, m *readerDone) {
	a.readDone = true
	switch {
	case a.draining || errors.Is(m.err, errDraining):
		a.maybeFinishDrain(ctx)
	case errors.Is(m.err, io.EOF):
		a.closeWith(ctx, "client_closed", nil, zerolog.DebugLevel)
	case errors.Is(m.err, errIdle):
		a.closeWith(ctx, "idle", nil, zerolog.DebugLevel)
	case errors.Is(m.err, errFrameTooLarge), errors.Is(m.err, errNegativeFrame):
		a.badInput(ctx, "frame_size", -1, -1, m.err)
	case errors.Is(m.err, errFrameTimeout):
		a.badInput(ctx, "frame_timeout", -1, -1, m.err)
	case isTLSError(m.err):
		a.badInput(ctx, "tls_handshake", -1, -1, m.err)
	default:
		a.closeWith(ctx, "read_failed", m.err, zerolog.DebugLevel)
	}
}

func (a *connActor) onDrain(ctx actor.Context) {
	if a.draining {
		return
	}
	a.draining = true
	a.closeQuit()
	// Wake the reader: it sees stopped and exits; frames it already sent are answered.
	a.stopped.Store(true)
	_ = a.cfg.Conn.SetReadDeadline(time.Now())
	a.maybeFinishDrain(ctx)
}

func (a *connActor) closeQuit() {
	if !a.quitClosed {
		a.quitClosed = true
		close(a.quit)
	}
}

func (a *connActor) maybeFinishDrain(ctx actor.Context) {
	if a.draining && a.readDone && a.slots.len() == 0 && len(a.held) == 0 {
		ctx.Stop(ctx.Self())
	}
}

// closeWith stops the actor, which closes the socket.
func (a *connActor) closeWith(ctx actor.Context, reason string, err error, lvl zerolog.Level) {
	if a.stopped.Load() && !a.draining {
		return
	}
	a.stopped.Store(true)
	e := a.log.WithLevel(lvl).Str("reason", reason)
	if err != nil {
		e = e.Err(err)
	}
	e.Msg("connection_closed")
	ctx.Stop(ctx.Self())
}

// badInput logs one line for a client that broke the protocol and closes its connection.
func (a *connActor) badInput(ctx actor.Context, reason string, key, version int16, err error) {
	if a.met != nil {
		a.met.ClosedBadInput.WithLabelValues(reason).Inc()
	}
	a.log.Warn().Str("reason", reason).Int16("api_key", key).Int16("api_version", version).Err(err).
		Msg("connection_closed_bad_input")
	a.stopped.Store(true)
	ctx.Stop(ctx.Self())
}

func (a *connActor) onFrame(ctx actor.Context, f *frame) {
	if a.stopped.Load() && !a.draining {
		return
	}
	if len(a.held) > 0 || a.mustHold(f) {
		if len(a.held) == 0 {
			a.log.Debug().Int64("unwritten_bytes", a.unwritten.Load()).Int64("granted_bytes", a.granted).
				Msg("requests_held_until_responses_written")
		}
		a.held = append(a.held, f)
		if a.met != nil {
			a.met.RequestsHeld.Inc()
		}
		return
	}
	a.handleFrame(ctx, f)
}

// fetchKey is the API key of Fetch, whose responses are the large ones.
const fetchKey = 1

// mustHold says whether f waits: this connection's unwritten responses (and, for a
// Fetch, the bytes promised to Fetches in flight) are at its budget, or f is a Fetch and
// the broker's unwritten responses are at the broker's. Apache mutes a connection while
// a response is outstanding; this lets a connection read ahead, within bytes.
func (a *connActor) mustHold(f *frame) bool {
	fetch := len(f.b) >= 2 && int16(binary.BigEndian.Uint16(f.b)) == fetchKey
	if limit := a.cfg.MaxQueuedResponseBytes; limit > 0 {
		over := func() bool {
			used := a.unwritten.Load()
			if fetch {
				used += a.granted
			}
			return used >= limit
		}
		if over() {
			// Ask the writer for a wake-up, then look again: it may have written
			// everything between the two.
			a.wantWake.Store(true)
			if over() {
				return true
			}
		}
	}
	if fetch && a.env.ResponseBytes.Free() <= 0 {
		if !a.brokerWait {
			a.brokerWait = true
			sys, self := a.env.System, a.self
			a.env.ResponseBytes.OnFree(func() { sys.Send(self, &resume{}) })
		}
		return true
	}
	return false
}

// resumeHeld hands held frames to their handlers, in order, while they may go.
func (a *connActor) resumeHeld(ctx actor.Context) {
	if a.resuming {
		return
	}
	a.resuming = true
	defer func() { a.resuming = false }()
	for len(a.held) > 0 && !(a.stopped.Load() && !a.draining) {
		f := a.held[0]
		if a.mustHold(f) {
			return
		}
		a.held[0] = nil
		a.held = a.held[1:]
		if a.met != nil {
			a.met.RequestsHeld.Dec()
		}
		a.handleFrame(ctx, f)
	}
	if len(a.held) == 0 {
		a.held = nil
	}
	a.maybeFinishDrain(ctx)
}

func (a *connActor) handleFrame(ctx actor.Context, f *frame) {
	if a.sasl.raw {
		a.onRawToken(ctx, f.b)
		return
	}
	h, body, err := parseHeader(f.b)
	if err != nil {
		a.badInput(ctx, "header", h.key, h.version, err)
		return
	}
	if !a.saslAllows(h.key) {
		if a.sasl.failed {
			// Closing: nothing more is answered, and the frame's in-flight token goes
			// back, so the reader is never stuck on it while the connection drains.
			<-a.tokens
			return
		}
		a.badInput(ctx, "sasl_authentication_required", h.key, h.version,
			fmt.Errorf("api key %d before SASL authentication", h.key))
		return
	}
	entry, known := apis[h.key]
	if !known {
		a.badInput(ctx, "unknown_api_key", h.key, h.version, fmt.Errorf("api key %d is not supported", h.key))
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
		a.badInput(ctx, "unsupported_version", h.key, h.version,
			fmt.Errorf("version %d not in %d-%d", h.version, entry.min, entry.max))
		return
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	if err := req.ReadFrom(body); err != nil {
		a.badInput(ctx, "malformed_body", h.key, h.version, err)
		return
	}
	call.Req = req
	call.own = slot{call: call}
	call.slot = &call.own
	a.slots.push(call.slot)
	if i := intercept.Load(); i != nil && a.intercepted(ctx, i.i, call) {
		return
	}
	a.invoke(ctx, call, func() { entry.handle(call) })
}

// invoke runs fn, turning a panic into a closed connection (with the stack logged): a bug
// reached by one client's request must not take the broker down.
func (a *connActor) invoke(ctx actor.Context, call *Call, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			logs.Panic(a.log.Error().Int16("api_key", call.Key).Int16("api_version", call.Version), r).
				Msg("request_handler_panicked_connection_closed")
			a.stopped.Store(true)
			ctx.Stop(ctx.Self())
		}
	}()
	fn()
}

func (a *connActor) await(c *Call, convert func(any) kmsg.Response) actor.Promise {
	return a.awaiting.Await(a.ctx, pending{call: c, convert: convert})
}

func (a *connActor) onSettled(m *actor.Settled) {
	p, ok := a.awaiting.Take(m)
	if !ok {
		a.offerFetches(m)
		return
	}
	if p.g != nil {
		a.onGatherAnswer(p.g, p.i, m.Value)
		return
	}
	a.convertAndComplete(p.call, p.convert, m.Value)
}

// convertAndComplete turns an answer into call's response with convert and sends it; a
// panic in convert closes the connection.
func (a *connActor) convertAndComplete(call *Call, convert func(any) kmsg.Response, v any) {
	var resp kmsg.Response
	func() {
		defer func() {
			if r := recover(); r != nil {
				logs.Panic(a.log.Error(), r).Msg("response_conversion_panicked_connection_closed")
				a.stopped.Store(true)
				a.ctx.Stop(a.self)
			}
		}()
		resp = convert(v)
	}()
	if resp == nil {
		return
	}
	a.complete(call, resp)
}

// complete records the response of call and sends every response that is now at the
// head of the queue, so responses leave in request order.
func (a *connActor) complete(c *Call, resp kmsg.Response) {
	if i := intercept.Load(); i != nil {
		i.i.Response(a.remote.String(), c, resp)
	}
	if c.done {
		a.log.Error().Int16("api_key", c.Key).Msg("request_completed_twice_second_response_ignored")
		return
	}
	c.done = true
	s := c.slot
	if s == nil {
		return
	}
	s.done = true
	a.granted -= s.grant
	s.grant = 0
	code := int16(0)
	if resp != nil {
		for _, p := range c.patches {
			p(resp)
		}
		resp.SetVersion(c.Version)
		s.bytes = encodeResponse(c, resp, c.api.sizeHint())
		c.api.noteSize(len(s.bytes))
		s.built = int64(len(s.bytes))
		a.unwritten.Add(s.built)
		a.env.ResponseBytes.Add(s.built)
		code = c.api.topErrorCode(resp)
	}
	if a.met != nil {
		a.countRequest(c, code)
	}
	a.flush()
}

// countRequest counts c in kaas_requests_total and its duration, through the metric
// children this connection already looked up.
func (a *connActor) countRequest(c *Call, code int16) {
	l := requestLabels{key: c.Key, version: c.Version, code: code}
	ctr, ok := a.requests[l]
	if !ok {
		if a.requests == nil {
			a.requests = map[requestLabels]prometheus.Counter{}
		}
		ctr = a.met.Requests.WithLabelValues(c.api.name, metrics.Version(c.Version), strconv.Itoa(int(code)))
		a.requests[l] = ctr
	}
	ctr.Inc()
	obs, ok := a.seconds[c.Key]
	if !ok {
		if a.seconds == nil {
			a.seconds = map[int16]prometheus.Observer{}
		}
		obs = a.met.RequestSeconds.WithLabelValues(c.api.name)
		a.seconds[c.Key] = obs
	}
	obs.Observe(time.Since(c.start).Seconds())
}

func (a *connActor) flush() {
	for a.slots.len() > 0 {
		s := a.slots.front()
		if !s.done {
			break
		}
		a.slots.pop()
		if a.closed {
			continue
		}
		if s.bytes != nil {
			s.built = 0 // the writer's to give back now
			if s.call != nil && s.call.tear {
				a.tear(s)
				a.out <- s.bytes
				return
			}
			a.out <- s.bytes
		} else {
			<-a.tokens
		}
	}
	a.resumeHeld(a.ctx)
	a.maybeFinishDrain(a.ctx)
}

// responseBudget promises c's handler up to want bytes of response: no more than what
// is left of the connection's budget and of the broker's, and at least 1 (a Fetch
// always answers with its first batch, KIP-74).
func (a *connActor) responseBudget(c *Call, want int32) int32 {
	if c.slot == nil || c.done || want <= 0 {
		return want
	}
	left := int64(want)
	if limit := a.cfg.MaxQueuedResponseBytes; limit > 0 {
		left = min(left, limit-a.unwritten.Load()-a.granted)
	}
	left = max(1, min(left, a.env.ResponseBytes.Free()))
	c.slot.grant += left
	a.granted += left
	return int32(left)
}

func (a *connActor) fail(c *Call, reason error) {
	if a.met != nil {
		a.met.ClosedBadInput.WithLabelValues("handler").Inc()
	}
	a.log.Warn().Int16("api_key", c.Key).Int16("api_version", c.Version).Err(reason).
		Msg("connection_closed_bad_input")
	a.stopped.Store(true)
	c.done = true
	a.ctx.Stop(a.self)
}
