package broker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/broker/brokertest"
	"kaas/config"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client certificate for
// CN=alice,O=kaas, as PEM files in dir.
type testPKI struct {
	caFile, certFile, keyFile string
	ca                        *x509.CertPool
	client                    tls.Certificate
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kaas test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subject, IPAddresses: ips,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvDER, srvKey := issue(2, pkix.Name{CommonName: "kaas"}, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	cliDER, cliKey := issue(3, pkix.Name{CommonName: "alice", Organization: []string{"kaas"}}, x509.ExtKeyUsageClientAuth, nil)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testPKI{
		caFile:   write("ca.crt", "CERTIFICATE", caDER),
		certFile: write("tls.crt", "CERTIFICATE", srvDER),
		keyFile:  write("tls.key", "EC PRIVATE KEY", srvKeyDER),
		ca:       pool,
		client:   tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey},
	}
}

// An SSL listener with ssl.client.auth=required: a client certificate's subject is the
// principal ACLs name (User:CN=alice,O=kaas); a client without one is refused; a SASL_SSL
// listener authenticates SCRAM inside TLS.
func TestTLSListenersAndCertificatePrincipal(t *testing.T) {
	pki := newPKI(t)
	c := brokertest.Config(t)
	c.Listeners = []config.Listener{{Name: "SSL", Host: "127.0.0.1"}, {Name: "SASL_SSL", Host: "127.0.0.1"}}
	c.SSLCertificateLocation, c.SSLKeyLocation, c.SSLTruststoreLocation = pki.certFile, pki.keyFile, pki.caFile
	c.SSLClientAuth = "required"
	c.Authorizer = "simple"
	c.SuperUsers = "User:admin"
	seedUser(t, c.DataDir, "admin", password)
	b := brokertest.StartWith(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tlsCfg := &tls.Config{RootCAs: pki.ca, Certificates: []tls.Certificate{pki.client}}
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("SASL_SSL")), kgo.DialTLSConfig(tlsCfg),
		kgo.SASL(scram.Auth{User: "admin", Pass: password}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "tls-topic"); err != nil {
		t.Fatalf("SASL_SSL admin: %v", err)
	}

	alice, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("SSL")), kgo.DialTLSConfig(tlsCfg), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if _, err := kadm.NewClient(alice).DescribeGroups(ctx, "g"); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("alice before any ACL: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:CN=alice,O=kaas").Groups("g").Operations(kadm.OpDescribe).
		ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || res[0].Err != nil {
		t.Fatalf("create ACL: %v %+v", err, res)
	}
	d, err := kadm.NewClient(alice).DescribeGroups(ctx, "g")
	if err != nil || errors.Is(d["g"].Err, kerr.GroupAuthorizationFailed) || !errors.Is(d["g"].Err, kerr.GroupIDNotFound) {
		t.Fatalf("alice with DESCRIBE on g: %v %+v", err, d)
	}

	// No client certificate: the handshake fails and no request is served.
	anon, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("SSL")), kgo.DialTLSConfig(&tls.Config{RootCAs: pki.ca}),
		kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Ping(ctx); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// A renewed certificate written over the PEM files (a Secret updated in place) is served
// to the next connection without a restart.
func TestTLSCertificateReloadedFromDisk(t *testing.T) {
	first, second := newPKI(t), newPKI(t)
	c := brokertest.Config(t)
	c.Listeners = []config.Listener{{Name: "SSL", Host: "127.0.0.1"}}
	c.SSLCertificateLocation, c.SSLKeyLocation = first.certFile, first.keyFile
	b := brokertest.StartWith(t, c)
	served := func() *x509.Certificate {
		pool := x509.NewCertPool()
		pool.AddCert(caOf(t, first))
		pool.AddCert(caOf(t, second))
		nc, err := tls.Dial("tcp", b.ListenerAddr("SSL"), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		return nc.ConnectionState().PeerCertificates[0]
	}
	before := served()
	for _, f := range [][2]string{{second.certFile, first.certFile}, {second.keyFile, first.keyFile}} {
		raw, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		// A later mtime than the first pair's, whatever the clock's granularity.
		if err := os.WriteFile(f[1], raw, 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute)
		_ = os.Chtimes(f[1], later, later)
	}
	after := served()
	if before.SerialNumber.Cmp(after.SerialNumber) == 0 && string(before.Raw) == string(after.Raw) {
		t.Fatal("the renewed certificate was not served")
	}
	if string(after.Raw) != string(pemCert(t, second.certFile).Raw) {
		t.Fatal("served a certificate that is neither")
	}
}

// A reload of the certificate is logged once, and so is a certificate file that is
// refused (the pair in force stays served): one event per version of the files, however
// many handshakes see it, and no key material.
func TestTLSCertificateReloadAndRefusalLogged(t *testing.T) {
	first, second := newPKI(t), newPKI(t)
	c := brokertest.Config(t)
	c.Listeners = []config.Listener{{Name: "SSL", Host: "127.0.0.1"}}
	c.SSLCertificateLocation, c.SSLKeyLocation = first.certFile, first.keyFile
	b, sink, err := brokertest.StartLogged(t, c)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caOf(t, first))
	pool.AddCert(caOf(t, second))
	handshakes := func(n int) *x509.Certificate {
		var cert *x509.Certificate
		for range n {
			nc, err := tls.Dial("tcp", b.ListenerAddr("SSL"), &tls.Config{RootCAs: pool})
			if err != nil {
				t.Fatal(err)
			}
			cert = nc.ConnectionState().PeerCertificates[0]
			nc.Close()
		}
		return cert
	}
	stamp := time.Now()
	put := func(path string, raw []byte) {
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		stamp = stamp.Add(time.Minute) // later than any before, whatever the clock's granularity
		_ = os.Chtimes(path, stamp, stamp)
	}
	original := pemCert(t, first.certFile)
	handshakes(3)
	put(first.certFile, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"))
	if got := handshakes(5); string(got.Raw) != string(original.Raw) {
		t.Fatal("a refused certificate file leaves the pair in force served")
	}
	refused := sink.Events("tls_certificate_refused_previous_kept")
	if len(refused) != 1 {
		t.Fatalf("%d refusals logged, want 1:\n%s", len(refused), sink)
	}
	for _, f := range []string{second.certFile, second.keyFile} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		put(filepath.Join(filepath.Dir(first.certFile), filepath.Base(f)), raw)
	}
	if got := handshakes(5); string(got.Raw) != string(pemCert(t, second.certFile).Raw) {
		t.Fatal("the renewed certificate is served")
	}
	reloaded := sink.Events("tls_certificate_reloaded")
	if len(reloaded) != 1 || len(sink.Events("tls_certificate_refused_previous_kept")) != 1 {
		t.Fatalf("want one reload and one refusal logged:\n%s", sink)
	}
	keyPEM, err := os.ReadFile(second.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range append(refused, reloaded...) {
		if strings.Contains(line, "PRIVATE KEY") || strings.Contains(line, string(keyPEM[40:80])) {
			t.Fatalf("key material in %s", line)
		}
	}
}

func pemCert(t *testing.T, path string) *x509.Certificate {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func caOf(t *testing.T, p testPKI) *x509.Certificate { return pemCert(t, p.caFile) }
