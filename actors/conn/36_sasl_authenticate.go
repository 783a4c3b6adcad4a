package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate (key 36), v0–v2.
//
//	v1: session_lifetime_ms (KIP-368); 0 here: no re-authentication is required.
//	v2: flexible.
//
// Each request carries one token of the exchange the handshake chose. A failed exchange
// answers SASL_AUTHENTICATION_FAILED with a message that names no credential, and the
// connection closes after connection.failed.authentication.delay.ms. Without a handshake
// first, or once authenticated, it is ILLEGAL_SASL_STATE and the connection closes.
func init() { register(saslAuthenticateKey, 0, 2, handleSaslAuthenticate) }

func handleSaslAuthenticate(c *Call) {
	req := c.Req.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	a := c.conn
	if !a.sasl.required {
		// A listener without SASL: Apache's KafkaApis answers, the connection stays.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		c.Respond(resp)
		return
	}
	if a.sasl.authenticated || a.sasl.mechanism == "" || a.sasl.raw {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.ErrorMessage = strPtr("SaslAuthenticate is not expected now")
		a.failAuth(logsMechanism(a.sasl.mechanism), "", "illegal_sasl_state")
		c.Respond(resp)
		return
	}
	s, ok := a.startSession()
	if !ok {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = strPtr("Authentication failed: mechanism " + a.sasl.mechanism + " is not available")
		a.failAuth(a.sasl.mechanism, "", "mechanism_unavailable")
		c.Respond(resp)
		return
	}
	reply, done, err := s.Step(req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = strPtr("Authentication failed during authentication due to invalid credentials with SASL mechanism " + a.sasl.mechanism)
		a.failAuth(a.sasl.mechanism, s.User(), "invalid_credentials")
		c.Respond(resp)
		return
	}
	resp.SASLAuthBytes = reply
	if done {
		a.authenticated(s)
	}
	c.Respond(resp)
}
