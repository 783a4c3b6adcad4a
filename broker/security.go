package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"kaas/auth"
	"kaas/metrics"
	"kaas/storage"
)

// startSecurity builds what the listeners' security protocols and the authorizer need:
// the TLS configuration (SSL, SASL_SSL), the SASL credentials (always: the SCRAM APIs
// manage them even on a broker without a SASL listener), the authorizer
// (--authorizer=simple), and the goroutine that polls acls.json and users.json for
// changes another broker or an operator made. stopSecurity joins it.
func (b *Broker) startSecurity() error {
	clusterDir := filepath.Join(b.cfg.DataDir, "__cluster")
	creds, err := auth.NewCredentials(auth.CredentialsConfig{Dir: clusterDir, FS: storage.OSFS{}, Log: b.log})
	if err != nil {
		return fmt.Errorf("load SASL users: %w", err)
	}
	b.env.Credentials = creds
	if b.cfg.Authorizer == "simple" {
		supers, err := auth.ParseSuperUsers(b.cfg.SuperUsers)
		if err != nil {
			return err
		}
		a, err := auth.NewAuthorizer(auth.AuthorizerConfig{Dir: clusterDir, FS: storage.OSFS{}, SuperUsers: supers,
			AllowIfNoACL: b.cfg.AllowEveryoneIfNoACL, Log: b.log})
		if err != nil {
			return fmt.Errorf("load ACLs: %w", err)
		}
		b.env.Authorizer = a
	}
	for _, l := range b.cfg.Listeners {
		if b.cfg.UsesTLS(l.Name) {
			cfg, err := newTLSConfig(b.cfg.SSLCertificateLocation, b.cfg.SSLKeyLocation, b.cfg.SSLTruststoreLocation, b.cfg.SSLClientAuth)
			if err != nil {
				return err
			}
			b.tls = cfg
			break
		}
	}
	b.securityStop = make(chan struct{})
	b.securityDone = make(chan struct{})
	go b.pollSecurityFiles(b.cfg.SecurityFilesPoll)
	return nil
}

// pollSecurityFiles takes up changes of acls.json and users.json made elsewhere.
func (b *Broker) pollSecurityFiles(every time.Duration) {
	defer close(b.securityDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.securityStop:
			return
		case <-t.C:
			b.env.Credentials.Poll()
			if b.env.Authorizer != nil {
				b.env.Authorizer.Poll()
			}
		}
	}
}

func (b *Broker) stopSecurity() {
	if b.securityStop != nil {
		close(b.securityStop)
		<-b.securityDone
		b.securityStop = nil
	}
}

// newTLSConfig is an SSL listener's TLS: the certificate from PEM files, read again when
// they change (a renewed Secret is mounted in place), and client certificates as
// ssl.client.auth asks, verified against the truststore's CAs.
func newTLSConfig(certFile, keyFile, caFile, clientAuth string) (*tls.Config, error) {
	kp := &keyPair{cert: certFile, key: keyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	switch clientAuth {
	case "requested":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.truststore.location: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ssl.truststore.location %s holds no PEM certificate", caFile)
		}
		cfg.ClientCAs = pool
	}
	return cfg, nil
}

// keyPair is a certificate and key on disk, loaded again when either file changes.
type keyPair struct {
	cert, key string
	mu        sync.Mutex
	stamp     [2]time.Time
	loaded    *tls.Certificate
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var stamp [2]time.Time
	for i, p := range []string{k.cert, k.key} {
		fi, err := os.Stat(p)
		if err != nil {
			if k.loaded != nil {
				return k.loaded, nil // mid-rotation: keep serving the old pair
			}
			return nil, fmt.Errorf("ssl certificate: %w", err)
		}
		stamp[i] = fi.ModTime()
	}
	if k.loaded != nil && stamp == k.stamp {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("ssl.certificate.location / ssl.key.location: %w", err)
	}
	k.loaded, k.stamp = &c, stamp
	return k.loaded, nil
}

// Metrics is the broker's metrics (tests read the security counters).
func (b *Broker) Metrics() *metrics.Metrics { return b.met }
