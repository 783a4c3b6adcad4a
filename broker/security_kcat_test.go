package broker_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/auth"
	"kaas/config"
	"kaas/internal/testwait"
)

// librdkafka (through kcat) authenticates with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 on a
// SASL_PLAINTEXT listener with the authorizer on, produces and consumes in a group with the
// ACLs a consumer needs; a wrong password and a missing group ACL fail; the broker's log
// never holds the password.
func TestSASLAndACLsWithKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (e2e/setup.sh installs it)")
	}
	b, sink := saslBroker(t, func(c *config.Config) {
		c.Authorizer = "simple"
		c.SuperUsers = "User:admin"
	})
	seedUser(t, b.Env().Config.DataDir, "admin", password)
	testwait.For(t, 10*time.Second, 5*time.Millisecond, testwait.Cond("the admin user's credentials read", func() bool {
		_, ok := b.Env().Credentials.Lookup("admin", auth.ScramSHA512)
		return ok
	}))
	addr := b.ListenerAddr("SASL_PLAINTEXT")
	adminOpts := []kgo.Opt{kgo.SASL(scram.Auth{User: "admin", Pass: password}.AsSha512Mechanism())}
	addUser(t, addr, adminOpts, "alice", password)
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, adminOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	setACLsFor := func(principal string, gs ...grant) {
		t.Helper()
		setACLs(t, admin)
		cr := kmsgCreate(principal, gs...)
		resp, err := cr.RequestWith(context.Background(), admin)
		if err != nil || resp.Results[0].ErrorCode != 0 {
			t.Fatalf("create ACLs: %v %+v", err, resp)
		}
	}
	kcat := func(mech, pass string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base := []string{"-b", addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech,
			"-X", "sasl.username=alice", "-X", "sasl.password=" + pass}
		cmd := exec.CommandContext(ctx, "kcat", append(base, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if strings.Contains(strings.Join(args, " "), "-P") {
			cmd.Stdin = strings.NewReader("one\ntwo\nthree\n")
		}
		err := cmd.Run()
		return out.String() + errb.String(), err
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			topic, group := "kcat-"+strings.ToLower(mech), "kcat-g-"+strings.ToLower(mech)
			setACLsFor("User:alice", allow(auth.Topic, topic, auth.Write), allow(auth.Topic, topic, auth.Read),
				allow(auth.Topic, topic, auth.Create), allow(auth.Group, group, auth.Read))
			if out, err := kcat(mech, password, "-P", "-t", topic, "-X", "allow.auto.create.topics=true"); err != nil {
				t.Fatalf("kcat -P: %v\n%s", err, out)
			}
			out, err := kcat(mech, password, "-G", group, "-e", "-o", "beginning", "-X", "auto.offset.reset=earliest", topic)
			if err != nil || !strings.Contains(out, "three") {
				t.Fatalf("kcat -G: %v\n%s", err, out)
			}
			if out, err := kcat(mech, "wrong-"+password, "-L", "-m", "5"); err == nil {
				t.Fatalf("kcat with a wrong password listed metadata:\n%s", out)
			} else if !strings.Contains(out, "uthentication") {
				t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
			}
			// Without READ on the group, joining it is refused.
			setACLsFor("User:alice", allow(auth.Topic, topic, auth.Read))
			out, err = kcat(mech, password, "-G", group+"-other", "-e", "-o", "beginning", topic)
			if err == nil && strings.Contains(out, "three") {
				t.Fatalf("kcat consumed in a group it has no ACL for:\n%s", out)
			}
			if !strings.Contains(out, "GROUP_AUTHORIZATION_FAILED") && !strings.Contains(out, "Group authorization failed") {
				t.Fatalf("kcat without the group ACL: %v\n%s", err, out)
			}
		})
	}
	if strings.Contains(sink.String(), password) {
		t.Fatalf("the broker's log holds the password")
	}
}
