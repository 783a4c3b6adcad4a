package kube

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"kaas/registry"
)

const (
	ns  = "kafka"
	svc = "kaas-headless"
)

func ptr[T any](v T) *T { return &v }

// ep is an endpoint as the EndpointSlice controller writes it for a StatefulSet pod.
func ep(ord int, serving, terminating bool) discoveryv1.Endpoint {
	name := fmt.Sprintf("kaas-%d", ord)
	return discoveryv1.Endpoint{
		Addresses: []string{fmt.Sprintf("10.244.0.%d", 10+ord)},
		Hostname:  ptr(name),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name},
		// publishNotReadyAddresses: ready is true whatever the pod's state
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(serving), Terminating: ptr(terminating)},
	}
}

func slice(name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("kafka"), Port: ptr(int32(9092))}},
	}
}

// loopback maps broker N to 127.0.0.1:19090+N: no test dials an address from a slice.
func loopback(_ string, ord int32, _ discoveryv1.Endpoint) (map[string]registry.Endpoint, error) {
	return map[string]registry.Endpoint{"PLAINTEXT": {Host: "127.0.0.1", Port: 19090 + ord}}, nil
}

type harness struct {
	t      *testing.T
	client *fake.Clientset
	reg    *registry.Registry
	src    *Source
	done   chan error
	cancel context.CancelFunc
}

func start(t *testing.T, size int, resync time.Duration, objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	return startWith(t, client, size, resync, nil)
}

func startWith(t *testing.T, client *fake.Clientset, size int, resync time.Duration, after func()) *harness {
	t.Helper()
	src, err := New(Config{Client: client, Namespace: ns, Service: svc, Size: size, Mapper: loopback, Resync: resync, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	src.afterRebuild = after
	h := &harness{t: t, client: client, reg: registry.New(0, size), src: src, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- src.Run(ctx, h.reg) }()
	t.Cleanup(h.stop)
	h.waitFor("synced", func() bool { return h.reg.Synced() })
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		h.t.Errorf("Run did not return after cancel")
	}
}

// waitFor waits on registry change notifications until cond holds (deadline 10 s).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	ch, unsub := h.reg.Subscribe()
	defer unsub()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-ch:
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; brokers %+v", what, h.reg.All())
		}
	}
}

func (h *harness) alive() []int32 {
	var out []int32
	for _, b := range h.reg.Brokers() {
		out = append(out, b.ID)
	}
	return out
}

func (h *harness) waitAlive(want ...int32) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("alive %v", want), func() bool { return reflect.DeepEqual(h.alive(), want) })
}

func (h *harness) update(sl *discoveryv1.EndpointSlice) {
	h.t.Helper()
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), sl, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) create(sl *discoveryv1.EndpointSlice) {
	h.t.Helper()
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), sl, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func TestSyncedViewListsEveryBrokerOfTheCluster(t *testing.T) {
	h := start(t, 3, 0, slice("kaas-abc", svc, ep(0, true, false), ep(2, true, false)))
	all := h.reg.All()
	if len(all) != 3 {
		t.Fatalf("brokers %+v, want ids 0..2", all)
	}
	if got := h.alive(); !reflect.DeepEqual(got, []int32{0, 2}) {
		t.Fatalf("alive %v, want [0 2]", got)
	}
	b2, _ := h.reg.Broker(2)
	if b2.Endpoints["PLAINTEXT"] != (registry.Endpoint{Host: "127.0.0.1", Port: 19092}) {
		t.Fatalf("broker 2 endpoints %v: the mapper's, not the slice's address", b2.Endpoints)
	}
	if b1, _ := h.reg.Broker(1); b1.Alive || b1.Endpoints != nil {
		t.Fatalf("broker 1 without an endpoint: %+v, want listed, not alive", b1)
	}
	if owner, ok := h.reg.GroupOwner("g"); !ok || owner == 1 {
		t.Fatalf("group owner %d %v: must be an alive broker", owner, ok)
	}
}

func TestAddNotServingTerminatingDelete(t *testing.T) {
	h := start(t, 3, 0)
	h.waitAlive()
	if !h.reg.Synced() {
		t.Fatal("no slices yet is a complete view: synced")
	}

	h.create(slice("kaas-abc", svc, ep(0, true, false)))
	h.waitAlive(0)

	h.update(slice("kaas-abc", svc, ep(0, true, false), ep(1, true, false), ep(2, true, false)))
	h.waitAlive(0, 1, 2)

	// Readiness probe failing: serving false, ready still true (publishNotReadyAddresses).
	h.update(slice("kaas-abc", svc, ep(0, true, false), ep(1, false, false), ep(2, true, false)))
	h.waitAlive(0, 2)

	h.update(slice("kaas-abc", svc, ep(0, true, false), ep(1, true, false), ep(2, true, false)))
	h.waitAlive(0, 1, 2)

	// Pod deletion: terminating, possibly still serving its last requests.
	h.update(slice("kaas-abc", svc, ep(0, true, false), ep(1, true, false), ep(2, true, true)))
	h.waitAlive(0, 1)

	if err := h.client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), "kaas-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitAlive()
	if n := len(h.reg.All()); n != 3 {
		t.Fatalf("%d brokers after the delete, want all 3 listed", n)
	}
}

func TestForeignSliceIgnoredEvenWhenTheWatchDeliversIt(t *testing.T) {
	h := start(t, 3, 0, slice("kaas-abc", svc, ep(0, true, false)))
	h.waitAlive(0)
	// The fake clientset's watch ignores the label selector: this slice of another
	// Service, whose pods happen to be named like ours, reaches the informer.
	h.create(slice("other-xyz", "other", ep(1, true, false), ep(2, true, false)))
	// Then broker 0 stops serving. The watch delivers in order, so once that shows, the
	// foreign slice was handled too: counted, it would leave 1 and 2 alive.
	h.update(slice("kaas-abc", svc, ep(0, false, false)))
	h.waitAlive()
	sls, err := h.client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(sls.Items) != 2 {
		t.Fatalf("tracker has %d slices (%v), want 2", len(sls.Items), err)
	}
}

func TestSeveralSlicesMerged(t *testing.T) {
	h := start(t, 4, 0,
		slice("kaas-a", svc, ep(0, true, false), ep(1, true, false)),
		slice("kaas-b", svc, ep(2, true, false)),
	)
	h.waitAlive(0, 1, 2)
	// The controller moves broker 1 to slice b: for a moment both list it, one stale.
	h.create(slice("kaas-c", svc, ep(1, false, false), ep(3, true, false)))
	h.waitAlive(0, 1, 2, 3)
	h.update(slice("kaas-a", svc, ep(0, true, false)))
	h.waitAlive(0, 2, 3)
	// Ordinals outside the cluster size and names without an ordinal are ignored.
	odd := ep(9, true, false)
	noOrd := ep(1, true, false)
	noOrd.Hostname = ptr("kaas")
	noOrd.TargetRef.Name = "kaas"
	h.update(slice("kaas-b", svc, ep(2, true, false), odd, noOrd))
	h.create(slice("kaas-d", svc, ep(1, true, false)))
	h.waitAlive(0, 1, 2, 3)
	if n := len(h.reg.All()); n != 4 {
		t.Fatalf("%d brokers, want 4", n)
	}
}

// TestRelistAfterDroppedWatchCatchesMissedDelete: a watch that silently stops delivering
// (an apiserver restart, a dropped connection) is replaced by a relist; a slice deleted
// meanwhile must then count as gone.
func TestRelistAfterDroppedWatchCatchesMissedDelete(t *testing.T) {
	client := fake.NewClientset(slice("kaas-abc", svc, ep(0, true, false), ep(1, true, false)))
	var mu sync.Mutex
	var watchers []*watch.FakeWatcher
	watches := make(chan struct{}, 16)
	client.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake() // delivers nothing the tracker does
		mu.Lock()
		watchers = append(watchers, w)
		mu.Unlock()
		watches <- struct{}{}
		return true, w, nil
	})
	h := startWith(t, client, 2, 0, nil)
	h.waitAlive(0, 1)
	select {
	case <-watches:
	case <-time.After(10 * time.Second):
		t.Fatal("informer never watched")
	}
	if err := client.Tracker().Delete(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), ns, "kaas-abc"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	watchers[0].Stop() // the watch ends: the reflector lists again
	mu.Unlock()
	h.waitAlive()
}

// TestResyncChangesNothing: periodic resyncs re-derive the set from the cache; with nothing
// changed, the registry's version (what routing subscribers react to) stays put.
func TestResyncChangesNothing(t *testing.T) {
	rebuilds := make(chan struct{}, 64)
	client := fake.NewClientset(slice("kaas-abc", svc, ep(0, true, false), ep(1, true, false)))
	h := startWith(t, client, 2, time.Second, func() { // client-go's shortest resync
		select {
		case rebuilds <- struct{}{}:
		default:
		}
	})
	h.waitAlive(0, 1)
	v := h.reg.Version()
	for i := 0; i < 2; i++ { // resync events, nothing changed
		select {
		case <-rebuilds:
		case <-time.After(10 * time.Second):
			t.Fatal("no resync")
		}
	}
	if got := h.reg.Version(); got != v {
		t.Fatalf("registry version %d -> %d on resyncs that changed nothing", v, got)
	}
	h.update(slice("kaas-abc", svc, ep(0, true, false), ep(1, false, false)))
	h.waitAlive(0)
}

func TestRunFailsWhenNeverSynced(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("forbidden")
	})
	src, err := New(Config{Client: client, Namespace: ns, Service: svc, Size: 1, Mapper: loopback, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	r := registry.New(0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := src.Run(ctx, r); err == nil {
		t.Fatal("Run returned nil without a synced cache")
	}
	if r.Synced() {
		t.Fatal("registry marked synced without a list")
	}
}

func TestServingAndOrdinal(t *testing.T) {
	for _, c := range []struct {
		c    discoveryv1.EndpointConditions
		want bool
	}{
		{discoveryv1.EndpointConditions{}, true},
		{discoveryv1.EndpointConditions{Ready: ptr(false)}, true}, // ready is not read
		{discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(false)}, false},
		{discoveryv1.EndpointConditions{Serving: ptr(true), Terminating: ptr(true)}, false},
		{discoveryv1.EndpointConditions{Serving: ptr(true), Terminating: ptr(false)}, true},
	} {
		if got := Serving(c.c); got != c.want {
			t.Errorf("Serving(%+v) = %v, want %v", c.c, got, c.want)
		}
	}
	for _, c := range []struct {
		pod string
		ord int32
		ok  bool
	}{
		{"kaas-0", 0, true}, {"kaas-12", 12, true}, {"my-kaas-3", 3, true},
		{"kaas", 0, false}, {"kaas-", 0, false}, {"-1", 0, false}, {"kaas-x", 0, false},
		{"kaas--1", 0, false}, {"kaas-+1", 0, false}, {"kaas-01", 0, false}, {"kaas-99999999999", 0, false},
	} {
		ord, ok := Ordinal(c.pod)
		if ord != c.ord || ok != c.ok {
			t.Errorf("Ordinal(%q) = %d %v, want %d %v", c.pod, ord, ok, c.ord, c.ok)
		}
	}
}

func TestDNSMapper(t *testing.T) {
	m := DNSMapper(svc, ns, map[string]int32{"PLAINTEXT": 9092, "SASL": 9093})
	got, err := m("kaas-2", 2, ep(2, true, false))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]registry.Endpoint{
		"PLAINTEXT": {Host: "kaas-2.kaas-headless.kafka.svc", Port: 9092},
		"SASL":      {Host: "kaas-2.kaas-headless.kafka.svc", Port: 9093},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := DNSMapper(svc, ns, nil)("kaas-0", 0, ep(0, true, false)); err == nil {
		t.Fatal("no ports: want an error")
	}
}

func TestMain(m *testing.M) {
	RouteClientLogs(zerolog.Nop()) // client-go's reflector warnings would fill the test output
	m.Run()
}

func TestOrdinalMapperAndNamespace(t *testing.T) {
	m := OrdinalMapper(map[int32]map[string]registry.Endpoint{1: {"PLAINTEXT": {Host: "127.0.0.1", Port: 9093}}})
	if got, err := m("kaas-1", 1, ep(1, true, false)); err != nil || got["PLAINTEXT"].Port != 9093 {
		t.Fatalf("ordinal 1: %v %v", got, err)
	}
	if _, err := m("kaas-2", 2, ep(2, true, false)); err == nil {
		t.Fatal("unknown ordinal: want an error")
	}
	t.Setenv("POD_NAMESPACE", "from-env")
	if got, err := Namespace(""); err != nil || got != "from-env" {
		t.Fatalf("Namespace: %q %v", got, err)
	}
	if got, _ := Namespace("flag"); got != "flag" {
		t.Fatalf("Namespace(flag) = %q", got)
	}
}
