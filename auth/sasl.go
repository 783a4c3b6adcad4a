package auth

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Session is one SASL exchange on a connection: Step takes a client token and returns
// the server's; done is set when the exchange succeeded. An error is a failed
// authentication. User is the name the client gave (for logs), Principal who it is once
// done.
type Session interface {
	Step(token []byte) (reply []byte, done bool, err error)
	User() string
	Principal() Principal
}

// ErrAuthenticationFailed is every failed exchange's error: it says nothing of which
// part was wrong, and never carries what the client sent.
var ErrAuthenticationFailed = errors.New("invalid username or password")

// ParseMechanisms reads sasl.enabled.mechanisms (comma-separated).
func ParseMechanisms(v string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(v, ",") {
		m = strings.ToUpper(strings.TrimSpace(m))
		if m == "" {
			continue
		}
		switch m {
		case Plain, ScramSHA256, ScramSHA512:
		default:
			return nil, fmt.Errorf("SASL mechanism %q is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 are)", m)
		}
		out = append(out, m)
	}
	return out, nil
}

// Start begins an exchange of mechanism over c; ok is false for a mechanism not served.
func (c *Credentials) Start(mechanism string) (Session, bool) {
	switch mechanism {
	case Plain:
		return &plainSession{creds: c}, true
	case ScramSHA256, ScramSHA512:
		return &scramServer{creds: c, mechanism: mechanism}, true
	}
	return nil, false
}

// plainSession is RFC 4616: one token "authzid NUL authcid NUL passwd". An authzid other
// than the user is refused, as Apache's PlainSaslServer does.
type plainSession struct {
	creds *Credentials
	user  string
	done  bool
}

func (s *plainSession) Step(token []byte) ([]byte, bool, error) {
	if s.done {
		return nil, false, ErrAuthenticationFailed
	}
	s.done = true
	parts := bytes.Split(token, []byte{0})
	if len(parts) != 3 {
		return nil, false, ErrAuthenticationFailed
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	s.user = user
	if user == "" || pass == "" || (authz != "" && authz != user) {
		return nil, false, ErrAuthenticationFailed
	}
	if !s.creds.VerifyPlain(user, pass) {
		return nil, false, ErrAuthenticationFailed
	}
	return []byte{}, true, nil
}

func (s *plainSession) User() string         { return s.user }
func (s *plainSession) Principal() Principal { return User(s.user) }
