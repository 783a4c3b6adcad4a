package conn

import (
	"errors"
	"io"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/logs"
)

// Closing a connection. Every close, whatever its cause, goes through closeFor with a
// closeReason, as nats-server's connections close with a ClosedState: it writes the
// one line that says why, counts a protocol breach, and either stops the actor (whose
// onStopping closes the socket) or drains it (stop reading, answer what was read, then
// stop). The reasons are a closed set, so the log's reason and the metric's label take a
// known, small set of values.

// closeReason is why a connection closed.
type closeReason uint8

const (
	_ closeReason = iota // the zero value is no reason, so a forgotten one shows

	// The client or the network ended it.
	closeClientClosed // the client closed its end
	closeReadFailed   // a socket read failed
	closeWriteFailed  // a socket write failed
	closeIdle         // nothing read or written for connections.max.idle.ms

	// The client broke the protocol.
	closeFrameSize          // a frame size negative, or over socket.request.max.bytes (sasl.server.max.receive.size before SASL)
	closeFrameTimeout       // a frame not whole within socket.request.read.timeout.ms of its first byte
	closeTLSHandshake       // the TLS handshake failed
	closeBadHeader          // a request header that does not parse
	closeSASLRequired       // a request other than ApiVersions and the SASL APIs before SASL authentication
	closeUnknownAPIKey      // an API key the broker does not serve
	closeUnsupportedVersion // a version outside the API's range (an ApiVersions one is answered instead)
	closeMalformedBody      // a request body that does not decode
	closeHandlerRefused     // a handler's Call.Fail: a breach with no error code to answer it with

	// The broker ended it.
	closeAuthFailed      // SASL authentication failed; closed connection.failed.authentication.delay.ms later
	closeBrokerStopping  // Drain: the broker stops gracefully
	closeHandlerPanicked // a request's handler panicked
	closeConvertPanicked // turning an awaited answer into a response panicked

	// The chaos suite's Intercept ended it.
	closeInjectedReset            // ResetRequest: the request read and not handled
	closeInjectedResetMidResponse // ResetResponse: the request handled, half its response written

	numCloseReasons
)

// closeKind is how a close is told.
type closeKind uint8

const (
	// closeOrderly: connection_closed, at debug level; nothing for an operator to do.
	closeOrderly closeKind = iota
	// closeBreach: connection_closed_bad_input, a warning naming the request, counted
	// by reason in kaas_connections_closed_bad_input_total.
	closeBreach
	// closeBug: an error naming the request, with the panic and its stack.
	closeBug
)

// closeReasons says, for each reason, its name (its String, the log's reason and the
// metric's label), how it is told, its log event, and whether the connection drains: the
// answers it owes the client are written before the socket closes.
var closeReasons = [numCloseReasons]struct {
	name  string
	kind  closeKind
	event string
	drain bool
}{
	closeClientClosed: {name: "client_closed", event: "connection_closed"},
	closeReadFailed:   {name: "read_failed", event: "connection_closed"},
	closeWriteFailed:  {name: "write_failed", event: "connection_closed"},
	closeIdle:         {name: "idle", event: "connection_closed"},

	closeFrameSize:          {name: "frame_size", kind: closeBreach, event: "connection_closed_bad_input"},
	closeFrameTimeout:       {name: "frame_timeout", kind: closeBreach, event: "connection_closed_bad_input"},
	closeTLSHandshake:       {name: "tls_handshake", kind: closeBreach, event: "connection_closed_bad_input"},
	closeBadHeader:          {name: "header", kind: closeBreach, event: "connection_closed_bad_input"},
	closeSASLRequired:       {name: "sasl_authentication_required", kind: closeBreach, event: "connection_closed_bad_input"},
	closeUnknownAPIKey:      {name: "unknown_api_key", kind: closeBreach, event: "connection_closed_bad_input"},
	closeUnsupportedVersion: {name: "unsupported_version", kind: closeBreach, event: "connection_closed_bad_input"},
	closeMalformedBody:      {name: "malformed_body", kind: closeBreach, event: "connection_closed_bad_input"},
	closeHandlerRefused:     {name: "handler", kind: closeBreach, event: "connection_closed_bad_input"},

	// Drained, not cut: the failure's answer is written before the socket closes.
	closeAuthFailed:      {name: "sasl_authentication_failed", event: "connection_closed", drain: true},
	closeBrokerStopping:  {name: "broker_stopping", event: "connection_closed", drain: true},
	closeHandlerPanicked: {name: "handler_panicked", kind: closeBug, event: "request_handler_panicked_connection_closed"},
	closeConvertPanicked: {name: "response_conversion_panicked", kind: closeBug, event: "response_conversion_panicked_connection_closed"},

	closeInjectedReset:            {name: "injected_reset", event: "connection_closed"},
	closeInjectedResetMidResponse: {name: "injected_reset_mid_response", event: "connection_closed"},
}

func (r closeReason) String() string {
	if r < numCloseReasons && closeReasons[r].name != "" {
		return closeReasons[r].name
	}
	return "unknown"
}

// closeDetail is what a close line tells besides its reason.
type closeDetail struct {
	err error
	// key and version name the request a breach or a panic is about: -1 when the close
	// came before one was read (a frame too large, a failed TLS handshake).
	key, version int16
	panicked     any // the recovered value of a panic, logged with its stack
}

// noRequest is the detail of a close that is about no request in particular.
func noRequest(err error) closeDetail { return closeDetail{err: err, key: -1, version: -1} }

// closeFor is the one way a connection closes. The first reason stands: a connection
// already stopping ignores later ones, and one already draining ignores another reason
// to drain, but a reason to stop still cuts a drain short (a write failed meanwhile).
func (a *connActor) closeFor(why closeReason, d closeDetail) {
	drain := closeReasons[why].drain
	if a.stopped.Load() && (!a.draining || drain) {
		return
	}
	a.logClose(why, d)
	if drain {
		a.drain(a.ctx)
		return
	}
	a.stopped.Store(true)
	a.ctx.Stop(a.self)
}

// logClose writes the one line of a close, and counts a breach.
func (a *connActor) logClose(why closeReason, d closeDetail) {
	r := closeReasons[why]
	var e *zerolog.Event
	switch r.kind {
	case closeBreach:
		if a.met != nil {
			a.met.ClosedBadInput.WithLabelValues(why.String()).Inc()
		}
		e = a.log.Warn()
	case closeBug:
		e = a.log.Error()
	default:
		e = a.log.Debug()
	}
	e = e.Str("reason", why.String())
	if r.kind != closeOrderly {
		e = e.Int16("api_key", d.key).Int16("api_version", d.version)
	}
	if d.err != nil {
		e = e.Err(d.err)
	}
	if d.panicked != nil {
		e = logs.Panic(e, d.panicked)
	}
	e.Msg(r.event)
}

// onReaderDone closes for the reason the reader stopped, unless the connection is
// draining, when the reader was expected to stop.
func (a *connActor) onReaderDone(ctx actor.Context, m *readerDone) {
	a.readDone = true
	switch {
	case a.draining || errors.Is(m.err, errDraining):
		a.maybeFinishDrain(ctx)
	case errors.Is(m.err, io.EOF):
		a.closeFor(closeClientClosed, noRequest(nil))
	case errors.Is(m.err, errIdle):
		a.closeFor(closeIdle, noRequest(nil))
	case errors.Is(m.err, errFrameTooLarge), errors.Is(m.err, errNegativeFrame):
		a.closeFor(closeFrameSize, noRequest(m.err))
	case errors.Is(m.err, errFrameTimeout):
		a.closeFor(closeFrameTimeout, noRequest(m.err))
	case isTLSError(m.err):
		a.closeFor(closeTLSHandshake, noRequest(m.err))
	default:
		a.closeFor(closeReadFailed, noRequest(m.err))
	}
}

// drain stops reading and stops the actor once every request read is answered.
func (a *connActor) drain(ctx actor.Context) {
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

// fail closes the connection for a request its handler refused (Call.Fail).
func (a *connActor) fail(c *Call, reason error) {
	c.done = true
	a.closeFor(closeHandlerRefused, closeDetail{err: reason, key: c.Key, version: c.Version})
}
