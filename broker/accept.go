package broker

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"kaas/actors/actor"
	"kaas/actors/conn"
)

// Accepting: a listener keeps accepting through failures, as net/http's Server.Serve and
// Apache's Acceptor do. A process out of file descriptors (EMFILE), a kernel out of file
// table entries (ENFILE) or buffers (ENOBUFS, ENOMEM), or a client that reset its
// connection before it was accepted (ECONNABORTED) fails one Accept; the next may work
// once a connection closes. Only a closed listener ends the loop.

const (
	// acceptRetryMin and acceptRetryMax bound the wait before retrying a failed accept:
	// 5 ms doubling to 1 s, net/http's backoff.
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// acceptFailLogInterval is how often a listener that keeps failing logs it (with the
	// number of failures not logged since).
	acceptFailLogInterval = 10 * time.Second
)

// acceptFailure is an accept failure episode: from the first failed accept to the next
// accepted connection.
type acceptFailure struct {
	reason string
	since  time.Time
	err    error
}

// acceptErrnos name the errors a listener retries on that an operator should tell apart.
var acceptErrnos = []struct {
	errno  syscall.Errno
	reason string
}{
	{syscall.EMFILE, "emfile"},
	{syscall.ENFILE, "enfile"},
	{syscall.ENOBUFS, "enobufs"},
	{syscall.ENOMEM, "enomem"},
	{syscall.ECONNABORTED, "econnaborted"},
	{syscall.EINVAL, "shutdown"}, // the watchdog shut the listener down (package watchdog)
}

// acceptErrorReasons are every reason label of kaas_accept_errors_total.
var acceptErrorReasons = []string{"emfile", "enfile", "enobufs", "enomem", "econnaborted", "shutdown", "timeout", "other"}

// acceptErrorReason is the reason label of a failed accept.
func acceptErrorReason(err error) string {
	for _, e := range acceptErrnos {
		if errors.Is(err, e.errno) {
			return e.reason
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// nextAcceptDelay is the wait before the next retry after one of delay.
func nextAcceptDelay(delay time.Duration) time.Duration {
	if delay == 0 {
		return acceptRetryMin
	}
	return min(2*delay, acceptRetryMax)
}

// accept serves l's connections until l is closed or the broker stops.
func (b *Broker) accept(l *listener) {
	defer b.acceptWG.Done()
	var delay time.Duration
	failures := 0
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || b.quitting() {
				return
			}
			failures++
			delay = nextAcceptDelay(delay)
			reason := acceptErrorReason(err)
			b.met.AcceptErrors.WithLabelValues(l.name, reason).Inc()
			if l.failing.Load() == nil {
				l.failing.Store(&acceptFailure{reason: reason, since: time.Now(), err: err})
			}
			l.failLog.Event(b.log.Error()).Str("listener", l.name).Str("reason", reason).Err(err).
				Dur("retry_in_ms", delay).Msg("listener_accept_failed")
			if reason == "shutdown" && b.relisten(l) {
				l.failing.Store(nil)
				failures, delay = 0, 0
				continue
			}
			if !b.wait(delay) {
				return
			}
			continue
		}
		if failures > 0 {
			f := l.failing.Swap(nil)
			b.log.Info().Str("listener", l.name).Int("failures", failures).Dur("failed_for_ms", time.Since(f.since)).
				Msg("listener_accept_recovered")
			failures, delay = 0, 0
		}
		// Apache's order: wait for one of max.connections, then check the address.
		if !b.quotas.waitSlot(b.quit, func() { b.onAcceptPaused(l) }) {
			_ = nc.Close()
			return
		}
		ip := ipOf(nc)
		if ok, limit := b.quotas.admit(ip); !ok {
			_ = nc.Close()
			b.met.ConnectionsRefused.WithLabelValues(l.name, "max_connections_per_ip").Inc()
			l.refuseLog.Event(b.log.Warn()).Str("listener", l.name).Str("remote", nc.RemoteAddr().String()).
				Str("reason", "max_connections_per_ip").Int("limit", limit).Msg("connection_refused")
			continue
		}
		b.serve(l, nc, ip)
	}
}

// relisten puts a listener the watchdog shut down, while this broker did not run, back
// to listening, and reports whether it did. Until then dials are refused, as a killed
// broker's are.
func (b *Broker) relisten(l *listener) bool {
	r, ok := l.ln.(interface{ Relisten() error })
	if !ok {
		return false
	}
	if err := r.Relisten(); err != nil {
		l.failLog.Event(b.log.Error()).Str("listener", l.name).Err(err).Msg("listener_relisten_failed")
		return false
	}
	b.log.Warn().Str("listener", l.name).Msg("listener_relistened")
	return true
}

// onAcceptPaused counts and logs a listener that stops accepting at max.connections.
func (b *Broker) onAcceptPaused(l *listener) {
	b.met.AcceptPaused.WithLabelValues(l.name).Inc()
	l.pauseLog.Event(b.log.Warn()).Str("listener", l.name).Int32("max_connections", b.cfg.MaxConnections).
		Msg("listener_accept_paused")
}

// quitting reports whether Stop has begun.
func (b *Broker) quitting() bool {
	select {
	case <-b.quit:
		return true
	default:
		return false
	}
}

// wait waits d, or less when Stop begins (then it reports false).
func (b *Broker) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.quit:
		return false
	}
}

// serve makes nc, counted in under ip, a connection actor, or closes it when the broker
// is stopping. Either way it is counted out once.
func (b *Broker) serve(l *listener, nc net.Conn, ip netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping {
		_ = nc.Close()
		b.quotas.release(ip)
		return
	}
	b.connsWG.Add(1)
	if b.cfg.UsesTLS(l.name) {
		nc = tls.Server(nc, b.tls)
	}
	var pid *actor.PID
	done := make(chan struct{})
	pid = b.sys.Spawn(conn.Props(conn.Config{
		Env:                     b.env,
		Conn:                    nc,
		Listener:                l.name,
		MaxFrame:                b.cfg.MaxRequestBytes,
		Idle:                    b.cfg.ConnectionsMaxIdle,
		MaxInflight:             b.cfg.MaxInflightPerConn,
		MaxQueuedResponseBytes:  b.cfg.ConnMaxQueuedResponseBytes,
		FrameTimeout:            b.cfg.SocketRequestReadTimeout,
		SASL:                    b.cfg.UsesSASL(l.name),
		Mechanisms:              b.cfg.SASLMechanisms,
		FailedAuthDelay:         b.cfg.FailedAuthDelay,
		MaxUnauthenticatedFrame: b.cfg.SASLMaxReceiveSize,
		OnStop: func() {
			<-done
			b.mu.Lock()
			delete(b.conns, pid)
			b.mu.Unlock()
			b.quotas.release(ip)
			b.connsWG.Done()
		},
	}))
	b.conns[pid] = struct{}{}
	close(done)
}
