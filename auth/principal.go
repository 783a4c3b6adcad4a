package auth

import (
	"crypto/x509/pkix"
	"fmt"
	"strings"
)

// Principal is who a connection is, as Apache's KafkaPrincipal: a type ("User") and a
// name. A connection that did not authenticate is User:ANONYMOUS.
type Principal struct {
	Type string
	Name string
}

// Anonymous is the principal of a PLAINTEXT connection, or of an SSL one without a
// client certificate.
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User is the principal User:name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }

// ParsePrincipal reads "User:alice" as Apache's SecurityUtils.parseKafkaPrincipal splits
// it: the type up to the first colon, the name after it (it may hold further colons).
// Every principal kaas gives a connection is of type User, compared case-sensitively, so
// any other type ("user:alice", "Group:x") is refused: an ACL or super user naming it
// would silently never apply. User:* is the wildcard of ACLs.
func ParsePrincipal(s string) (Principal, error) {
	typ, name, ok := strings.Cut(s, ":")
	if !ok || typ == "" || name == "" {
		return Principal{}, fmt.Errorf("principal %q: want Type:name, like User:alice", s)
	}
	if typ != "User" {
		return Principal{}, fmt.Errorf("principal %q: the type must be User (case-sensitive), like User:alice", s)
	}
	return Principal{Type: typ, Name: name}, nil
}

// CertificatePrincipal is the principal of a TLS client certificate: User: and the
// subject's distinguished name in RFC 2253 form ("CN=alice,O=example"), as Apache's
// default principal builder gives it (ssl.principal.mapping.rules DEFAULT).
func CertificatePrincipal(subject pkix.Name) Principal {
	return User(subject.String())
}

// ParseSuperUsers reads super.users: principals separated by semicolons, as Apache's
// (User:admin;User:CN=ops,O=example).
func ParseSuperUsers(v string) ([]Principal, error) {
	var out []Principal
	for _, part := range strings.Split(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := ParsePrincipal(part)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
