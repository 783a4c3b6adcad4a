package conn

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake (key 17), v0–v1.
//
//	v0: the SASL tokens that follow are raw frames, without Kafka request headers.
//	v1: the tokens come in SaslAuthenticate requests (KIP-152).
//
// The response lists the listener's mechanisms. A mechanism it does not serve is
// UNSUPPORTED_SASL_MECHANISM and closes the connection; a handshake on a listener without
// SASL, or a second one, is ILLEGAL_SASL_STATE (Apache's KafkaApis answers those).
func init() { register(saslHandshakeKey, 0, 1, handleSaslHandshake) }

func handleSaslHandshake(c *Call) {
	req := c.Req.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	a := c.conn
	resp.SupportedMechanisms = append([]string{}, a.cfg.Mechanisms...)
	if !a.sasl.required || a.sasl.authenticated || a.sasl.mechanism != "" {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		c.Respond(resp)
		return
	}
	if !slices.Contains(a.cfg.Mechanisms, req.Mechanism) || a.env.Credentials == nil {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		a.failAuth(logsMechanism(req.Mechanism), "", "unsupported_mechanism")
		c.Respond(resp)
		return
	}
	a.sasl.mechanism = req.Mechanism
	a.sasl.raw = c.Version == 0
	c.Respond(resp)
}

// logsMechanism is a mechanism name a client sent, fit for a log line and a metric label:
// one of the served names, or "other".
func logsMechanism(m string) string {
	switch m {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		return m
	}
	return "other"
}
