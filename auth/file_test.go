package auth

import (
	"os"
	"path/filepath"
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
