package broker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/broker"
	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/logs/logtest"
)

// saslBroker is a broker with a SASL_PLAINTEXT listener (every mechanism) and a
// PLAINTEXT one, whose JSON log goes to the returned sink.
func saslBroker(t *testing.T, mutate func(*config.Config)) (*broker.Broker, *logtest.Sink) {
	t.Helper()
	c := brokertest.Config(t)
	c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1"}, {Name: "SASL_PLAINTEXT", Host: "127.0.0.1"}}
	c.SASLMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	c.FailedAuthDelay = 0
	if mutate != nil {
		mutate(&c)
	}
	b, sink, err := brokertest.StartLogged(t, c)
	if err != nil {
		t.Fatal(err)
	}
	return b, sink
}

// addUser sets a password for both SCRAM mechanisms with AlterUserScramCredentials, as
// kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' does, through addr.
func addUser(t *testing.T, addr string, opts []kgo.Opt, user, password string) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	res, err := adm.AlterUserSCRAMs(context.Background(), nil, []kadm.UpsertSCRAM{
		{User: user, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: password},
		{User: user, Mechanism: kadm.ScramSha512, Iterations: 8192, Password: password},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("alter %s: %v", r.User, r.Err)
		}
	}
	d, err := adm.DescribeUserSCRAMs(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	if got := d[user]; got.Err != nil || len(got.CredInfos) != 2 || got.CredInfos[1].Iterations != 8192 {
		t.Fatalf("describe %s: %+v", user, got)
	}
}

const password = "Tr0ub4dor-and-3"

func mechanisms(user, pass string) map[string]sasl.Mechanism {
	return map[string]sasl.Mechanism{
		"PLAIN":         plain.Auth{User: user, Pass: pass}.AsMechanism(),
		"SCRAM-SHA-256": scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(),
		"SCRAM-SHA-512": scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(),
	}
}

// Every mechanism authenticates a franz-go producer and consumer group over a real
// socket; a wrong password is SASL_AUTHENTICATION_FAILED and counted; no password ever
// reaches the broker's log.
func TestSASLMechanismsWithFranzGo(t *testing.T) {
	b, sink := saslBroker(t, nil)
	addUser(t, b.ListenerAddr("PLAINTEXT"), nil, "alice", password)
	saslAddr := b.ListenerAddr("SASL_PLAINTEXT")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, mech := range mechanisms("alice", password) {
		t.Run(name, func(t *testing.T) {
			topic := "t-" + strings.ToLower(name)
			cl, err := kgo.NewClient(kgo.SeedBrokers(saslAddr), kgo.SASL(mech), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
				kgo.ConsumeTopics(topic), kgo.ConsumerGroup("g-"+name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			fs := cl.PollRecords(ctx, 1)
			if err := fs.Err0(); err != nil {
				t.Fatalf("poll: %v", err)
			}
			if fs.NumRecords() != 1 {
				t.Fatalf("records: %d", fs.NumRecords())
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
		})
	}
	for name, mech := range mechanisms("alice", "not-"+password) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(saslAddr), kgo.SASL(mech), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		err = cl.Ping(ctx)
		cl.Close()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}
	// An unknown user fails the same way as a wrong password.
	for name, mech := range mechanisms("mallory", password) {
		cl, _ := kgo.NewClient(kgo.SeedBrokers(saslAddr), kgo.SASL(mech), kgo.RequestRetries(0))
		err := cl.Ping(ctx)
		cl.Close()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s for an unknown user: %v", name, err)
		}
	}
	met := b.Metrics()
	for _, m := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		if got := testutil.ToFloat64(met.SASLAuthentications.WithLabelValues(m, "failure")); got < 2 {
			t.Errorf("%s failures counted: %v, want at least 2", m, got)
		}
		if got := testutil.ToFloat64(met.SASLAuthentications.WithLabelValues(m, "success")); got < 1 {
			t.Errorf("%s successes counted: %v", m, got)
		}
	}
	if n := len(sink.Events("sasl_authentication_failed")); n < 1 {
		t.Errorf("sasl_authentication_failed logged %d times, want the first failure at least", n)
	}
	if strings.Contains(sink.String(), password) {
		t.Fatalf("the broker's log holds the password:\n%s", sink)
	}
}

// A SASL listener answers ApiVersions before authentication and closes the connection on
// anything else; a v0 handshake carries the PLAIN token as a raw frame.
func TestSASLListenerRefusesUnauthenticatedRequests(t *testing.T) {
	b, sink := saslBroker(t, nil)
	addUser(t, b.ListenerAddr("PLAINTEXT"), nil, "alice", password)
	addr := b.ListenerAddr("SASL_PLAINTEXT")

	r := brokertest.Dial(t, addr)
	v := kmsg.NewPtrApiVersionsRequest()
	v.SetVersion(3)
	v.ClientSoftwareName, v.ClientSoftwareVersion = "test", "1"
	if resp := r.Roundtrip(v, 1).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions before authentication: %+v", resp)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	r.Send(md, 2)
	if !r.Closed(5 * time.Second) {
		t.Fatal("Metadata before authentication was not refused with a closed connection")
	}
	if sink.Count("sasl_authentication_required") == 0 {
		t.Error("the refusal was not logged")
	}

	// A frame above sasl.server.max.receive.size before authentication: closed at its
	// size, before its bytes are read.
	r = brokertest.Dial(t, addr)
	r.Write([]byte{0, 0x10, 0, 0}) // 1 MiB announced
	if !r.Closed(5 * time.Second) {
		t.Fatal("a 1 MiB frame before authentication was not refused")
	}
	if sink.Count("before SASL authentication") == 0 {
		t.Error("the oversized unauthenticated frame was not logged")
	}

	// SaslHandshake v0, then the token as a raw frame, then a normal request.
	r = brokertest.Dial(t, addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(0)
	hs.Mechanism = "PLAIN"
	if resp := r.Roundtrip(hs, 1).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatalf("handshake v0: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	tok := []byte("\x00alice\x00" + password)
	frame := append([]byte{0, 0, 0, byte(len(tok))}, tok...)
	r.Write(frame)
	if b, err := r.ReadFrame(5 * time.Second); err != nil || len(b) != 0 {
		t.Fatalf("raw PLAIN reply: %q %v", b, err)
	}
	if resp := r.Roundtrip(md, 3).(*kmsg.MetadataResponse); len(resp.Brokers) == 0 {
		t.Fatalf("metadata after raw authentication: %+v", resp)
	}

	// A mechanism the listener does not serve.
	r = brokertest.Dial(t, addr)
	hs = kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "GSSAPI"
	resp := r.Roundtrip(hs, 1).(*kmsg.SASLHandshakeResponse)
	if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(resp.SupportedMechanisms) != 3 {
		t.Fatalf("GSSAPI handshake: %+v", resp)
	}
	if !r.Closed(5 * time.Second) {
		t.Fatal("an unsupported mechanism leaves the connection open")
	}
}

// A client that keeps sending after a failed authentication is still closed after the
// delay, however many frames it sends (each dropped frame gives its in-flight slot back),
// in both the v1 and the raw v0 exchange.
func TestFailedAuthenticationClosesDespiteFlood(t *testing.T) {
	b, _ := saslBroker(t, func(c *config.Config) {
		c.MaxInflightPerConn = 2
		c.FailedAuthDelay = 200 * time.Millisecond
	})
	addr := b.ListenerAddr("SASL_PLAINTEXT")
	for _, v := range []int16{0, 1} {
		r := brokertest.Dial(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(v)
		hs.Mechanism = "PLAIN"
		if resp := r.Roundtrip(hs, 1).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
			t.Fatalf("handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		tok := []byte("\x00nobody\x00wrong")
		if v == 0 {
			r.Write(append([]byte{0, 0, 0, byte(len(tok))}, tok...))
		} else {
			a := kmsg.NewPtrSASLAuthenticateRequest()
			a.SetVersion(2)
			a.SASLAuthBytes = tok
			r.Send(a, 2)
		}
		av := kmsg.NewPtrApiVersionsRequest()
		for i := range 20 {
			r.Send(av, int32(10+i))
		}
		if !r.Closed(5 * time.Second) {
			t.Fatalf("v%d: a client flooding after a failed authentication is still connected", v)
		}
	}
}

// A client guessing passwords as fast as it can does not flood the log: the first failure
// is logged, the rest at most once per interval with the number held back, while each one
// is still counted in the metric.
func TestFailedAuthenticationLogRateLimited(t *testing.T) {
	b, sink := saslBroker(t, nil)
	addr := b.ListenerAddr("SASL_PLAINTEXT")
	const failures = 100
	for i := range failures {
		r := brokertest.Dial(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(1)
		hs.Mechanism = "PLAIN"
		if resp := r.Roundtrip(hs, 1).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
			t.Fatalf("handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		a := kmsg.NewPtrSASLAuthenticateRequest()
		a.SetVersion(2)
		a.SASLAuthBytes = []byte("\x00nobody\x00guess-" + strconv.Itoa(i))
		if resp := r.Roundtrip(a, 2).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("guess %d: %v", i, kerr.ErrorForCode(resp.ErrorCode))
		}
		if !r.Closed(5 * time.Second) {
			t.Fatal("the connection stays open after a failed authentication")
		}
	}
	if got := testutil.ToFloat64(b.Metrics().SASLAuthentications.WithLabelValues("PLAIN", "failure")); got != failures {
		t.Fatalf("failures counted: %v, want %d", got, failures)
	}
	lines := sink.Events("sasl_authentication_failed")
	// One line per 10 s: a hundred failures would have to take a minute and a half to
	// reach ten lines.
	if len(lines) < 1 || len(lines) > failures/10 {
		t.Fatalf("%d sasl_authentication_failed lines for %d failures, want the first and then at most one per interval", len(lines), failures)
	}
}
