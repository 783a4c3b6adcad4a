package kube

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"kaas/fence"
)

const (
	ns  = "kafka"
	svc = "kaas-headless"
)

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard()) // client-go's logs would fill the test output
	m.Run()
}

func newFence(t *testing.T, client kubernetes.Interface, self int32, size int, identity string) *Fence {
	t.Helper()
	return newFenceFor(t, client, self, size, identity, 2*time.Second) // 2 s: a loaded machine delays renewals
}

// newFenceFor is a fence with lease duration d, renewing five times per lease.
func newFenceFor(t *testing.T, client kubernetes.Interface, self int32, size int, identity string, d time.Duration) *Fence {
	t.Helper()
	f, err := New(Config{
		Client: client, Namespace: ns, Service: svc, Self: self, Size: size, Identity: identity,
		LeaseDuration: d, RenewInterval: d / 5, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func startFence(t *testing.T, f *Fence) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
}

// waitChange waits on f's Changes until cond holds (deadline 20 s).
func waitChange(t *testing.T, f *Fence, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-f.Changes():
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func lease(t *testing.T, client kubernetes.Interface, id int32) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), LeaseName(svc, id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func TestStartCreatesTheLeaseAndRenews(t *testing.T) {
	client := fake.NewClientset()
	f := newFence(t, client, 1, 3, "kaas-1_a")
	before := time.Now()
	startFence(t, f)
	if !fence.Valid(f) || f.Lapsed(1) {
		t.Fatal("started fence not valid")
	}
	if until := f.ValidUntil(); until.After(before.Add(2 * time.Second)) {
		t.Fatalf("ValidUntil %v beyond a lease duration after Start began (%v)", until, before)
	}
	l := lease(t, client, 1)
	if holder(l) != "kaas-1_a" || l.Labels[LabelService] != svc || *l.Spec.LeaseDurationSeconds != 2 {
		t.Fatalf("lease %+v", l)
	}

	// Renewals extend ValidUntil: watch the Lease change twice.
	w, err := client.CoordinationV1().Leases(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := f.ValidUntil()
	for n := 0; n < 2; {
		select {
		case ev := <-w.ResultChan():
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && l.Name == LeaseName(svc, 1) {
				n++
			}
		case <-time.After(20 * time.Second):
			t.Fatal("lease not renewed")
		}
	}
	// The watch may see a renewal's update before the fence has recorded it: wait for
	// the extension itself.
	deadline := time.After(20 * time.Second)
	for !f.ValidUntil().After(first) {
		select {
		case <-deadline:
			t.Fatalf("ValidUntil %v not extended past %v by renewals", f.ValidUntil(), first)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestHaltLosesTheLeaseAndPeersSeeItLapsed(t *testing.T) {
	client := fake.NewClientset()
	a := newFence(t, client, 0, 2, "kaas-0_a")
	b := newFence(t, client, 1, 2, "kaas-1_b")
	startFence(t, a)
	startFence(t, b)
	waitRenewing(t, a, 1)
	waitRenewing(t, b, 0)
	if a.Lapsed(1) || b.Lapsed(0) {
		t.Fatal("renewing peers seen lapsed")
	}

	b.Halt()
	waitChange(t, a, "b lapsed at a", func() bool { return a.Lapsed(1) })
	// The safety property: when a peer judges b lapsed, b's own permission has ended.
	if fence.Valid(b) {
		t.Fatalf("a sees b lapsed while b may still write (valid until %v)", b.ValidUntil())
	}
	waitChange(t, b, "b's own lease lost", func() bool { return !heldNow(b) })
	if !b.Lapsed(1) {
		t.Fatal("a lost lease is lapsed for its own broker")
	}
	if h := holder(lease(t, client, 1)); h != "" {
		t.Fatalf("lapsed lease still held by %q: the swap did not clear it", h)
	}
	if !fence.Valid(a) || a.Lapsed(0) || a.Epoch() != 0 || b.Lapsed(0) {
		t.Fatalf("a lost its own lease (epoch %d) or was seen lapsed while renewing", a.Epoch())
	}
}

func TestStopReleasesAndPeerSeesItAtOnce(t *testing.T) {
	client := fake.NewClientset()
	// Count the updates that clear lease 1's holder: a released lease needs no swap.
	var swaps atomic.Int32
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if l := act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); l.Name == LeaseName(svc, 1) && holder(l) == "" {
			swaps.Add(1)
		}
		return false, nil, nil
	})
	a := newFence(t, client, 0, 2, "kaas-0_a")
	b := newFence(t, client, 1, 2, "kaas-1_b")
	startFence(t, a)
	startFence(t, b)
	waitRenewing(t, a, 1)
	b.Stop()
	if !b.ValidUntil().IsZero() {
		t.Fatal("stopped fence still valid")
	}
	if h := holder(lease(t, client, 1)); h != "" {
		t.Fatalf("stopped fence did not release: holder %q", h)
	}
	waitChange(t, a, "released b lapsed at a", func() bool { return a.Lapsed(1) })
	if n := swaps.Load(); n != 1 { // the release itself, no swap by a
		t.Fatalf("%d holder-clearing updates, want the release only", n)
	}
}

func TestAbsentPeerLeaseIsLapsedOnceSynced(t *testing.T) {
	client := fake.NewClientset()
	a := newFence(t, client, 0, 3, "kaas-0_a")
	if a.Lapsed(1) {
		t.Fatal("lapsed before the informer synced")
	}
	startFence(t, a)
	waitChange(t, a, "absent peers lapsed", func() bool { return a.Lapsed(1) && a.Lapsed(2) })
	if !a.Lapsed(7) || !a.Lapsed(-1) {
		t.Fatal("ids outside the cluster have no lease: lapsed")
	}
}

// TestSwapConflictMeansRenewed: when the swap that would confirm a lapse conflicts (the
// peer renewed after the version this broker saw), the peer is not lapsed yet; it is only
// after a later swap succeeds.
func TestSwapConflictMeansRenewed(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	var swaps []bool // per swap of lease 1: refused with a conflict?
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		l := act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if l.Name != LeaseName(svc, 1) || holder(l) != "" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		first := len(swaps) == 0
		swaps = append(swaps, first)
		if first {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name, nil)
		}
		return false, nil, nil
	})
	a := newFence(t, client, 0, 2, "kaas-0_a")
	b := newFence(t, client, 1, 2, "kaas-1_b")
	startFence(t, a)
	startFence(t, b)
	waitRenewing(t, a, 1)
	b.Halt()
	waitChange(t, a, "b lapsed at a", func() bool { return a.Lapsed(1) })
	mu.Lock()
	defer mu.Unlock()
	if len(swaps) < 2 || !swaps[0] || swaps[len(swaps)-1] {
		t.Fatalf("swaps %v: want a refused one, then the one that confirmed the lapse", swaps)
	}
}

// TestNewIncarnationWaitsForTheOldLease: a restarted broker (a new holder identity) does
// not hold its lease while its previous incarnation may still write.
func TestNewIncarnationWaitsForTheOldLease(t *testing.T) {
	client := fake.NewClientset()
	old := newFence(t, client, 0, 1, "kaas-0_old")
	startFence(t, old)
	old.Halt() // paused or cut off, not released
	next := newFence(t, client, 0, 1, "kaas-0_new")
	startFence(t, next)
	if fence.Valid(old) {
		t.Fatalf("new incarnation holds the lease while the old one is valid until %v", old.ValidUntil())
	}
	l := lease(t, client, 0)
	if holder(l) != "kaas-0_new" || *l.Spec.LeaseTransitions != 1 || next.Epoch() != 1 || old.Epoch() != 0 {
		t.Fatalf("holder %q transitions %d, epochs old %d new %d", holder(l), *l.Spec.LeaseTransitions, old.Epoch(), next.Epoch())
	}
}

func TestConfigChecks(t *testing.T) {
	client := fake.NewClientset()
	for _, c := range []Config{
		{Client: client, Namespace: ns, Service: svc, Size: 1, LeaseDuration: 1500 * time.Millisecond, RenewInterval: 100 * time.Millisecond},
		{Client: client, Namespace: ns, Service: svc, Size: 1, LeaseDuration: 500 * time.Millisecond, RenewInterval: 100 * time.Millisecond},
		{Client: client, Namespace: ns, Service: svc, Size: 1, LeaseDuration: time.Second, RenewInterval: 600 * time.Millisecond},
		{Client: client, Namespace: ns, Service: svc, Size: 1, Self: 1, LeaseDuration: time.Second, RenewInterval: 100 * time.Millisecond},
		{Client: client, Namespace: ns, Size: 1, LeaseDuration: time.Second, RenewInterval: 100 * time.Millisecond},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): want an error", c)
		}
	}
	f, err := New(Config{Client: client, Namespace: ns, Service: svc, Size: 1, LeaseDuration: 3 * time.Second, RenewInterval: 500 * time.Millisecond})
	if err != nil || f.cfg.Margin != 300*time.Millisecond || f.Identity() == "" {
		t.Fatalf("defaults: %v margin %v identity %q", err, f.cfg.Margin, f.Identity())
	}
}

// heldNow is the fence's reported state of its own lease (lease_lost has been reported
// once it is false).
func heldNow(f *Fence) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// waitRenewing waits until f has seen peer id's lease held (not lapsed).
func waitRenewing(t *testing.T, f *Fence, id int32) {
	t.Helper()
	waitChange(t, f, "peer seen renewing", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.synced && !f.peers[id]
	})
}

// TestRenewingPeerNeverLapses: peers that keep renewing are never judged lapsed, however
// long they run (three lease durations' worth of renewals here), and never swap each
// other's leases.
func TestRenewingPeerNeverLapses(t *testing.T) {
	client := fake.NewClientset()
	var swaps atomic.Int32
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if holder(act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "" {
			swaps.Add(1)
		}
		return false, nil, nil
	})
	w, err := client.CoordinationV1().Leases(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// 2 s leases: a renewal delayed by a loaded machine must not look like a lapse.
	a := newFenceFor(t, client, 0, 2, "kaas-0_a", 2*time.Second)
	b := newFenceFor(t, client, 1, 2, "kaas-1_b", 2*time.Second)
	startFence(t, a)
	startFence(t, b)
	waitRenewing(t, a, 1)
	waitRenewing(t, b, 0)
	var sawLapse atomic.Bool
	done := make(chan struct{})
	go func() { // watches a's and b's verdicts on every change
		for {
			select {
			case <-a.Changes():
			case <-b.Changes():
			case <-done:
				return
			}
			if a.Lapsed(1) || b.Lapsed(0) {
				sawLapse.Store(true)
			}
		}
	}()
	for n := 0; n < 30; { // 15 renewals of each lease at 400 ms: 6 s, three lease durations
		select {
		case <-w.ResultChan():
			n++
		case <-time.After(20 * time.Second):
			t.Fatal("leases not renewed")
		}
	}
	close(done)
	if sawLapse.Load() || a.Lapsed(1) || b.Lapsed(0) {
		t.Fatal("a renewing peer was judged lapsed")
	}
	if n := swaps.Load(); n != 0 || a.Epoch() != 0 || b.Epoch() != 0 {
		t.Fatalf("%d swaps, epochs %d %d: a renewing lease was taken", n, a.Epoch(), b.Epoch())
	}
}

// TestResumedAfterLapseGetsANewEpoch: a broker paused past its lease, judged lapsed by a
// peer, and then resumed holds its lease again only under a higher epoch, and reported
// the loss before (its ValidUntil passed while it was paused).
func TestResumedAfterLapseGetsANewEpoch(t *testing.T) {
	client := fake.NewClientset()
	a := newFence(t, client, 0, 2, "kaas-0_a")
	b := newFence(t, client, 1, 2, "kaas-1_b")
	startFence(t, a)
	startFence(t, b)
	waitRenewing(t, a, 1)
	before := b.Epoch()
	b.Halt()
	waitChange(t, a, "b lapsed at a", func() bool { return a.Lapsed(1) })
	waitChange(t, b, "b's loss reported", func() bool { return !heldNow(b) })
	b.Resume()
	waitChange(t, b, "b holds again", func() bool { return fence.Valid(b) })
	if b.Epoch() <= before {
		t.Fatalf("resumed broker's epoch %d, want above %d", b.Epoch(), before)
	}
	if l := lease(t, client, 1); holder(l) != "kaas-1_b" || int64(*l.Spec.LeaseTransitions) != b.Epoch() {
		t.Fatalf("lease holder %q transitions %d, fence epoch %d", holder(l), *l.Spec.LeaseTransitions, b.Epoch())
	}
	waitChange(t, a, "a sees b back", func() bool { return !a.Lapsed(1) })
}

// A broker beyond this fence's cluster size (scaled away by a helm upgrade that shrinks
// the cluster, still stopping) is watched through its Lease: not lapsed while it holds
// it, lapsed once it releases it. Before, any id beyond the size was lapsed.
func TestLeaseBeyondSizeWatched(t *testing.T) {
	client := fake.NewClientset()
	a := newFence(t, client, 0, 2, "kaas-0_a")
	c := newFence(t, client, 3, 4, "kaas-3_c")
	startFence(t, c)
	startFence(t, a)
	waitChange(t, a, "broker 3 alive at a", func() bool { return !a.Lapsed(3) })
	c.Stop()
	waitChange(t, a, "released broker 3 lapsed at a", func() bool { return a.Lapsed(3) })
}
