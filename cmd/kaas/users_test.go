package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kaas/auth"
	"kaas/storage"
)

// kaas users set writes a credential PLAIN and SCRAM accept for the password read from
// stdin, never the password itself; list and delete see it.
func TestUsersCommand(t *testing.T) {
	dir := t.TempDir()
	env := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if code := usersMain([]string{"set", "alice", "--data.dir", dir, "--iterations", "4096"}, env,
		strings.NewReader("pa55word\n"), &out, &errOut); code != 0 {
		t.Fatalf("set: %d %s", code, errOut.String())
	}
	creds, err := auth.NewCredentials(auth.CredentialsConfig{Dir: filepath.Join(dir, "__cluster"), FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if !creds.VerifyPlain("alice", "pa55word") || creds.VerifyPlain("alice", "other") {
		t.Fatal("the credential does not check the password")
	}
	raw, _ := storage.OSFS{}.ReadFile(filepath.Join(dir, "__cluster", auth.UsersFile))
	if bytes.Contains(raw, []byte("pa55word")) {
		t.Fatal("users.json holds the password")
	}
	out.Reset()
	if code := usersMain([]string{"list", "--data.dir", dir}, env, nil, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "alice\tSCRAM-SHA-256(4096),SCRAM-SHA-512(4096)") {
		t.Fatalf("list: %d %q", code, out.String())
	}
	if code := usersMain([]string{"delete", "alice", "--data.dir", dir}, env, nil, &out, &errOut); code != 0 {
		t.Fatalf("delete: %d %s", code, errOut.String())
	}
	if code := usersMain([]string{"delete", "alice", "--data.dir", dir}, env, nil, &out, &errOut); code != 1 {
		t.Fatalf("second delete: %d", code)
	}
	if code := usersMain([]string{"set", "bob", "--data.dir", dir}, env, strings.NewReader(""), &out, &errOut); code != 2 {
		t.Fatalf("empty password: %d", code)
	}
}

// --password-file reads the password from a file (a Secret mounted into a container
// without a shell), with the same result as standard input.
func TestUsersSetPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(t.TempDir(), "carol")
	if err := os.WriteFile(pf, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := usersMain([]string{"set", "carol", "--data.dir", dir, "--password-file", pf}, func(string) string { return "" },
		strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("set: %d %s", code, errOut.String())
	}
	creds, err := auth.NewCredentials(auth.CredentialsConfig{Dir: filepath.Join(dir, "__cluster"), FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if !creds.VerifyPlain("carol", "s3cret") {
		t.Fatal("the credential set from the file does not check its password")
	}
	if code := usersMain([]string{"set", "dave", "--data.dir", dir, "--password-file", filepath.Join(dir, "missing")},
		func(string) string { return "" }, strings.NewReader("x\n"), &out, &errOut); code != 1 {
		t.Fatalf("a missing password file: exit %d, want 1", code)
	}
}
