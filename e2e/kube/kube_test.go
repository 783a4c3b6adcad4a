package kube

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"kaas/fence"
	kubefence "kaas/fence/kube"
	"kaas/registry"
	kubereg "kaas/registry/kube"
)

const (
	ns  = "kafka"
	svc = "kaas-headless"
	sts = "kaas"
)

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard()) // client-go's reflector lines would fill the output
	m.Run()
}

func ptr[T any](v T) *T { return &v }

func statefulSetSlice(serving ...bool) *discoveryv1.EndpointSlice {
	return BrokerSlice(ns, svc, sts, serving...)
}

// loopback maps broker N to 127.0.0.1:29090+N, never to the slice's address.
func loopback(_ string, ord int32, _ discoveryv1.Endpoint) (map[string]registry.Endpoint, error) {
	return map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: 29090 + ord}}, nil
}

func TestApiserverStartsAndWritesAKubeconfig(t *testing.T) {
	c := Start(t, Options{})
	cfg, err := kubereg.RESTConfig(c.Kubeconfig) // what a broker given this kubeconfig uses
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != Version {
		t.Fatalf("server version %s, want %s", v.GitVersion, Version)
	}
	// A real apiserver refuses loopback addresses in slices: why tests map addresses.
	sl := statefulSetSlice(true)
	sl.Endpoints[0].Addresses = []string{"127.0.0.1"}
	mustNamespace(t, cs)
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), sl, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("slice with a loopback address: %v, want Invalid", err)
	}
}

func mustNamespace(t *testing.T, cs kubernetes.Interface) { Namespace(t, cs, ns) }

type broker struct {
	id    int32
	reg   *registry.Registry
	fence *kubefence.Fence
	stop  context.CancelFunc
	done  chan error
}

// TestThreeBrokersRegistryAndLeases runs three registry sources and three Lease fences in
// this process against a real apiserver: broker 1 stops serving and the others see it
// dead; broker 2 stops renewing (a pause) and the others see its lease lapse, only once
// its own permission to write has ended; broker 0 stops and releases, and is seen lapsed
// without waiting. The Leases are real objects in that apiserver.
func TestThreeBrokersRegistryAndLeases(t *testing.T) {
	c := Start(t, Options{})
	cs := c.Client(t)
	ctx := context.Background()
	mustNamespace(t, cs)
	HeadlessService(t, cs, ns, svc, sts)
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, statefulSetSlice(true, true, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const size = 3
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	brokers := make([]*broker, size)
	for i := range brokers {
		id := int32(i)
		b := &broker{id: id, reg: registry.New(id, size), done: make(chan error, 1)}
		src, err := kubereg.New(kubereg.Config{Client: c.Client(t), Namespace: ns, Service: svc, Size: size, Mapper: loopback, Log: log.With().Int32("broker", id).Logger()})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		b.stop = cancel
		go func() { b.done <- src.Run(sctx, b.reg) }()
		b.fence, err = kubefence.New(kubefence.Config{
			Client: c.Client(t), Namespace: ns, Service: svc, Self: id, Size: size,
			Identity:      fmt.Sprintf("%s-%d_%d", sts, id, time.Now().UnixNano()),
			LeaseDuration: 2 * time.Second, RenewInterval: 400 * time.Millisecond,
			Log: log.With().Int32("broker", id).Logger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := b.fence.Start(fctx); err != nil {
			fcancel()
			t.Fatal(err)
		}
		fcancel()
		brokers[i] = b
	}
	t.Cleanup(func() {
		for _, b := range brokers {
			b.fence.Stop()
			b.stop()
			if err := <-b.done; err != nil {
				t.Errorf("broker %d source: %v", b.id, err)
			}
		}
	})

	for _, b := range brokers {
		waitRegistry(t, b.reg, []int32{0, 1, 2})
		for _, p := range brokers {
			if p.id != b.id {
				waitFence(t, b.fence, fmt.Sprintf("broker %d sees %d renewing", b.id, p.id), func() bool { return b.fence.Synced() && !b.fence.Lapsed(p.id) })
			}
		}
	}
	for _, b := range brokers {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, b.id), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("lease of broker %d: %v", b.id, err)
		}
		if holder(l) != b.fence.Identity() || l.Labels[kubefence.LabelService] != svc {
			t.Fatalf("lease of broker %d: holder %q labels %v", b.id, holder(l), l.Labels)
		}
	}

	// Broker 1's readiness fails: serving false (ready stays true).
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, statefulSetSlice(true, false, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range brokers {
		waitRegistry(t, b.reg, []int32{0, 2})
	}
	for g := 0; g < 50; g++ {
		group := fmt.Sprintf("group-%d", g)
		if owner, ok := brokers[0].reg.GroupOwner(group); !ok || owner == 1 {
			t.Fatalf("group %s routed to %d (ok %v) with broker 1 not serving", group, owner, ok)
		}
		o2, _ := brokers[2].reg.GroupOwner(group)
		if o0, _ := brokers[0].reg.GroupOwner(group); o0 != o2 {
			t.Fatalf("brokers 0 and 2 disagree on the owner of %s: %d vs %d", group, o0, o2)
		}
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, statefulSetSlice(true, true, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range brokers {
		waitRegistry(t, b.reg, []int32{0, 1, 2})
	}

	// Broker 2 pauses: it stops renewing and cannot release. Its Lease as it last wrote
	// it is what a renewal in flight would carry.
	b2 := brokers[2]
	b2.fence.Halt()
	stale, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, 2), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	epoch2 := b2.fence.Epoch()
	for _, b := range brokers[:2] {
		waitFence(t, b.fence, fmt.Sprintf("broker %d sees 2 lapsed", b.id), func() bool { return b.fence.Lapsed(2) })
		if fence.Valid(b2.fence) {
			t.Fatalf("broker %d sees broker 2 lapsed while 2 may still write (valid until %v)", b.id, b2.fence.ValidUntil())
		}
	}
	l2, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, 2), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(l2) != "" {
		t.Fatalf("lapsed lease of broker 2 still held by %q: not cleared by the peers' swap", holder(l2))
	}
	// The renewal in flight lands after the swap: the apiserver refuses it.
	stale.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("renewal at the version before the swap: %v, want a conflict", err)
	}
	// Broker 2 resumes: it holds its lease again only under a higher epoch.
	b2.fence.Resume()
	waitFence(t, b2.fence, "broker 2 holds again", func() bool { return fence.Valid(b2.fence) })
	if b2.fence.Epoch() <= epoch2 {
		t.Fatalf("resumed broker 2's epoch %d, want above %d", b2.fence.Epoch(), epoch2)
	}
	for _, b := range brokers[:2] {
		waitFence(t, b.fence, fmt.Sprintf("broker %d sees 2 back", b.id), func() bool { return !b.fence.Lapsed(2) })
	}
	b2.fence.Halt() // and pauses for good
	for _, b := range brokers[:2] {
		waitFence(t, b.fence, fmt.Sprintf("broker %d sees 2 lapsed again", b.id), func() bool { return b.fence.Lapsed(2) })
	}
	if brokers[0].fence.Lapsed(1) || brokers[1].fence.Lapsed(0) || !fence.Valid(brokers[0].fence) || !fence.Valid(brokers[1].fence) {
		t.Fatal("a renewing broker was judged lapsed")
	}

	// Broker 0 stops: it releases, and broker 1 sees it lapsed without a lease duration's
	// wait (its lease shows no holder at once).
	brokers[0].fence.Stop()
	l0, err := cs.CoordinationV1().Leases(ns).Get(ctx, kubefence.LeaseName(svc, 0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(l0) != "" {
		t.Fatalf("stopped broker 0's lease still held by %q", holder(l0))
	}
	waitFence(t, brokers[1].fence, "broker 1 sees 0 released", func() bool { return brokers[1].fence.Lapsed(0) })

	// A new incarnation of broker 2 takes its lease anew, with a higher epoch.
	next, err := kubefence.New(kubefence.Config{
		Client: c.Client(t), Namespace: ns, Service: svc, Self: 2, Size: size, Identity: "kaas-2_next",
		LeaseDuration: 2 * time.Second, RenewInterval: 400 * time.Millisecond, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := next.Start(sctx); err != nil {
		t.Fatal(err)
	}
	defer next.Stop()
	if next.Epoch() <= b2.fence.Epoch() || b2.fence.Epoch() <= epoch2 {
		t.Fatalf("new incarnation's epoch %d not above the old one's %d", next.Epoch(), b2.fence.Epoch())
	}
	waitFence(t, brokers[1].fence, "broker 1 sees 2 back", func() bool { return !brokers[1].fence.Lapsed(2) })
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func waitRegistry(t *testing.T, r *registry.Registry, alive []int32) {
	t.Helper()
	waitRegistryFor(t, r, alive, 30*time.Second)
}

func waitRegistryFor(t *testing.T, r *registry.Registry, alive []int32, d time.Duration) {
	t.Helper()
	ch, unsub := r.Subscribe()
	defer unsub()
	deadline := time.After(d)
	for {
		var got []int32
		for _, b := range r.Brokers() {
			got = append(got, b.ID)
		}
		if r.Synced() && reflect.DeepEqual(got, alive) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("broker %d: alive %v synced %v, want %v", r.Self(), got, r.Synced(), alive)
		}
	}
}

func waitFence(t *testing.T, f *kubefence.Fence, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-f.Changes():
		case <-deadline:
			t.Fatalf("timed out: %s", what)
		}
	}
}
