package broker

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"kaas/peer"
)

// startPeers makes the inter-broker client of a broker in a cluster (package peer): it
// reaches its peers on inter.broker.listener.name as any client would, over TLS when that
// listener is SSL or SASL_SSL (the peer's certificate checked against
// ssl.truststore.location, this broker's own certificate presented), authenticated with
// this broker's SASL credentials when it is SASL (without them it has none, and forwards
// nothing). A broker alone has none.
func (b *Broker) startPeers() error {
	if b.cluster == nil {
		return nil
	}
	name := b.cfg.InterBrokerListenerName()
	pc := peer.Config{
		Self: b.cfg.NodeID, Registry: b.env.Registry, Listener: name,
		Timeout: b.cfg.InterBrokerRequestTimeout, MaxInFlight: int(b.cfg.InterBrokerMaxInFlight),
		Log: b.log.With().Str("component", "peer").Logger(), Registerer: b.met.Registry,
	}
	if b.cfg.UsesTLS(name) {
		tc, err := peerTLS(b.log, b.cfg.SSLCertificateLocation, b.cfg.SSLKeyLocation, b.cfg.SSLTruststoreLocation)
		if err != nil {
			return fmt.Errorf("inter-broker listener %s: %w", name, err)
		}
		pc.TLS = tc
	}
	if b.cfg.UsesSASL(name) && b.cfg.InterBrokerSASLUsername == "" {
		// No credentials to log in to the peers with: nothing is forwarded, and a
		// broker that does not write the catalogue answers NOT_CONTROLLER as before.
		b.log.Warn().Str("listener", name).Msg("inter_broker_client_off_no_sasl_credentials")
		return nil
	}
	if b.cfg.UsesSASL(name) {
		m, err := peerSASL(b.cfg.InterBrokerSASLMechanism, b.cfg.InterBrokerSASLUsername, b.cfg.InterBrokerSASLPasswordFile)
		if err != nil {
			return fmt.Errorf("inter-broker listener %s: %w", name, err)
		}
		pc.SASL = m
	}
	b.peers = peer.New(pc)
	b.env.Peers = b.peers
	return nil
}

// peerTLS is the TLS a broker dials its peers with: their certificates verified against
// the truststore (or the system's roots), this broker's certificate presented (read
// again when it changes, as the listeners read it), so a listener requiring client
// certificates sees the broker's subject as its principal.
func peerTLS(log zerolog.Logger, certFile, keyFile, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ssl.truststore.location %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" && keyFile != "" {
		kp := &keyPair{cert: certFile, key: keyFile, log: log}
		if _, err := kp.get(nil); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(nil) }
	}
	return cfg, nil
}

// peerSASL is the mechanism a broker authenticates to its peers with; the password is
// the first line of passwordFile, kept in memory only.
func peerSASL(mechanism, user, passwordFile string) (sasl.Mechanism, error) {
	f, err := os.Open(passwordFile)
	if err != nil {
		return nil, fmt.Errorf("inter.broker.sasl.password.file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("inter.broker.sasl.password.file: %w", err)
	}
	pass := strings.TrimRight(sc.Text(), "\r")
	if pass == "" {
		return nil, fmt.Errorf("inter.broker.sasl.password.file %s: the first line is empty", passwordFile)
	}
	switch mechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("sasl.mechanism.inter.broker.protocol: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
}
