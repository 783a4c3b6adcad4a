package auth

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// serverFirst starts a SCRAM exchange for user and returns the salt and iterations the
// server answers.
func serverFirst(t *testing.T, c *Credentials, mech, user string) ([]byte, int) {
	t.Helper()
	s, _ := c.Start(mech)
	reply, _, err := s.Step([]byte("n,,n=" + user + ",r=clientnonce"))
	if err != nil {
		t.Fatal(err)
	}
	var salt []byte
	iters := 0
	for _, attr := range strings.Split(string(reply), ",") {
		switch {
		case strings.HasPrefix(attr, "s="):
			if salt, err = base64.StdEncoding.DecodeString(attr[2:]); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(attr, "i="):
			if iters, err = strconv.Atoi(attr[2:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return salt, iters
}

// The first SCRAM step must not tell a user that exists from one that does not: an
// unknown user's salt has a real one's length and iterations, and is the same from every
// broker sharing the volume and across restarts (else asking twice, or two brokers, gives
// it away).
func TestScramUnknownUserLooksReal(t *testing.T) {
	c := newCreds(t) // alice, made as kaas users set makes users
	dir := c.cfg.Dir
	// Brokers starting together on a fresh volume agree on one secret.
	fresh := t.TempDir()
	var wg sync.WaitGroup
	started := make([]*Credentials, 8)
	errs := make([]error, len(started))
	for i := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], errs[i] = NewCredentials(CredentialsConfig{Dir: fresh, FS: storage.OSFS{}, Log: zerolog.Nop()})
		}()
	}
	wg.Wait()
	for _, m := range ScramMechanisms {
		realSalt, realIters := serverFirst(t, c, m, "alice")
		salt, iters := serverFirst(t, c, m, "nobody")
		if len(salt) != len(realSalt) || iters != realIters {
			t.Errorf("%s: unknown user's salt %d bytes, %d iterations; a real user's %d, %d", m, len(salt), iters, len(realSalt), realIters)
		}
		other, err := NewCredentials(CredentialsConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := serverFirst(t, other, m, "nobody"); string(again) != string(salt) {
			t.Errorf("%s: another broker (or a restart) on the volume gives the unknown user another salt", m)
		}
		if s2, _ := serverFirst(t, c, m, "nobody2"); string(s2) == string(salt) {
			t.Errorf("%s: two unknown users share a salt", m)
		}
		var first []byte
		for i, s := range started {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			got, _ := serverFirst(t, s, m, "nobody")
			if first == nil {
				first = got
			}
			if string(got) != string(first) {
				t.Errorf("%s: brokers started together disagree on the unknown user's salt", m)
			}
		}
	}
	fi, err := os.Stat(filepath.Join(dir, SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", SecretFile, fi.Mode().Perm())
	}
}

// A secret that is not one (cut short, a symlink) refuses the start: a new one would
// change every unknown user's salt.
func TestScramSecretRefused(t *testing.T) {
	for name, spoil := range map[string]func(path string) error{
		"short":   func(path string) error { return os.WriteFile(path, []byte("short"), 0o600) },
		"symlink": func(path string) error { return os.Symlink("/dev/zero", path) },
	} {
		dir := t.TempDir()
		if err := spoil(filepath.Join(dir, SecretFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := NewCredentials(CredentialsConfig{Dir: dir, FS: storage.OSFS{}, Log: zerolog.Nop()}); err == nil {
			t.Errorf("%s: a broken %s refuses the start", name, SecretFile)
		}
	}
}
