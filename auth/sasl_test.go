package auth

import (
	"crypto/pbkdf2"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/xdg-go/scram"

	"kaas/storage"
)

func newCreds(t *testing.T) *Credentials {
	t.Helper()
	c, err := NewCredentials(CredentialsConfig{Dir: t.TempDir(), FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var changes []Change
	for _, m := range ScramMechanisms {
		cr, err := NewCredential(m, "s3cret", MinIterations)
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, Change{User: "alice", Mechanism: m, Credential: &cr})
	}
	if errs, err := c.Alter(changes); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(errs, err)
	}
	return c
}

// scramExchange runs a client conversation against a server session.
func scramExchange(t *testing.T, c *Credentials, mech, user, pass string) error {
	h := scram.SHA256
	if mech == ScramSHA512 {
		h = scram.SHA512
	}
	cl, err := h.NewClientUnprepped(user, pass, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	s, ok := c.Start(mech)
	if !ok {
		t.Fatal("mechanism not served")
	}
	msg, _ := conv.Step("")
	for {
		reply, done, err := s.Step([]byte(msg))
		if err != nil {
			return err
		}
		if done {
			if _, err := conv.Step(string(reply)); err != nil {
				t.Fatalf("client refused the server's final message: %v", err)
			}
			if s.Principal() != User(user) {
				t.Fatalf("principal %v", s.Principal())
			}
			return nil
		}
		if msg, err = conv.Step(string(reply)); err != nil {
			t.Fatalf("client step: %v", err)
		}
	}
}

func TestScramAndPlain(t *testing.T) {
	c := newCreds(t)
	for _, m := range ScramMechanisms {
		if err := scramExchange(t, c, m, "alice", "s3cret"); err != nil {
			t.Errorf("%s right password: %v", m, err)
		}
		if err := scramExchange(t, c, m, "alice", "wrong"); err != ErrAuthenticationFailed {
			t.Errorf("%s wrong password: %v", m, err)
		}
		if err := scramExchange(t, c, m, "nobody", "s3cret"); err != ErrAuthenticationFailed {
			t.Errorf("%s unknown user: %v", m, err)
		}
	}
	plain := func(tok string) error {
		s, _ := c.Start(Plain)
		_, done, err := s.Step([]byte(tok))
		if err == nil && !done {
			t.Fatal("PLAIN is one step")
		}
		return err
	}
	if err := plain("\x00alice\x00s3cret"); err != nil {
		t.Errorf("PLAIN: %v", err)
	}
	if err := plain("alice\x00alice\x00s3cret"); err != nil {
		t.Errorf("PLAIN with authzid = user: %v", err)
	}
	for _, bad := range []string{"\x00alice\x00wrong", "bob\x00alice\x00s3cret", "\x00nobody\x00s3cret", "alice", "\x00alice\x00"} {
		if err := plain(bad); err != ErrAuthenticationFailed {
			t.Errorf("PLAIN %q: %v", bad, err)
		}
	}
}

func TestCredentialsDescribeDeleteReload(t *testing.T) {
	c := newCreds(t)
	d := c.Describe(nil)
	if len(d) != 1 || d[0].User != "alice" || len(d[0].Mechanisms) != 2 || d[0].Iterations[0] != MinIterations {
		t.Fatalf("describe: %+v", d)
	}
	other, err := NewCredentials(CredentialsConfig{Dir: c.cfg.Dir, FS: storage.OSFS{}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := c.Alter([]Change{{User: "alice", Mechanism: ScramSHA512}, {User: "bob", Mechanism: ScramSHA256}})
	if err != nil || errs[0] != nil || errs[1] != ErrNoSuchCredential {
		t.Fatalf("delete: %v %v", errs, err)
	}
	if c.VerifyPlain("alice", "s3cret") != true {
		t.Fatal("PLAIN falls back to the SCRAM-SHA-256 credential")
	}
	other.Poll()
	if _, ok := other.Lookup("alice", ScramSHA512); ok {
		t.Fatal("the other broker took up the deletion")
	}
}

// librdkafka 2.0 sends the client nonce twice before the combined nonce in its final
// message; Apache accepts a nonce that ends with the combined one, and so does kaas. A
// nonce that does not end with it, or a wrong proof over the right one, is refused.
func TestScramFinalNonceAsApache(t *testing.T) {
	c := newCreds(t)
	cr, _ := c.Lookup("alice", ScramSHA512)
	h := hashOf(ScramSHA512)
	run := func(nonce func(cnonce, full string) string, pass string) error {
		s, _ := c.Start(ScramSHA512)
		cfirst := "n=alice,r=abc\\def"
		sf, _, err := s.Step([]byte("n,," + cfirst))
		if err != nil {
			t.Fatal(err)
		}
		full := strings.TrimPrefix(strings.Split(string(sf), ",")[0], "r=")
		salted, _ := pbkdf2.Key(h, pass, cr.Salt, cr.Iterations, h().Size())
		clientKey := hmacOf(h, salted, "Client Key")
		stored := h()
		stored.Write(clientKey)
		withoutProof := "c=biws,r=" + nonce("abc\\def", full)
		sig := hmacOf(h, stored.Sum(nil), cfirst+","+string(sf)+","+withoutProof)
		proof := make([]byte, len(sig))
		for i := range sig {
			proof[i] = clientKey[i] ^ sig[i]
		}
		_, done, err := s.Step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
		if err == nil && !done {
			t.Fatal("not done after the final message")
		}
		return err
	}
	exact := func(_, full string) string { return full }
	doubled := func(cn, full string) string { return cn + full }
	other := func(_, full string) string { return full + "x" }
	if err := run(exact, "s3cret"); err != nil {
		t.Errorf("exact nonce: %v", err)
	}
	if err := run(doubled, "s3cret"); err != nil {
		t.Errorf("librdkafka's doubled nonce: %v", err)
	}
	if err := run(other, "s3cret"); err == nil {
		t.Error("a nonce not ending with the server's was accepted")
	}
	if err := run(doubled, "wrong"); err == nil {
		t.Error("a wrong password was accepted")
	}
}
