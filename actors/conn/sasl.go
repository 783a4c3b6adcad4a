package conn

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"time"

	"kaas/actors/actor"
	"kaas/auth"
	"kaas/logs"
)

// The connection's authentication: TLS (the principal of a client certificate) and SASL
// (SaslHandshake 17, SaslAuthenticate 36), as Apache's SaslServerAuthenticator.
//
//	start ──SaslHandshake(mech)──▶ mechanism chosen ──SaslAuthenticate*──▶ authenticated
//	  │ v0 handshake: the tokens that follow are raw frames, without Kafka headers
//	  └ anything but ApiVersions and the SASL APIs before authenticated: closed
//	a failed exchange: SASL_AUTHENTICATION_FAILED, then closed after FailedAuthDelay

// saslState is one connection's SASL exchange.
type saslState struct {
	required      bool   // the listener is SASL_PLAINTEXT or SASL_SSL
	mechanism     string // chosen by SaslHandshake
	session       auth.Session
	raw           bool // SaslHandshake v0: tokens come as raw frames
	authenticated bool
	failed        bool // answered SASL_AUTHENTICATION_FAILED; closing
}

// Keys of the SASL APIs, which a connection may send before it is authenticated.
const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// saslAllows says whether a request with key may be handled now.
func (a *connActor) saslAllows(key int16) bool {
	if a.sasl.failed {
		return false
	}
	if !a.sasl.required || a.sasl.authenticated {
		return true
	}
	return key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey
}

// handshakeTLS completes a TLS connection's handshake on the reader goroutine before the
// first frame, so the actor knows the client certificate's principal before any request.
// false: the handshake failed (the actor was told).
func (a *connActor) handshakeTLS(send func(any)) bool {
	tc, ok := a.cfg.Conn.(*tls.Conn)
	if !ok {
		return true
	}
	timeout := a.cfg.HandshakeTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		send(&readerDone{err: &tlsError{err}})
		return false
	}
	_ = tc.SetDeadline(time.Time{})
	send(&tlsReady{state: tc.ConnectionState()})
	return true
}

// tlsError is a failed TLS handshake.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

func (a *connActor) onTLSReady(m *tlsReady) {
	// A certificate the listener verified (ssl.client.auth requested or required) names
	// the principal; SASL, on a SASL_SSL listener, names it again.
	if len(m.state.VerifiedChains) > 0 && len(m.state.PeerCertificates) > 0 {
		a.principal = auth.CertificatePrincipal(m.state.PeerCertificates[0].Subject)
		a.log.Debug().Str("principal", logs.ID(a.principal.String())).Msg("tls_client_authenticated")
	}
}

// failAuth (called before the failure is answered, so the count is there when the
// client sees the answer) counts and logs a failed authentication and closes the connection after the
// delay, reading nothing more meanwhile (Apache's connections.failed.authentication.delay.ms
// slows down a client guessing passwords).
func (a *connActor) failAuth(mechanism, user, reason string) {
	a.sasl.failed = true
	if a.met != nil {
		a.met.SASLAuthentications.WithLabelValues(mechanism, "failure").Inc()
	}
	// The user name the client gave is bounded (logs.ID); what it sent as a password
	// never reaches a log line. A brute force would log a line per guess: the first is
	// logged, then one per interval with the number held back (the metric counts each).
	e := a.log.Warn()
	if l := a.env.AuthFailureLog; l != nil {
		e = l.Event(e)
	}
	e.Str("mechanism", mechanism).Str("user", logs.ID(user)).Str("reason", reason).Msg("sasl_authentication_failed")
	if a.cfg.FailedAuthDelay <= 0 {
		a.env.System.Send(a.self, &authFailedClose{})
		return
	}
	actor.After(a.ctx, a.cfg.FailedAuthDelay, &authFailedClose{})
}

// authenticated records a successful exchange.
func (a *connActor) authenticated(s auth.Session) {
	a.sasl.authenticated = true
	a.saslDone.Store(true)
	a.sasl.session = nil
	a.principal = s.Principal()
	if a.met != nil {
		a.met.SASLAuthentications.WithLabelValues(a.sasl.mechanism, "success").Inc()
	}
	a.log.Debug().Str("mechanism", a.sasl.mechanism).Str("principal", logs.ID(a.principal.String())).
		Msg("sasl_authenticated")
}

// startSession begins the exchange of the chosen mechanism.
func (a *connActor) startSession() (auth.Session, bool) {
	if a.sasl.session != nil {
		return a.sasl.session, true
	}
	if a.env.Credentials == nil {
		return nil, false
	}
	s, ok := a.env.Credentials.Start(a.sasl.mechanism)
	a.sasl.session = s
	return s, ok
}

// onRawToken is one SASL token after a v0 SaslHandshake: a frame without a Kafka header,
// answered by a frame holding the server's token. A failure has no error code to carry:
// the connection is closed (Apache does the same).
func (a *connActor) onRawToken(ctx actor.Context, token []byte) {
	if a.sasl.failed {
		<-a.tokens // as handleFrame does for a frame it drops
		return
	}
	s, ok := a.startSession()
	if !ok {
		<-a.tokens // no reply frame gives the token back
		a.failAuth(a.sasl.mechanism, "", "mechanism_unavailable")
		return
	}
	reply, done, err := s.Step(token)
	if err != nil {
		<-a.tokens
		a.failAuth(a.sasl.mechanism, s.User(), "invalid_credentials")
		return
	}
	if done {
		a.sasl.raw = false
		a.authenticated(s)
	}
	a.sendRaw(reply)
}

// sendRaw queues b as a frame of its own (size prefix, no header), in request order.
func (a *connActor) sendRaw(b []byte) {
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	s := &slot{done: true, bytes: buf, built: int64(len(buf))}
	a.unwritten.Add(s.built)
	a.env.ResponseBytes.Add(s.built)
	a.slots.push(s)
	a.flush()
}

// hostOf is the address of a remote as ACLs name hosts ("10.0.0.1").
func hostOf(addr net.Addr) string {
	if t, ok := addr.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if addr == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}

// isTLSError says whether a reader's error is a failed TLS handshake.
func isTLSError(err error) bool {
	var t *tlsError
	return errors.As(err, &t)
}
