package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"kaas/auth"
	"kaas/logs"
	"kaas/metrics"
	"kaas/storage"
)

// authFailureLogInterval is how often sasl_authentication_failed is logged at most (the
// first failure at once, then one line per interval saying how many were held back).
const authFailureLogInterval = 10 * time.Second

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
	b.env.AuthFailureLog = logs.NewLimiter(authFailureLogInterval)
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
			cfg, err := newTLSConfig(b.log, b.cfg.SSLCertificateLocation, b.cfg.SSLKeyLocation, b.cfg.SSLTruststoreLocation, b.cfg.SSLClientAuth)
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
func newTLSConfig(log zerolog.Logger, certFile, keyFile, caFile, clientAuth string) (*tls.Config, error) {
	kp := &keyPair{cert: certFile, key: keyFile, log: log}
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

// keyPair is a certificate and key on disk, loaded again when either file changes. A
// change is logged once: tls_certificate_reloaded, or, when the new files do not load
// (mid-rotation, a broken file), tls_certificate_refused_previous_kept while the pair in
// force stays served; the files are not read again until they change again, however many
// handshakes ask.
type keyPair struct {
	cert, key string
	log       zerolog.Logger

	mu      sync.Mutex
	stamp   [2]fileStamp // of the pair loaded
	refused [2]fileStamp // of the last version refused
	loaded  *tls.Certificate
}

// fileStamp tells one version of a file from another: a rename over it (a Secret's
// symlink swapped) changes the inode, an edit its size or mtime; err is why it could not
// be looked at.
type fileStamp struct {
	mtime time.Time
	size  int64
	ino   uint64
	err   string
}

func stampFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	s := fileStamp{mtime: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	stamp := [2]fileStamp{stampFile(k.cert), stampFile(k.key)}
	if k.loaded != nil && (stamp == k.stamp || stamp == k.refused) {
		return k.loaded, nil
	}
	c, err := k.load(stamp)
	if err != nil {
		if k.loaded == nil {
			return nil, err
		}
		// Keep serving the pair in force; say so once for this version of the files.
		k.refused = stamp
		k.log.Error().Err(err).Str("certificate", k.cert).Str("key", k.key).Msg("tls_certificate_refused_previous_kept")
		return k.loaded, nil
	}
	if k.loaded != nil {
		ev := k.log.Info().Str("certificate", k.cert)
		if c.Leaf != nil {
			ev = ev.Str("subject", logs.ID(c.Leaf.Subject.String())).Str("serial", c.Leaf.SerialNumber.String()).
				Time("not_after", c.Leaf.NotAfter)
		}
		ev.Msg("tls_certificate_reloaded")
	}
	k.loaded, k.stamp, k.refused = c, stamp, [2]fileStamp{}
	return k.loaded, nil
}

// load reads the pair; its errors name the files, never their content.
func (k *keyPair) load(stamp [2]fileStamp) (*tls.Certificate, error) {
	for i, s := range stamp {
		if s.err != "" {
			return nil, fmt.Errorf("ssl certificate: %s", stamp[i].err)
		}
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return nil, fmt.Errorf("ssl.certificate.location / ssl.key.location: %w", err)
	}
	return &c, nil
}

// Metrics is the broker's metrics (tests read the security counters).
func (b *Broker) Metrics() *metrics.Metrics { return b.met }
