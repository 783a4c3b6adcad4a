package auth

import (
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// The SCRAM and PLAIN servers take whatever a client sends: any bytes give an error or a
// reply, never a panic, and never a success without the password.
func FuzzSASLServers(f *testing.F) {
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("n,a=alice,n=alice,r=x"), []byte(",p="))
	f.Add([]byte("y,,n=a=2Cb,r=\x00"), []byte("c=eSws,r=,p=="))
	f.Add([]byte("\x00alice\x00s3cret"), []byte{})
	c, err := NewCredentials(CredentialsConfig{Dir: f.TempDir(), FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, final []byte) {
		for _, m := range []string{Plain, ScramSHA256, ScramSHA512} {
			s, _ := c.Start(m)
			_, done, err := s.Step(first)
			if done || err != nil {
				if done {
					t.Fatalf("%s: authenticated with no users", m)
				}
				continue
			}
			if _, done, _ := s.Step(final); done {
				t.Fatalf("%s: authenticated with no users", m)
			}
		}
	})
}

// acls.json and users.json are edited by operators: any content parses or is refused.
func FuzzSharedFiles(f *testing.F) {
	acl, _ := json.Marshal(aclFile{Version: 1, ACLs: []ACL{{ResourceType: Group, ResourceName: "g", PatternType: Literal,
		Principal: "User:a", Host: "*", Operation: Read, Permission: Allow}}})
	f.Add(acl)
	f.Add([]byte(`{"version":1,"users":{"a":{"SCRAM-SHA-256":{"salt":"AA==","iterations":4096,"stored_key":"AA==","server_key":"AA=="}}}}`))
	f.Add([]byte(`{"version":1,"acls":[{"resource_type":"CLUSTER","resource_name":"x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := &Authorizer{super: map[string]bool{}}
		if a.parse(b) == nil {
			a.Authorize(User("a"), "h", Read, Group, "g")
		}
		c := &Credentials{secret: make([]byte, 32)}
		if c.parse(b) == nil {
			c.VerifyPlain("a", "p")
		}
	})
}
