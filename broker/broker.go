// Package broker wires one kaas broker: its data dir and cluster id, the actor system, the
// Kafka listeners whose connections become connection actors, the groups and topics
// managers, the HTTP side (health, metrics) and the graceful stop. cmd/kaas and the tests
// both start brokers through it.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/conn"
	"kaas/actors/offsets"
	"kaas/actors/partition"
	"kaas/config"
	"kaas/datamode"
	"kaas/logs"
	"kaas/metrics"
	"kaas/peer"
	"kaas/registry"
	"kaas/storage"
	"kaas/watchdog"
)

// Broker is one running broker.
type Broker struct {
	cfg config.Config
	log zerolog.Logger
	sys *actor.System
	env *conn.Env
	met *metrics.Metrics
	// lock keeps other brokers out of the data directory until Stop has finished.
	lock *dataLock
	// journal is the offsets journal actor; it stops after the groups.
	journal *actor.PID
	// pending lists the groups whose file the start left to be written behind.
	pending *offsets.Pending
	// txnJournal is the transaction coordinator's journal (a broker alone); it stops
	// after the transactions manager.
	txnJournal *actor.PID
	// txns is where the partitions' orphan checks go (txnChecker), which start before
	// it does: Env.Txns on a broker alone, txnOrphans in a cluster.
	txns atomic.Pointer[actor.PID]
	// txnOrphans is a cluster's orphan checker (txn.OrphanCheckerProps); it stops with
	// the transactions manager.
	txnOrphans *actor.PID
	// groupsLeaving is set as Stop begins: the offsets actors of a broker alone then
	// leave their group files behind the journal, which the next start replays
	// (offsets.Config.LeaveToJournal).
	groupsLeaving atomic.Bool
	// catalog is the topic catalogue the topics manager publishes; made before the
	// groups manager, whose consumer-protocol groups assign from it.
	catalog *partition.Catalog
	// cluster is the registry source, fence and ownership controller of a broker in a
	// cluster (nil with the dev registry).
	cluster *clusterSide
	// peers is the inter-broker client of a broker in a cluster (nil alone).
	peers *peer.Client
	// watchdog ends this broker's client connections if it stops running past its
	// lease (nil when off or alone).
	watchdog *watchdog.Watchdog

	listeners []*listener
	// tls is the SSL and SASL_SSL listeners' TLS; securityStop ends the goroutine that
	// polls the ACL and users files, which closes securityDone.
	tls          *tls.Config
	securityStop chan struct{}
	securityDone chan struct{}
	httpSrv      *http.Server
	httpLn       net.Listener

	mu       sync.Mutex
	conns    map[*actor.PID]struct{}
	stopping bool
	connsWG  sync.WaitGroup
	acceptWG sync.WaitGroup
	// quit is closed when Stop begins: an accept loop waiting to retry, or for a
	// connection to close, returns at once.
	quit chan struct{}
	// quotas counts the connections open against max.connections(.per.ip).
	quotas *connQuotas

	stopOnce sync.Once
	stopErr  error
}

type listener struct {
	name string
	ln   net.Listener
	// failing is the accept failure under way (nil while accepting works); /readyz
	// reports it. failLog, refuseLog and pauseLog rate-limit the lines of failed accepts,
	// connections refused and pauses at max.connections.
	failing   atomic.Pointer[acceptFailure]
	failLog   *logs.Limiter
	refuseLog *logs.Limiter
	pauseLog  *logs.Limiter
}

// Option changes how Start builds a broker (tests use them).
type Option func(*options)

type options struct {
	wrapListener func(name string, ln net.Listener) net.Listener
	verifyTxn    conn.TxnVerifier
}

// WithTxnVerifier makes the connections verify transactional batches with v
// (conn.Env.VerifyTxn): tests stand in for the transaction coordinator this way.
func WithTxnVerifier(v conn.TxnVerifier) Option {
	return func(o *options) { o.verifyTxn = v }
}

// WithListenerWrap makes Start accept each Kafka listener's connections from what wrap
// returns for it (tests inject accept failures this way).
func WithListenerWrap(wrap func(name string, ln net.Listener) net.Listener) Option {
	return func(o *options) { o.wrapListener = wrap }
}

// Start binds every listener, starts the actors and serves until Stop.
func Start(cfg config.Config, log zerolog.Logger, opts ...Option) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	b := &Broker{cfg: cfg, log: log, conns: map[*actor.PID]struct{}{}, met: metrics.New(), quit: make(chan struct{})}
	quotas, err := newConnQuotas(&cfg)
	if err != nil {
		return nil, err
	}
	b.quotas = quotas
	// Process-wide, set before anything under data.dir is made.
	datamode.Set(cfg.DataFileMode)
	clusterDir := filepath.Join(cfg.DataDir, "__cluster")
	if err := storage.MkdirDurably(storage.OSFS{}, clusterDir); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	// No other broker may write this directory while this one runs (dev registry); the
	// brokers of a cluster share it, each holding its own id's lease (fence).
	lock, err := lockDataDir(clusterDir, cfg.NodeID, cfg.Registry != "dev")
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			lock.release()
			b.watchdog.Stop()
			b.cluster.stop()
		}
	}()
	// A static cluster's size is kept beside its id: a broker started with another
	// refuses before it takes a lease its peers would watch (registry=kubernetes takes
	// its size from the StatefulSet, changed by helm upgrade).
	static := cfg.Registry == "static"
	if static {
		if err := checkClusterSize(storage.OSFS{}, clusterDir, cfg.ClusterSize); err != nil {
			return nil, err
		}
	}
	if err := b.startFence(); err != nil {
		return nil, err
	}
	b.lock = lock
	clusterID, err := loadClusterID(storage.OSFS{}, clusterDir)
	if err != nil {
		return nil, err
	}
	if static {
		if err := recordClusterSize(storage.OSFS{}, clusterDir, cfg.ClusterSize); err != nil {
			return nil, err
		}
	}
	b.startWatchdog()
	for _, l := range cfg.Listeners {
		tl, err := net.Listen("tcp", l.Addr())
		if err != nil {
			b.closeListeners()
			return nil, fmt.Errorf("listen %s: %w", l, err)
		}
		ln := b.watchdog.Listener(tl.(*net.TCPListener))
		if o.wrapListener != nil {
			ln = o.wrapListener(l.Name, ln)
		}
		b.listeners = append(b.listeners, &listener{name: l.Name, ln: ln, failLog: logs.NewLimiter(acceptFailLogInterval),
			refuseLog: logs.NewLimiter(acceptFailLogInterval), pauseLog: logs.NewLimiter(acceptFailLogInterval)})
		// Every series from the start, at 0.
		for _, e := range acceptErrorReasons {
			b.met.AcceptErrors.WithLabelValues(l.Name, e)
		}
		b.met.ConnectionsRefused.WithLabelValues(l.Name, "max_connections_per_ip")
		b.met.AcceptPaused.WithLabelValues(l.Name)
	}
	self := registry.Broker{ID: cfg.NodeID, Endpoints: map[string]registry.Endpoint{}}
	for _, l := range b.listeners {
		adv := cfg.Advertised(l.name, l.ln.Addr().(*net.TCPAddr).Port)
		self.Endpoints[l.name] = registry.Endpoint{Host: adv.Host, Port: int32(adv.Port)}
	}
	b.sys = actor.NewSystem(log)
	b.env = &conn.Env{
		Config:    &b.cfg,
		NodeID:    cfg.NodeID,
		ClusterID: clusterID,
		System:    b.sys,
		Registry:  nil,
		Metrics:   b.met,
		Log:       log,
		VerifyTxn: o.verifyTxn,
	}
	if b.cluster != nil {
		if b.env.Registry, err = b.clusterRegistry(self); err != nil {
			b.closeListeners()
			return nil, err
		}
	} else {
		b.env.Registry = registry.NewDev(self)
	}
	if err := b.startPeers(); err != nil {
		b.closeListeners()
		return nil, err
	}
	b.env.RequestBytes = conn.NewBudget(cfg.QueuedMaxRequestBytes, b.met.RequestBytesQueued, b.met.RequestReadsWaiting)
	b.env.ResponseBytes = conn.NewBudget(cfg.QueuedMaxResponseBytes, b.met.ResponseBytesUnwritten, nil)
	if err := b.startSecurity(); err != nil {
		b.closeListeners()
		return nil, err
	}
	if err := b.startManagers(); err != nil {
		b.closeListeners()
		b.stopSecurity()
		return nil, err
	}
	if b.cluster != nil {
		b.startController()
	}
	if cfg.HTTPListen != "" {
		if err := b.startHTTP(); err != nil {
			b.closeListeners()
			b.stopSecurity()
			return nil, err
		}
	}
	for _, l := range b.listeners {
		b.acceptWG.Add(1)
		go b.accept(l)
	}
	addrs := make([]string, 0, len(b.listeners))
	var protocols []string
	for _, l := range b.listeners {
		addrs = append(addrs, l.name+"://"+l.ln.Addr().String())
		protocols = append(protocols, l.name+":"+cfg.SecurityProtocol(l.name))
	}
	authorizer := cfg.Authorizer
	if authorizer == "" {
		authorizer = "off"
	}
	log.Info().Strs("listeners", addrs).Strs("security_protocols", protocols).Str("authorizer", authorizer).Str("data_dir", cfg.DataDir).Int32("node_id", cfg.NodeID).
		Str("cluster_id", clusterID).Str("version", VersionString()).Str("http", b.HTTPAddr()).
		Int("gomaxprocs", runtime.GOMAXPROCS(0)).Msg("kaas_started")
	started = true
	return b, nil
}

// Addr is the address of the first listener.
func (b *Broker) Addr() string { return b.listeners[0].ln.Addr().String() }

// ListenerAddr is the bound address of the named listener.
func (b *Broker) ListenerAddr(name string) string {
	for _, l := range b.listeners {
		if l.name == name {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// HTTPAddr is where /healthz, /readyz and /metrics are served ("" when off).
func (b *Broker) HTTPAddr() string {
	if b.httpLn == nil {
		return ""
	}
	return b.httpLn.Addr().String()
}

// Env is the shared environment of the connections (for tests that drive actors).
func (b *Broker) Env() *conn.Env { return b.env }

// ClusterID is the id kept in the data dir.
func (b *Broker) ClusterID() string { return b.env.ClusterID }

func (b *Broker) closeListeners() {
	for _, l := range b.listeners {
		_ = l.ln.Close()
	}
}

// Stop stops gracefully: no new connections, every request already read is answered,
// the groups and topics managers stop (offsets actors flush; a broker alone leaves its
// groups to its journal instead, stopManagers), then the rest. ctx bounds the whole
// stop; past it, connections are closed hard.
func (b *Broker) Stop(ctx context.Context) error {
	b.stopOnce.Do(func() { b.stopErr = b.stop(ctx) })
	return b.stopErr
}

func (b *Broker) stop(ctx context.Context) error {
	start := time.Now()
	close(b.quit)
	b.groupsLeaving.Store(true)
	b.closeListeners()
	b.acceptWG.Wait()
	b.mu.Lock()
	b.stopping = true
	live := make([]*actor.PID, 0, len(b.conns))
	for pid := range b.conns {
		live = append(live, pid)
	}
	b.mu.Unlock()
	for _, pid := range live {
		b.sys.Send(pid, &conn.Drain{})
	}
	// Let requests already read reach their actors before the managers stop; the
	// managers then answer parked waiters (JoinGroup, long-poll Fetch) with codes.
	b.waitConns(ctx, 200*time.Millisecond)
	if b.peers != nil {
		// Requests still out to peers end now (their clients get NOT_CONTROLLER).
		b.peers.Close()
	}
	if b.cluster != nil && b.cluster.ctl != nil {
		b.cluster.ctl.Stop() // no hand-over while the managers stop
	}
	timeout := time.Until(deadlineOf(ctx, 8*time.Second))
	b.stopManagers(timeout)
	drained := b.waitConns(ctx, time.Until(deadlineOf(ctx, 8*time.Second)))
	if !drained {
		b.mu.Lock()
		for pid := range b.conns {
			b.sys.StopNow(pid)
		}
		b.mu.Unlock()
		b.waitConns(context.Background(), time.Second)
	}
	if b.httpSrv != nil {
		hctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = b.httpSrv.Shutdown(hctx)
		cancel()
	}
	b.stopSecurity()
	// A broker alone's journal and groups stop once nothing can reach them.
	b.stopAlone(max(time.Until(deadlineOf(ctx, 8*time.Second)), time.Second))
	b.sys.Shutdown()
	b.watchdog.Stop()
	b.cluster.stop() // the lease goes last: peers adopt once it is released
	b.lock.release()
	b.log.Info().Dur("took_ms", time.Since(start)).Bool("drained", drained).Msg("kaas_stopped")
	return nil
}

func deadlineOf(ctx context.Context, def time.Duration) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(def)
}

// waitConns waits for every connection actor to stop, at most d.
func (b *Broker) waitConns(ctx context.Context, d time.Duration) bool {
	done := make(chan struct{})
	go func() { b.connsWG.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Ready reports whether the broker can serve: not stopping, every listener accepting, in
// a cluster the registry synced and the lease held, and the data dir writable.
func (b *Broker) Ready() error {
	b.mu.Lock()
	stopping := b.stopping
	b.mu.Unlock()
	if stopping {
		return errors.New("stopping")
	}
	for _, l := range b.listeners {
		if f := l.failing.Load(); f != nil {
			return fmt.Errorf("listener %s cannot accept connections since %s (%s): %w",
				l.name, f.since.UTC().Format(time.RFC3339), f.reason, f.err)
		}
	}
	if c := b.cluster; c != nil {
		switch st := c.ctl.State(); {
		case !b.env.Registry.Synced():
			return errors.New("registry not synced")
		case st == nil || !st.Ready:
			return errors.New("lease not held or ownership view not applied")
		}
	}
	probe := filepath.Join(b.cfg.DataDir, "__cluster", ".ready-probe")
	if err := os.WriteFile(probe, []byte("ok"), datamode.File()); err != nil {
		return fmt.Errorf("data dir not writable: %w", err)
	}
	_ = os.Remove(probe)
	return nil
}

// Settled reports whether a cluster's ownership has come to rest (cluster.State.Settled):
// every live broker routes by the same alive set and no key is being handed over. A
// broker alone is always settled. /readyz?settled answers it, for scripts and tests
// that start a cluster and want its leaders and coordinators in place before clients
// come (a client copes with moves, but its first requests meet NOT_COORDINATOR and
// LEADER_NOT_AVAILABLE until then).
func (b *Broker) Settled() error {
	if b.cluster == nil {
		return nil
	}
	st := b.cluster.ctl.State()
	if !st.Settled() {
		return errors.New("ownership moving: a peer has not published the alive set this broker routes by, or a release is under way")
	}
	return nil
}

func (b *Broker) startHTTP() error {
	ln, err := net.Listen("tcp", b.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", b.cfg.HTTPListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := b.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Has("settled") {
			if err := b.Settled(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("/metrics", b.met.Handler())
	b.httpLn = ln
	b.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = b.httpSrv.Serve(ln) }()
	return nil
}
