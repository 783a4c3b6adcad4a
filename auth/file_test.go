package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kaas/logs/logtest"
	"kaas/storage"
)

// spoil is one way an operator, a script or an attacker with the volume can take a
// shared file away; each must leave the rights in force as they were.
var spoils = []struct {
	name  string
	spoil func(t *testing.T, path string)
}{
	{"emptied", func(t *testing.T, path string) {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"whitespace", func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"deleted", func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}},
	{"unreadable", func(t *testing.T, path string) {
		// A directory in its place reads as an error even for root.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
	}},
}

func restore(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// With allow.everyone.if.no.acl.found, an acls.json that is emptied, deleted or made
// unreadable after it held a DENY must not become "no ACLs": the DENY stays, the refusal
// is logged once, CreateAcls refuses to rewrite from nothing, and a valid file is taken
// up again.
func TestACLFileGoneKeepsACLs(t *testing.T) {
	for _, sp := range spoils {
		t.Run(sp.name, func(t *testing.T) {
			dir := t.TempDir()
			sink := &logtest.Sink{}
			a, err := NewAuthorizer(AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, AllowIfNoACL: true, Log: zerolog.New(sink)})
			if err != nil {
				t.Fatal(err)
			}
			deny := acl(Group, Literal, "g", "User:carol", "*", Read, Deny)
			if err := a.Create([]ACL{deny}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, ACLsFile)
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if a.Authorize(User("carol"), "h", Read, Group, "g") {
				t.Fatal("the DENY is in force")
			}
			sp.spoil(t, path)
			before := a.Version()
			a.Poll()
			a.Poll()
			if a.Version() != before || a.Authorize(User("carol"), "h", Read, Group, "g") {
				t.Fatal("the DENY stays in force")
			}
			if n := len(sink.Events("acls_file_refused_previous_acls_kept")); n != 1 {
				t.Fatalf("%d refusals logged, want 1:\n%s", n, sink)
			}
			if err := a.Create([]ACL{acl(Topic, Literal, "t", "User:carol", "*", Read, Allow)}); err == nil {
				t.Fatal("CreateAcls over a file that went away must not start from nothing")
			}
			if a.Authorize(User("carol"), "h", Read, Group, "g") {
				t.Fatal("the DENY stays in force after the refused create")
			}
			// A fresh broker on the volume refuses to start rather than serve no ACLs,
			// except where the file is simply missing (a fresh install).
			if _, err := NewAuthorizer(AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()}); err == nil && sp.name != "deleted" {
				t.Fatal("a broker starting on a spoiled acls.json refuses to start")
			}
			restore(t, path, good)
			a.Poll()
			if a.Version() == before || a.Authorize(User("carol"), "h", Read, Group, "g") {
				t.Fatal("the restored file is taken up")
			}
		})
	}
}

// An emptied, deleted or unreadable users.json keeps the users in force instead of
// locking every client out.
func TestUsersFileGoneKeepsUsers(t *testing.T) {
	for _, sp := range spoils {
		t.Run(sp.name, func(t *testing.T) {
			c := newCreds(t)
			sink := &logtest.Sink{}
			c.cfg.Log = zerolog.New(sink)
			path := filepath.Join(c.cfg.Dir, UsersFile)
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sp.spoil(t, path)
			before := c.Version()
			c.Poll()
			c.Poll()
			if c.Version() != before || !c.VerifyPlain("alice", "s3cret") {
				t.Fatal("alice stays a user")
			}
			if n := len(sink.Events("users_file_refused_previous_users_kept")); n != 1 {
				t.Fatalf("%d refusals logged, want 1:\n%s", n, sink)
			}
			cr, err := NewCredential(ScramSHA256, "pw", MinIterations)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Alter([]Change{{User: "bob", Mechanism: ScramSHA256, Credential: &cr}}); err == nil {
				t.Fatal("an alter over a file that went away must not start from nothing")
			}
			if !c.VerifyPlain("alice", "s3cret") {
				t.Fatal("alice stays a user after the refused alter")
			}
			restore(t, path, good)
			c.Poll()
			if c.Version() == before || !c.VerifyPlain("alice", "s3cret") {
				t.Fatal("the restored file is taken up")
			}
		})
	}
}

// A file that was never there is a fresh install: no ACLs and no users, and the first
// CreateAcls writes it.
func TestSharedFilesFreshInstall(t *testing.T) {
	dir := t.TempDir()
	a, err := NewAuthorizer(AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	a.Poll()
	if len(a.Rules().ACLs()) != 0 {
		t.Fatal("no file: no ACLs")
	}
	if err := a.Create([]ACL{acl(Group, Literal, "g", "User:alice", "*", Read, Allow)}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCredentials(CredentialsConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
}

// aclRule is one rule of acls.json as an operator writes it by hand.
func aclRule(principal, perm string) string {
	return `{"resource_type":"GROUP","resource_name":"g","pattern_type":"LITERAL","principal":"` + principal +
		`","host":"*","operation":"READ","permission":"` + perm + `"}`
}

// A hand-edited acls.json whose DENY would silently not apply is refused like a corrupt
// one: a principal Apache would not read as User:<name> (the type is case-sensitive), a
// duplicated key (the last would win), a key differing only in case (encoding/json
// matches those too), and a symlink (the file would be wherever it points).
func TestACLFileHygiene(t *testing.T) {
	everyone := aclRule("User:*", "ALLOW")
	cases := []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"lower-case type", content(`{"version":1,"acls":[` + everyone + `,` + aclRule("user:carol", "DENY") + `]}`)},
		{"upper-case type", content(`{"version":1,"acls":[` + everyone + `,` + aclRule("USER:carol", "DENY") + `]}`)},
		{"other type", content(`{"version":1,"acls":[` + everyone + `,` + aclRule("Group:carol", "DENY") + `]}`)},
		{"duplicate permission", content(`{"version":1,"acls":[` + strings.Replace(aclRule("User:carol", "DENY"),
			`"permission":"DENY"`, `"permission":"DENY","permission":"ALLOW"`, 1) + `]}`)},
		{"duplicate acls", content(`{"version":1,"acls":[` + aclRule("User:carol", "DENY") + `],"acls":[` + everyone + `]}`)},
		{"key in other case", content(`{"version":1,"acls":[` + strings.Replace(aclRule("User:carol", "DENY"),
			`"permission":"DENY"`, `"permission":"DENY","Permission":"ALLOW"`, 1) + `]}`)},
		{"symlink", func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "elsewhere.json")
			if err := os.WriteFile(other, []byte(`{"version":1,"acls":[`+everyone+`]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			sink := &logtest.Sink{}
			a, err := NewAuthorizer(AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, AllowIfNoACL: true, Log: zerolog.New(sink)})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Create([]ACL{acl(Group, Literal, "g", "User:carol", "*", Read, Deny)}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, ACLsFile)
			c.write(t, path)
			before := a.Version()
			a.Poll()
			if a.Version() != before || a.Authorize(User("carol"), "h", Read, Group, "g") {
				t.Fatal("the file is refused and the DENY stays in force")
			}
			if n := len(sink.Events("acls_file_refused_previous_acls_kept")); n != 1 {
				t.Fatalf("%d refusals logged, want 1:\n%s", n, sink)
			}
			if _, err := NewAuthorizer(AuthorizerConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()}); err == nil {
				t.Fatal("a broker starting on it refuses to start")
			}
		})
	}
	// What CreateAcls takes is held to the same rule; User:* and names holding colons
	// stay valid.
	for p, ok := range map[string]bool{"user:carol": false, "Group:x": false, "User:": false, ":x": false,
		"User:*": true, "User:CN=a,O=b": true, "User:a:b": true} {
		err := acl(Group, Literal, "g", p, "*", Read, Deny).Validate()
		if (err == nil) != ok {
			t.Errorf("principal %q: Validate = %v", p, err)
		}
	}
}

// users.json is held to the same rules: no duplicated keys, no symlink.
func TestUsersFileHygiene(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(t *testing.T, path string, good []byte)
	}{
		{"duplicate users", func(t *testing.T, path string, good []byte) {
			b := strings.Replace(string(good), `"users": {`, `"users": {}, "users": {`, 1)
			if b == string(good) {
				t.Fatalf("no users key in %s", good)
			}
			content(b)(t, path)
		}},
		{"symlink", func(t *testing.T, path string, good []byte) {
			other := filepath.Join(t.TempDir(), "elsewhere.json")
			if err := os.WriteFile(other, []byte(`{"version":1,"users":{}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cr := newCreds(t)
			sink := &logtest.Sink{}
			cr.cfg.Log = zerolog.New(sink)
			path := filepath.Join(cr.cfg.Dir, UsersFile)
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c.write(t, path, good)
			before := cr.Version()
			cr.Poll()
			if cr.Version() != before || !cr.VerifyPlain("alice", "s3cret") {
				t.Fatal("the file is refused and alice stays a user")
			}
			if n := len(sink.Events("users_file_refused_previous_users_kept")); n != 1 {
				t.Fatalf("%d refusals logged, want 1:\n%s", n, sink)
			}
		})
	}
}

func content(b string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
