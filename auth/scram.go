package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"strings"
)

// scramServer is the server side of RFC 5802 (SCRAM-SHA-256, SCRAM-SHA-512), as Apache's
// ScramSaslServer checks it. It is not xdg-go/scram's server because that one requires
// the client-final nonce to equal the combined nonce, and librdkafka 2.0 sends the client
// nonce twice before it (c=biws,r=<cnonce><cnonce><snonce>); Apache only requires the
// nonce to end with the combined one, so librdkafka's SCRAM works against Apache, and so
// here. The proof is checked over the client's own message, so this loosens nothing an
// attacker could use: the proof still needs the password.
type scramServer struct {
	creds     *Credentials
	mechanism string

	step        int
	user        string
	gs2Header   string
	clientFirst string // client-first-message-bare
	serverFirst string
	nonce       string // client nonce + server nonce
	cred        Credential
}

func (s *scramServer) User() string         { return s.user }
func (s *scramServer) Principal() Principal { return User(s.user) }

func (s *scramServer) Step(token []byte) ([]byte, bool, error) {
	s.step++
	switch s.step {
	case 1:
		return s.first(string(token))
	case 2:
		return s.final(string(token))
	}
	return nil, false, ErrAuthenticationFailed
}

// first takes client-first-message: gs2-header ("n,," or "n,a=authzid,"; channel binding
// is refused) and "n=user,r=cnonce[,extensions]".
func (s *scramServer) first(msg string) ([]byte, bool, error) {
	parts := strings.SplitN(msg, ",", 3)
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") {
		return nil, false, ErrAuthenticationFailed
	}
	authz := parts[1]
	s.gs2Header = parts[0] + "," + authz + ","
	s.clientFirst = parts[2]
	attrs := strings.Split(s.clientFirst, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, false, ErrAuthenticationFailed
	}
	user, ok := decodeSaslName(attrs[0][2:])
	cnonce := attrs[1][2:]
	if !ok || user == "" || cnonce == "" {
		return nil, false, ErrAuthenticationFailed
	}
	s.user = user
	if authz != "" {
		a, ok := decodeSaslName(strings.TrimPrefix(authz, "a="))
		if !ok || !strings.HasPrefix(authz, "a=") || a != user {
			return nil, false, ErrAuthenticationFailed
		}
	}
	cr, found := s.creds.Lookup(user, s.mechanism)
	if !found {
		// The exchange goes on and fails at the proof, like a wrong password.
		cr = s.creds.fake(user, s.mechanism)
	}
	s.cred = cr
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, false, ErrAuthenticationFailed
	}
	s.nonce = cnonce + base64.RawURLEncoding.EncodeToString(b)
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(cr.Salt) + ",i=" + itoa(cr.Iterations)
	return []byte(s.serverFirst), false, nil
}

// final takes client-final-message "c=<gs2 header>,r=<nonce>[,ext],p=<proof>", checks the
// proof against the stored key and answers the server signature.
func (s *scramServer) final(msg string) ([]byte, bool, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, false, ErrAuthenticationFailed
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || attrs[0] != "c="+base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) ||
		!strings.HasPrefix(attrs[1], "r=") || !strings.HasSuffix(attrs[1][2:], s.nonce) {
		return nil, false, ErrAuthenticationFailed
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	h := hashOf(s.mechanism)
	if err != nil || h == nil || len(proof) != h().Size() {
		return nil, false, ErrAuthenticationFailed
	}
	authMessage := s.clientFirst + "," + s.serverFirst + "," + withoutProof
	sig := hmacOf(h, s.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ sig[j]
	}
	stored := h()
	stored.Write(clientKey)
	if subtle.ConstantTimeCompare(stored.Sum(nil), s.cred.StoredKey) != 1 {
		return nil, false, ErrAuthenticationFailed
	}
	serverSig := hmac.New(h, s.cred.ServerKey)
	serverSig.Write([]byte(authMessage))
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig.Sum(nil))), true, nil
}

// decodeSaslName undoes RFC 5802's escapes of ',' (=2C) and '=' (=3D); any other '='
// is invalid.
func decodeSaslName(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}
