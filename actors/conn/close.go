package conn

import (
	"errors"
	"io"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
)

// Closing a connection: why it closes, the one line that says so, and the drain that
// answers what was read before the socket closes.

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
