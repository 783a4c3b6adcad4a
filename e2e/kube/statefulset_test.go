package kube

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"kaas/registry"
	kubereg "kaas/registry/kube"
)

// TestStatefulSetSlicesFromTheRealController: a StatefulSet's pods, played by kwok, get
// EndpointSlices from the real endpointslice controller; the registry reads them as the
// brokers 0..2 by ordinal. A pod whose readiness fails stays `ready` in the slice (the
// Service publishes not-ready addresses) but not `serving`, and its broker is dead;
// scaling down removes the last ordinal.
func TestStatefulSetSlicesFromTheRealController(t *testing.T) {
	c := Start(t, Options{Controllers: true})
	cs := c.Client(t)
	ctx := context.Background()
	t.Cleanup(func() { // after a failure: what the controllers made
		if !t.Failed() {
			return
		}
		pods, _ := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s node %q phase %s ip %s conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
		}
		sls, _ := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		for _, sl := range sls.Items {
			t.Logf("slice %s labels %v endpoints %d", sl.Name, sl.Labels, len(sl.Endpoints))
		}
		evs, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	})
	mustNamespace(t, cs)
	labels := map[string]string{"app": sts}
	HeadlessService(t, cs, ns, svc, sts)
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: sts, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(3)), ServiceName: svc, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"type": "kwok"},
					Containers: []corev1.Container{{
						Name: "kaas", Image: "kaas:e2e",
						Ports: []corev1.ContainerPort{{Name: "kafka", ContainerPort: 9092}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9092)}}},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	mapped := map[int32]string{} // ordinal -> pod name the registry handed the mapper
	mapper := func(pod string, ord int32, ep discoveryv1.Endpoint) (map[string]registry.Endpoint, error) {
		mu.Lock()
		mapped[ord] = pod
		mu.Unlock()
		return loopback(pod, ord, ep)
	}
	reg := registry.New(0, 3)
	src, err := kubereg.New(kubereg.Config{Client: cs, Namespace: ns, Service: svc, Size: 3, Mapper: mapper,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(sctx, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	})

	waitRegistryFor(t, reg, []int32{0, 1, 2}, 90*time.Second)
	mu.Lock()
	for i := int32(0); i < 3; i++ {
		if mapped[i] != fmt.Sprintf("%s-%d", sts, i) {
			t.Errorf("ordinal %d mapped from pod %q", i, mapped[i])
		}
	}
	mu.Unlock()

	// kaas-1's readiness fails.
	setReady(t, ctx, c, "kaas-1", false)
	waitRegistryFor(t, reg, []int32{0, 2}, 60*time.Second)
	ep := endpointOf(t, ctx, c, "kaas-1")
	if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || ep.Conditions.Serving == nil || *ep.Conditions.Serving {
		t.Fatalf("kaas-1 conditions %+v: want ready (publishNotReadyAddresses) and not serving", ep.Conditions)
	}
	setReady(t, ctx, c, "kaas-1", true)
	waitRegistryFor(t, reg, []int32{0, 1, 2}, 60*time.Second)

	// Scale down: kaas-2 terminates, then goes (kwok takes 30-40 s for the delete).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := cs.AppsV1().StatefulSets(ns).Get(ctx, sts, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = ptr(int32(2))
		_, err = cs.AppsV1().StatefulSets(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitRegistryFor(t, reg, []int32{0, 1}, 120*time.Second)
	if n := len(reg.All()); n != 3 {
		t.Fatalf("%d brokers listed, want the full set of 3", n)
	}
}

// setReady sets a pod's Ready condition, as a kubelet would when its readiness probe
// fails or passes again (kwok plays a pod Ready once, while it is Pending, and leaves it).
func setReady(t *testing.T, ctx context.Context, c *Cluster, pod string, ready bool) {
	t.Helper()
	cs := c.Client(t)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = status
				p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("set %s ready=%v: %v", pod, ready, err)
	}
}

// endpointOf is pod's endpoint in the Service's slices.
func endpointOf(t *testing.T, ctx context.Context, c *Cluster, pod string) discoveryv1.Endpoint {
	t.Helper()
	sls, err := c.Client(t).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range sls.Items {
		for _, ep := range sl.Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Name == pod {
				return ep
			}
		}
	}
	t.Fatalf("no endpoint of %s in %d slices", pod, len(sls.Items))
	return discoveryv1.Endpoint{}
}
