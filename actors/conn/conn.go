package conn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
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
	// OnStop is called once when the connection is done: the actor stopped and its last
	// responses were written (the server counts live connections, and a graceful stop
	// waits for them before the process exits).
	OnStop func()
}

// Props makes one connection actor. It owns the socket: a reader goroutine feeds it
// frames, a writer goroutine writes the responses it releases in request order.
func Props(cfg Config) *actor.Props {
	return actor.PropsOf(func() actor.Actor { return &connActor{cfg: cfg} })
}

// Messages the connection actor gets from its own goroutines and from the server.
type (
	// frame is one request frame read from the socket (the size prefix stripped).
	frame struct {
		b    []byte
		read time.Time
	}
	// readerDone says the reader goroutine ended; err is why (io.EOF for a clean close).
	readerDone struct{ err error }
	// writerDone says a socket write failed.
	writerDone struct{ err error }
	// Drain asks the connection to stop reading, answer what it has read, then close.
	// The server sends it on a graceful stop.
	Drain struct{}
)

// errFrameTooLarge and friends are the typed reasons a connection closes.
var (
	errFrameTooLarge = errors.New("frame larger than socket.request.max.bytes")
	errNegativeFrame = errors.New("negative frame size")
	errIdle          = errors.New("idle timeout")
	errDraining      = errors.New("broker stopping")
)

type slot struct {
	call  *Call
	done  bool
	bytes []byte // the encoded response, size prefix included; nil for no response
}

type pending struct {
	call    *Call
	convert func(any) kmsg.Response
}

type connActor struct {
	cfg Config
	env *Env
	log zerolog.Logger
	met *metrics.Metrics

	self *actor.PID
	ctx  actor.Context // the same context for every message of this actor
	out  chan []byte   // to the writer; never blocks (see tokens)
	// rbuf[rpos:rend] is read from the socket and not yet consumed; the reader
	// goroutine alone touches them.
	rbuf       []byte
	rpos, rend int
	tokens     chan struct{} // one per request read and not yet written: the in-flight bound
	done       chan struct{} // closed when the actor stops
	stopped    atomic.Bool   // read by the reader and writer goroutines

	slots    []*slot // in request order
	nextSeq  uint64
	awaiting map[uint64]pending
	draining bool
	readDone bool
	closed   bool
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
	}
}

func (a *connActor) onStarted(ctx actor.Context) {
	a.env = a.cfg.Env
	a.met = a.env.Metrics
	a.self = ctx.Self()
	a.ctx = ctx
	a.log = a.env.Log.With().Str("remote", a.cfg.Conn.RemoteAddr().String()).Str("listener", a.cfg.Listener).Logger()
	a.out = make(chan []byte, a.cfg.MaxInflight)
	a.tokens = make(chan struct{}, a.cfg.MaxInflight)
	a.done = make(chan struct{})
	a.awaiting = map[uint64]pending{}
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
	a.stopped.Store(true)
	if a.draining {
		// Graceful: the writer sends what is queued (bounded by a deadline, so a client
		// that stopped reading cannot hold the stop), then closes the socket.
		_ = a.cfg.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	} else {
		_ = a.cfg.Conn.Close()
	}
	if !a.closed {
		a.closed = true
		close(a.out)
		close(a.done)
	}
	if a.met != nil {
		a.met.OpenConnections.Dec()
	}
}

// readLoop reads frames until the socket fails. It takes an in-flight token before each
// frame, so a client with MaxInflight unanswered requests is simply not read from.
func (a *connActor) readLoop(send func(any)) {
	nc := a.cfg.Conn
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
		}
		b := make([]byte, n)
		if err := a.readFull(nc, b); err != nil {
			send(&readerDone{err: err})
			return
		}
		send(&frame{b: b, read: time.Now()})
	}
}

// readFull reads len(b) bytes, closing on idleness only when no request is in flight
// (a JoinGroup may legitimately wait minutes for its round).
//
// Small reads go through rbuf: one system call usually brings a frame's size and body,
// or several pipelined frames. A read at least as large as rbuf goes straight into b.
func (a *connActor) readFull(nc net.Conn, b []byte) error {
	got := copy(b, a.rbuf[a.rpos:a.rend])
	a.rpos += got
	for got < len(b) {
		if a.cfg.Idle > 0 {
			_ = nc.SetReadDeadline(time.Now().Add(a.cfg.Idle))
		}
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
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if a.stopped.Load() {
				return errDraining
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
		if !failed {
			if _, err := bufs.WriteTo(nc); err != nil {
				failed = true
				send(&writerDone{err: err})
			}
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
	default:
		a.closeWith(ctx, "read_failed", m.err, zerolog.DebugLevel)
	}
}

func (a *connActor) onDrain(ctx actor.Context) {
	if a.draining {
		return
	}
	a.draining = true
	// Wake the reader: it sees stopped and exits; frames it already sent are answered.
	a.stopped.Store(true)
	_ = a.cfg.Conn.SetReadDeadline(time.Now())
	a.maybeFinishDrain(ctx)
}

func (a *connActor) maybeFinishDrain(ctx actor.Context) {
	if a.draining && a.readDone && len(a.slots) == 0 {
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
	e.Msg("connection closed")
	ctx.Stop(ctx.Self())
}

// badInput logs one line for a client that broke the protocol and closes its connection.
func (a *connActor) badInput(ctx actor.Context, reason string, key, version int16, err error) {
	if a.met != nil {
		a.met.ClosedBadInput.WithLabelValues(reason).Inc()
	}
	a.log.Warn().Str("reason", reason).Int16("api_key", key).Int16("api_version", version).Err(err).
		Msg("closing connection on bad input")
	a.stopped.Store(true)
	ctx.Stop(ctx.Self())
}

func (a *connActor) onFrame(ctx actor.Context, f *frame) {
	if a.stopped.Load() && !a.draining {
		return
	}
	h, body, err := parseHeader(f.b)
	if err != nil {
		a.badInput(ctx, "header", h.key, h.version, err)
		return
	}
	entry, known := apis[h.key]
	if !known {
		a.badInput(ctx, "unknown_api_key", h.key, h.version, fmt.Errorf("api key %d is not supported", h.key))
		return
	}
	call := &Call{
		Key: h.key, Version: h.version, CorrelationID: h.correlationID, ClientID: h.clientID,
		Listener: a.cfg.Listener, Remote: a.cfg.Conn.RemoteAddr(), Env: a.env, conn: a,
		seq: a.nextSeq, start: f.read,
	}
	a.nextSeq++
	call.Log = a.log.With().Str("api", kmsg.NameForKey(h.key)).Int16("api_version", h.version).
		Str("client_id", h.clientID).Logger()
	if h.version < entry.min || h.version > entry.max {
		if h.key == apiVersionsKey {
			// Apache answers an ApiVersions it cannot parse with UNSUPPORTED_VERSION and
			// its table, at version 0, so the client can pick a version both speak.
			a.slots = append(a.slots, &slot{call: call})
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
	a.slots = append(a.slots, &slot{call: call})
	a.invoke(ctx, call, func() { entry.handle(call) })
}

// invoke runs fn, turning a panic into a closed connection (with the stack logged): a bug
// reached by one client's request must not take the broker down.
func (a *connActor) invoke(ctx actor.Context, call *Call, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error().Int16("api_key", call.Key).Int16("api_version", call.Version).
				Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).
				Msg("request handler panicked; closing connection")
			a.stopped.Store(true)
			ctx.Stop(ctx.Self())
		}
	}()
	fn()
}

func (a *connActor) await(c *Call, convert func(any) kmsg.Response) actor.Promise {
	p := a.env.System.PromiseTo(a.self)
	a.awaiting[p.ID()] = pending{call: c, convert: convert}
	return p
}

func (a *connActor) onSettled(m *actor.Settled) {
	p, ok := a.awaiting[m.ID]
	if !ok {
		return
	}
	delete(a.awaiting, m.ID)
	var resp kmsg.Response
	func() {
		defer func() {
			if r := recover(); r != nil {
				a.log.Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).
					Msg("response conversion panicked; closing connection")
				a.stopped.Store(true)
				a.ctx.Stop(a.self)
			}
		}()
		resp = p.convert(m.Value)
	}()
	if resp == nil {
		return
	}
	a.complete(p.call, resp)
}

// complete records the response of call and sends every response that is now at the
// head of the queue, so responses leave in request order.
func (a *connActor) complete(c *Call, resp kmsg.Response) {
	if c.done {
		a.log.Error().Int16("api_key", c.Key).Msg("request completed twice; ignoring the second response")
		return
	}
	c.done = true
	var s *slot
	for _, x := range a.slots {
		if x.call == c {
			s = x
			break
		}
	}
	if s == nil {
		return
	}
	s.done = true
	code := int16(0)
	if resp != nil {
		resp.SetVersion(c.Version)
		s.bytes = encodeResponse(c, resp)
		code = topErrorCode(resp)
	}
	if a.met != nil {
		name := kmsg.NameForKey(c.Key)
		a.met.Requests.WithLabelValues(name, metrics.Version(c.Version), strconv.Itoa(int(code))).Inc()
		a.met.RequestSeconds.WithLabelValues(name).Observe(time.Since(c.start).Seconds())
	}
	a.flush()
}

func (a *connActor) flush() {
	n := 0
	for _, s := range a.slots {
		if !s.done {
			break
		}
		n++
		if a.closed {
			continue
		}
		if s.bytes != nil {
			a.out <- s.bytes
		} else {
			<-a.tokens
		}
	}
	if n > 0 {
		copy(a.slots, a.slots[n:])
		for i := len(a.slots) - n; i < len(a.slots); i++ {
			a.slots[i] = nil
		}
		a.slots = a.slots[:len(a.slots)-n]
	}
	a.maybeFinishDrain(a.ctx)
}

func (a *connActor) fail(c *Call, reason error) {
	if a.met != nil {
		a.met.ClosedBadInput.WithLabelValues("handler").Inc()
	}
	a.log.Warn().Int16("api_key", c.Key).Int16("api_version", c.Version).Err(reason).
		Msg("closing connection on bad input")
	a.stopped.Store(true)
	c.done = true
	a.ctx.Stop(a.self)
}

// topErrorCode reads a response's top-level ErrorCode field, if it has one, for metrics.
func topErrorCode(resp kmsg.Response) int16 {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	f := v.Elem().FieldByName("ErrorCode")
	if f.IsValid() && f.Kind() == reflect.Int16 {
		return int16(f.Int())
	}
	return 0
}
