// Package kube is the fence of a broker in Kubernetes: one coordination.k8s.io/v1 Lease
// per broker, named `<service>-broker-<id>`, held through client-go's leaderelection on a
// resourcelock.LeaseLock with this broker (this process) the only candidate for its own
// lease, released on Stop (ReleaseOnCancel).
//
// # Own lease: ValidUntil
//
// ValidUntil is the start time of the last successful renewal (the instant, on this
// process's monotonic clock, just before the Create or Update was sent) plus the lease
// duration minus a margin. When renewals fail, nothing moves it: it passes, Changes fires
// and the broker stops writing. The clock argument: a peer measures a lease's lapse from
// the moment it observes a change of that Lease, on its own clock. That observation comes
// after the apiserver committed the renewal, which comes after the renewal's start here.
// So the peer's "lapsed" instant is at least one lease duration, in real time, after the
// start of the renewal it last saw; ValidUntil ends earlier by the margin, which only has
// to cover the two clocks' rates differing over one lease duration (NTP-slewed clocks:
// under 0.1 %) and the delay between a writer's check and its write. No clock
// synchronisation between nodes is assumed, and the Lease's renewTime (the holder's wall
// clock) is never compared with another clock.
//
// Holder identity is `<pod>_<random>`, new per process: a restarted broker is a new
// candidate and waits, as leaderelection does, until its previous incarnation's record has
// stayed unchanged for a lease duration, so two incarnations never both hold the lease.
//
// Epoch is the Lease's leaseTransitions after this process's last acquisition: it grows by
// one at every change of holder, across processes, so it is an ownership epoch for this
// broker's identity. A broker whose lease was taken over (paused past its lease, a peer
// cleared it) and which then acquires it again gets a higher Epoch and must treat what it
// held before as gone; ValidUntil alone does not tell a regained lease from a kept one.
//
// # Peers: Lapsed
//
// The peers' Leases come from an informer in the namespace (label `kaas.io/service`, the
// name checked here too: the fake clientset's watch ignores selectors). A peer is lapsed
// when its Lease is absent, its holderIdentity is empty (released), or its
// resourceVersion has not changed for a whole lease duration measured on this process's
// clock from when this process first saw that version, as leaderelection judges a
// leader's lease. Before this broker reports a peer lapsed by time it confirms it with a
// compare-and-swap on the peer's Lease: an update, at the resourceVersion it saw, that
// clears the holder. If the peer renewed meanwhile (a renewal this broker had not seen
// yet, or one still in flight) the swap conflicts, the lease counts as renewed now, and
// the renewal in flight that lands after a successful swap conflicts in turn, so the peer
// cannot extend a lease a successor has already judged lapsed; it can only acquire it
// anew, with a higher Epoch. Until the informer has synced, no peer is lapsed.
//
// # Limits
//
// A process paused between its ValidUntil check and its write can still write late: the
// fence cannot reach into a stopped process. That write must be refused by the epoch
// carried in the shared files (see docs/architecture.md, fencing and takeover), which is
// what Epoch is for. A returning broker's lease is seen as held again by each peer when
// its informer delivers it, not at the same instant on all of them.
//
// # RBAC
//
// In its namespace a broker needs: coordination.k8s.io leases get, list, watch, create,
// update (its own lease: create and update; peers' leases: list, watch, and update for the
// swap). The registry source (registry/kube) needs discovery.k8s.io endpointslices get,
// list, watch. Nothing else.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"

	"kaas/fence"
	"kaas/logs"
)

// LabelService marks the Leases of one cluster's brokers with the Service's name.
const LabelService = "kaas.io/service"

// Config is what a Fence needs.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string // the brokers' headless Service: leases are `<service>-broker-<id>`
	Self      int32
	Size      int // the full broker set: ids 0..Size-1
	// Identity is the holder identity; "": `<hostname>_<random hex>`, new per process.
	Identity string
	// LeaseDuration is a whole number of seconds, at least 1 (a Lease stores whole seconds).
	LeaseDuration time.Duration
	RenewInterval time.Duration // at most LeaseDuration/2
	// Margin is taken off ValidUntil; 0: LeaseDuration/10.
	Margin time.Duration
	Log    zerolog.Logger
}

// LeaseName is the name of broker id's Lease.
func LeaseName(service string, id int32) string {
	return fmt.Sprintf("%s-broker-%d", service, id)
}

// Fence is a broker's Lease. Create it with New, then Start; Stop releases.
type Fence struct {
	cfg      Config
	log      zerolog.Logger
	changes  chan struct{}
	swapLim  *logs.Limiter // peer_lease_swap_failed repeats every look while the apiserver is away
	wakePeer chan struct{}
	acquired chan struct{} // closed at the first acquisition (Start waits on it)
	acqOnce  sync.Once

	mu         sync.Mutex
	validUntil time.Time
	epoch      int64
	held       bool // last reported state of the own lease
	peers      map[int32]bool
	beyond     map[int32]bool // ids at or beyond Size with a Lease of this service
	synced     bool

	halted atomic.Bool // Halt: every lease call fails, as if the apiserver were cut off

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

var _ fence.Fence = (*Fence)(nil)

// New checks cfg and returns a fence not yet started.
func New(cfg Config) (*Fence, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Service == "" {
		return nil, errors.New("fence/kube: client, namespace and service are required")
	}
	if cfg.LeaseDuration < time.Second || cfg.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("fence/kube: lease duration %v: a Lease holds whole seconds, at least 1", cfg.LeaseDuration)
	}
	if cfg.RenewInterval <= 0 || 2*cfg.RenewInterval > cfg.LeaseDuration {
		return nil, fmt.Errorf("fence/kube: renew interval %v must be positive and at most half the lease duration %v", cfg.RenewInterval, cfg.LeaseDuration)
	}
	if cfg.Size < 1 || cfg.Self < 0 || int(cfg.Self) >= cfg.Size {
		return nil, fmt.Errorf("fence/kube: broker %d outside cluster size %d", cfg.Self, cfg.Size)
	}
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.LeaseDuration / 10
	}
	if cfg.Margin >= cfg.LeaseDuration/2 {
		return nil, fmt.Errorf("fence/kube: margin %v must be under half the lease duration", cfg.Margin)
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.Identity = host + "_" + hex.EncodeToString(b[:])
	}
	return &Fence{
		cfg:      cfg,
		log:      cfg.Log.With().Str("component", "fence_kube").Str("lease", LeaseName(cfg.Service, cfg.Self)).Str("identity", cfg.Identity).Logger(),
		changes:  make(chan struct{}, 1),
		swapLim:  logs.NewLimiter(10 * time.Second),
		wakePeer: make(chan struct{}, 1),
		acquired: make(chan struct{}),
		peers:    map[int32]bool{},
	}, nil
}

// Identity is this process's holder identity.
func (f *Fence) Identity() string { return f.cfg.Identity }

// Start acquires this broker's Lease, blocking until it is held or ctx ends (then the
// fence is stopped and the error returned), and keeps renewing it and watching the peers'
// Leases until Stop.
func (f *Fence) Start(ctx context.Context) error {
	lock := &trackedLock{
		f: f,
		LeaseLock: &rl.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: LeaseName(f.cfg.Service, f.cfg.Self), Namespace: f.cfg.Namespace},
			Client:     f.cfg.Client.CoordinationV1(),
			LockConfig: rl.ResourceLockConfig{Identity: f.cfg.Identity},
			Labels:     map[string]string{LabelService: f.cfg.Service},
		},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: f.cfg.LeaseDuration,
		RenewDeadline: f.cfg.LeaseDuration * 2 / 3,
		RetryPeriod:   f.cfg.RenewInterval,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {},
			OnStoppedLeading: func() {},
		},
		ReleaseOnCancel: true,
		Name:            LeaseName(f.cfg.Service, f.cfg.Self),
	})
	if err != nil {
		return fmt.Errorf("fence/kube: %w", err)
	}

	f.ctx, f.cancel = context.WithCancel(context.Background())

	factory := informers.NewSharedInformerFactoryWithOptions(f.cfg.Client, 0,
		informers.WithNamespace(f.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelService: f.cfg.Service}).String()
		}))
	inf := factory.Coordination().V1().Leases()
	informer := inf.Informer()
	wake := func(any) { poke(f.wakePeer) }
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: wake, UpdateFunc: func(any, any) { poke(f.wakePeer) }, DeleteFunc: wake,
	}); err != nil {
		f.cancel()
		return fmt.Errorf("fence/kube: add lease handler: %w", err)
	}
	factory.Start(f.ctx.Done())

	f.wg.Add(2)
	go func() { // the elector: renews; when it loses the lease it runs again to re-acquire
		defer f.wg.Done()
		for f.ctx.Err() == nil {
			le.Run(f.ctx)
		}
	}()
	go func() {
		defer f.wg.Done()
		defer factory.Shutdown()
		f.loop(inf.Lister().Leases(f.cfg.Namespace), informer.HasSynced)
	}()

	select {
	case <-f.acquired:
		return nil
	case <-ctx.Done():
		f.Stop()
		return fmt.Errorf("fence/kube: lease %s not acquired: %w", LeaseName(f.cfg.Service, f.cfg.Self), ctx.Err())
	}
}

// ValidUntil implements fence.Fence.
func (f *Fence) ValidUntil() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.validUntil
}

// Epoch is the Lease's leaseTransitions at this process's last acquisition (0 before).
func (f *Fence) Epoch() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// Lapsed implements fence.Fence.
func (f *Fence) Lapsed(id int32) bool {
	if id == f.cfg.Self {
		return !fence.Valid(f)
	}
	if id < 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if int(id) >= f.cfg.Size && f.synced && !f.beyond[id] {
		return true // no Lease: no broker with this id runs
	}
	return f.synced && f.peers[id]
}

// Synced reports whether the peers' Leases have been read once; until then no peer is
// lapsed.
func (f *Fence) Synced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Changes implements fence.Fence.
func (f *Fence) Changes() <-chan struct{} { return f.changes }

// Stop releases the Lease (ValidUntil is cleared before the release is sent) and joins
// the fence's goroutines.
func (f *Fence) Stop() {
	f.once.Do(func() {
		if f.cancel != nil {
			f.cancel()
			f.wg.Wait()
		}
		f.mu.Lock()
		f.validUntil = time.Time{}
		f.mu.Unlock()
	})
}

// Halt makes every call on the own Lease fail from now on, as for a broker cut off from
// the apiserver or paused: it stops renewing and cannot release, so the Lease stays as it
// is until peers judge it lapsed, and ValidUntil passes. The fence still watches peers;
// Stop joins. For tests (a pause without SIGSTOP) and for a broker that must give up its
// lease's renewal at once.
func (f *Fence) Halt() { f.halted.Store(true) }

// Resume undoes Halt, as SIGCONT resumes a paused process: renewing starts again. If a
// peer has judged the lease lapsed meanwhile, the renewal conflicts and the lease is
// acquired anew, with a higher Epoch.
func (f *Fence) Resume() { f.halted.Store(false) }

var errHalted = errors.New("fence halted")

// renewed records a successful Create or Update holding the lease, sent at start.
func (f *Fence) renewed(start time.Time, rec rl.LeaderElectionRecord) {
	until := start.Add(f.cfg.LeaseDuration - f.cfg.Margin)
	f.mu.Lock()
	if until.After(f.validUntil) {
		f.validUntil = until
	}
	epoch := int64(rec.LeaderTransitions)
	newEpoch := epoch != f.epoch || !f.held
	f.epoch = epoch
	regained := !f.held
	f.held = true
	f.mu.Unlock()
	f.acqOnce.Do(func() { close(f.acquired) })
	if regained || newEpoch {
		f.log.Info().Int64("epoch", epoch).Time("valid_until", until).Msg("lease_acquired")
		poke(f.changes)
	}
}

// releasing clears ValidUntil before the release is sent: no write after giving it up.
func (f *Fence) releasing() {
	f.mu.Lock()
	was := f.held
	f.validUntil = time.Time{}
	f.held = false
	f.mu.Unlock()
	if was {
		f.log.Info().Msg("lease_releasing")
		poke(f.changes)
	}
}

// loop is the fence's clock: it reports the own lease lost when ValidUntil passes, and
// judges the peers' leases from the informer's cache.
func (f *Fence) loop(lister leaseLister, hasSynced func() bool) {
	type seen struct {
		rv string    // version: resourceVersion, holder and renewTime (see version)
		at time.Time // this process's clock when rv was first seen
	}
	obs := map[int32]seen{}
	tick := time.NewTicker(f.cfg.RenewInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-tick.C:
		case <-f.wakePeer:
		}
		now := time.Now()
		f.checkOwn(now)
		if !hasSynced() {
			continue
		}
		lapsed := make(map[int32]bool, f.cfg.Size)
		beyond := f.leasesBeyond(lister)
		ids := make([]int32, 0, f.cfg.Size+len(beyond))
		for id := int32(0); int(id) < f.cfg.Size; id++ {
			ids = append(ids, id)
		}
		for id := range beyond {
			ids = append(ids, id)
		}
		for _, id := range ids {
			if id == f.cfg.Self {
				continue
			}
			l, err := lister.Get(LeaseName(f.cfg.Service, id))
			if err != nil || l.Labels[LabelService] != f.cfg.Service {
				lapsed[id] = true // absent (or not ours)
				delete(obs, id)
				continue
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				lapsed[id] = true // released, or cleared by a peer's swap
				obs[id] = seen{rv: version(l), at: now}
				continue
			}
			o, ok := obs[id]
			if !ok || o.rv != version(l) {
				obs[id] = seen{rv: version(l), at: now}
				continue
			}
			if now.Sub(o.at) < f.cfg.LeaseDuration {
				continue
			}
			switch newRV, err := f.swap(l); {
			case err == nil:
				lapsed[id] = true
				obs[id] = seen{rv: newRV, at: now} // the next look re-observes: holder now empty
				f.log.Info().Int32("peer", id).Str("holder", logs.ID(*l.Spec.HolderIdentity)).Dur("unchanged_for", now.Sub(o.at)).Msg("peer_lease_lapsed")
			case apierrors.IsConflict(err):
				obs[id] = seen{rv: newRV, at: time.Now()} // renewed meanwhile: seen now
			default: // cannot confirm: not lapsed
				if f.ctx.Err() == nil {
					f.swapLim.Event(f.log.Warn()).Err(err).Int32("peer", id).Msg("peer_lease_swap_failed")
				}
			}
		}
		f.publishPeers(lapsed, beyond)
	}
}

// leasesBeyond lists the ids at or beyond Size that have a Lease of this service: brokers
// scaled away by a helm upgrade that shrinks the cluster, which serve until they stop. A
// peer on the smaller size waits for what they still claim.
func (f *Fence) leasesBeyond(lister leaseLister) map[int32]bool {
	ls, err := lister.List(labels.SelectorFromSet(labels.Set{LabelService: f.cfg.Service}))
	if err != nil {
		return nil
	}
	out := map[int32]bool{}
	prefix := f.cfg.Service + "-broker-"
	for _, l := range ls {
		num, ok := strings.CutPrefix(l.Name, prefix)
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(num, 10, 32)
		if err != nil || int(id) < f.cfg.Size || LeaseName(f.cfg.Service, int32(id)) != l.Name {
			continue
		}
		out[int32(id)] = true
	}
	return out
}

// swap clears the holder of a peer's Lease at the resourceVersion this broker saw,
// returning the new resourceVersion (or, on conflict, "" so the next look re-observes).
func (f *Fence) swap(l *coordinationv1.Lease) (string, error) {
	c := l.DeepCopy()
	empty := ""
	c.Spec.HolderIdentity = &empty
	ctx, cancel := context.WithTimeout(f.ctx, f.cfg.RenewInterval)
	defer cancel()
	out, err := f.cfg.Client.CoordinationV1().Leases(f.cfg.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return "", fmt.Errorf("clear holder of lease %s: %w", l.Name, err)
	}
	return out.ResourceVersion, nil
}

func (f *Fence) checkOwn(now time.Time) {
	f.mu.Lock()
	lost := f.held && !now.Before(f.validUntil)
	if lost {
		f.held = false
	}
	until := f.validUntil
	f.mu.Unlock()
	if lost {
		f.log.Warn().Time("valid_until", until).Msg("lease_lost")
		poke(f.changes)
	}
}

func (f *Fence) publishPeers(lapsed, beyond map[int32]bool) {
	f.mu.Lock()
	changed := !f.synced || !maps.Equal(f.beyond, beyond)
	for id := int32(0); int(id) < f.cfg.Size; id++ {
		if id != f.cfg.Self && f.peers[id] != lapsed[id] {
			changed = true
		}
	}
	for id := range beyond {
		if f.peers[id] != lapsed[id] {
			changed = true
		}
	}
	f.peers, f.beyond = lapsed, beyond
	f.synced = true
	f.mu.Unlock()
	if changed {
		poke(f.changes)
	}
}

// version tells one write of a Lease from the next: its resourceVersion (a real
// apiserver changes it on every write), holder and renewTime (the holder's clock, only
// compared for equality, never with this clock; the fake clientset keeps resourceVersion).
func version(l *coordinationv1.Lease) string {
	v := l.ResourceVersion + "/"
	if l.Spec.HolderIdentity != nil {
		v += *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		v += "/" + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return v
}

type leaseLister interface {
	Get(name string) (*coordinationv1.Lease, error)
	List(selector labels.Selector) ([]*coordinationv1.Lease, error)
}

// trackedLock is the LeaseLock with the start time of every write noted: a successful
// Create or Update that holds the lease extends ValidUntil from its start; an Update that
// gives the lease up (the release) clears ValidUntil before it is sent.
type trackedLock struct {
	*rl.LeaseLock
	f *Fence
}

func (l *trackedLock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	if l.f.halted.Load() {
		return nil, nil, errHalted
	}
	return l.LeaseLock.Get(ctx)
}

func (l *trackedLock) Create(ctx context.Context, rec rl.LeaderElectionRecord) error {
	if l.f.halted.Load() {
		return errHalted
	}
	start := time.Now()
	if err := l.LeaseLock.Create(ctx, rec); err != nil {
		return err
	}
	l.f.renewed(start, rec)
	return nil
}

func (l *trackedLock) Update(ctx context.Context, rec rl.LeaderElectionRecord) error {
	if l.f.halted.Load() {
		return errHalted
	}
	if rec.HolderIdentity != l.Identity() {
		l.f.releasing()
		return l.LeaseLock.Update(ctx, rec)
	}
	start := time.Now()
	if err := l.LeaseLock.Update(ctx, rec); err != nil {
		return err
	}
	l.f.renewed(start, rec)
	return nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Term is the lease's Epoch as fence.Fence counts it: it grows whenever this broker
// holds its Lease again after a peer judged it lapsed (and cleared its holder), which is
// the only way a peer can have adopted what it loaded.
func (f *Fence) Term() uint64 {
	e := f.Epoch()
	if e < 0 {
		return 0
	}
	return uint64(e)
}
