package deploytest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	helmkube "helm.sh/helm/v4/pkg/kube"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// helmConfig is helm's action configuration on the control plane, as the helm CLI makes
// it from a kubeconfig (release records in Secrets).
func helmConfig(t *testing.T, cp *controlPlane) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(true)
	kc, ns := cp.kubeconfig, namespace
	flags.KubeConfig, flags.Namespace = &kc, &ns
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

// TestHelmInstall installs the chart into a real control plane (kube-apiserver,
// controller-manager, scheduler, kwok as the kubelet): the StatefulSet's pods appear with
// the ordinal label the node id is read from, the real EndpointSlice controller publishes
// them under the headless Service the registry watches, a SubjectAccessReview confirms
// the ServiceAccount may do what the broker does and nothing else asked, kaas processes
// run as those pods discover each other and take their Leases with the ServiceAccount's
// token, an upgrade adds a broker that groups move to, and rollback and uninstall leave
// the data claim.
func TestHelmInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cp := startControlPlane(t)
	cs := cp.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A shareable volume for the claim to bind to (no kubelet mounts it).
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.invalid", Path: "/kaas"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := helmConfig(t, cp)

	// An existing claim that cannot be shared is refused at render time: the chart asks
	// the cluster for its access modes.
	if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "single-node"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := action.NewInstall(cfg)
	bad.ReleaseName, bad.Namespace = "refused", namespace
	bad.WaitStrategy, bad.Timeout = helmkube.HookOnlyStrategy, time.Minute
	if _, err := bad.RunWithContext(ctx, loadChart(t), parse(t, "persistence: {existingClaim: single-node}")); err == nil ||
		!strings.Contains(err.Error(), "must be ReadWriteMany") {
		t.Fatalf("install on a ReadWriteOnce existing claim: %v, want the chart's refusal", err)
	}

	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = releaseName, namespace
	inst.WaitStrategy, inst.Timeout = helmkube.HookOnlyStrategy, 2*time.Minute
	vals := parse(t, "persistence: {storageClass: \"-\"}")
	if _, err := inst.RunWithContext(ctx, loadChart(t), vals); err != nil {
		t.Fatalf("helm install: %v", err)
	}

	brokersUp(t, ctx, cs, 3)
	eventually(t, 60*time.Second, "the data claim bound", func() (bool, string) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, "kaas-data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
	pvc, err := cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, "kaas-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("service account may do what the broker does, and no more", func(t *testing.T) {
		sa := "system:serviceaccount:" + namespace + ":kaas"
		check := func(ns, group, res, verb string, want bool) {
			t.Helper()
			r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
				User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &authv1.ResourceAttributes{Namespace: ns, Group: group, Resource: res, Verb: verb},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != want {
				t.Errorf("%s %s %s.%s in %s: allowed %v, want %v (%s)", sa, verb, res, group, ns, r.Status.Allowed, want, r.Status.Reason)
			}
		}
		for _, v := range []string{"get", "list", "watch"} {
			check(namespace, "discovery.k8s.io", "endpointslices", v, true)
		}
		for _, v := range []string{"get", "list", "watch", "create", "update"} {
			check(namespace, "coordination.k8s.io", "leases", v, true)
		}
		check(namespace, "coordination.k8s.io", "leases", "delete", false)
		check(namespace, "discovery.k8s.io", "endpointslices", "create", false)
		check("default", "coordination.k8s.io", "leases", "get", false)
		check("default", "discovery.k8s.io", "endpointslices", "list", false)
		check(namespace, "", "secrets", "get", false)
		check(namespace, "", "pods", "list", false)
	})

	// kaas processes for the release's pods: discovery, leases and routing over three,
	// then the upgrade to four, rolled, moving groups to the new broker.
	runBrokersOnRelease(t, ctx, cp, cs, func() {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.WaitStrategy, up.Timeout = namespace, helmkube.HookOnlyStrategy, 2*time.Minute
		if _, err := up.RunWithContext(ctx, releaseName, loadChart(t), parse(t, "{replicas: 4, persistence: {storageClass: \"-\"}}")); err != nil {
			t.Fatalf("helm upgrade to 4 replicas: %v", err)
		}
		brokersUp(t, ctx, cs, 4)
	}, func() {
		rb := action.NewRollback(cfg)
		rb.Version, rb.WaitStrategy, rb.Timeout = 1, helmkube.HookOnlyStrategy, 2*time.Minute
		if err := rb.Run(releaseName); err != nil {
			t.Fatalf("helm rollback: %v", err)
		}
		sts, err := cs.AppsV1().StatefulSets(namespace).Get(ctx, "kaas", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *sts.Spec.Replicas != 3 || !containsArg(sts.Spec.Template.Spec.Containers[0].Args, "--cluster.size=3") {
			t.Fatalf("after rollback: replicas %d, args %v", *sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Args)
		}
	})

	sameClaim(t, ctx, cs, pvc, "rollback")

	un := action.NewUninstall(cfg)
	un.WaitStrategy, un.Timeout = helmkube.HookOnlyStrategy, 2*time.Minute
	res, err := un.Run(releaseName)
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if !strings.Contains(res.Info, "kaas-data") {
		t.Errorf("uninstall does not tell which resources it kept: %q", res.Info)
	}
	eventually(t, 60*time.Second, "the StatefulSet gone", func() (bool, string) {
		_, err := cs.AppsV1().StatefulSets(namespace).Get(ctx, "kaas", metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
	})
	sameClaim(t, ctx, cs, pvc, "uninstall")
}

// brokersUp waits for n broker pods Running and Ready, each labelled with its ordinal,
// and for the headless Service's EndpointSlices to list each of them by hostname.
func brokersUp(t *testing.T, ctx context.Context, cs kubernetes.Interface, n int) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("%d broker pods ready", n), func() (bool, string) {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=broker"})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ready := 0
		for _, p := range pods.Items {
			ok := p.Status.Phase == corev1.PodRunning
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					ok = ok && c.Status == corev1.ConditionTrue
				}
			}
			// The node id's source: the ordinal label on every pod.
			var ord int
			if _, err := fmt.Sscanf(p.Name, "kaas-%d", &ord); err != nil || p.Labels["apps.kubernetes.io/pod-index"] != fmt.Sprint(ord) {
				return false, fmt.Sprintf("pod %s labelled pod-index %q", p.Name, p.Labels["apps.kubernetes.io/pod-index"])
			}
			if ok {
				ready++
			}
			st := p.Name + ":" + string(p.Status.Phase)
			for _, c := range p.Status.Conditions {
				if c.Status != corev1.ConditionTrue && c.Message != "" {
					st += "(" + c.Message + ")"
				}
			}
			states = append(states, st)
		}
		return ready == n && len(pods.Items) == n, strings.Join(states, " ")
	})
	eventually(t, 60*time.Second, fmt.Sprintf("EndpointSlices of kaas-headless listing %d brokers", n), func() (bool, string) {
		slices, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kaas-headless"})
		if err != nil {
			return false, err.Error()
		}
		var hosts []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				serving := e.Conditions.Serving != nil && *e.Conditions.Serving
				if e.Hostname != nil && serving && len(e.Addresses) > 0 && strings.HasPrefix(e.Addresses[0], "10.244.") {
					hosts = append(hosts, *e.Hostname)
				}
			}
		}
		sort.Strings(hosts)
		var want []string
		for i := 0; i < n; i++ {
			want = append(want, fmt.Sprintf("kaas-%d", i))
		}
		sort.Strings(want)
		return strings.Join(hosts, ",") == strings.Join(want, ","), strings.Join(hosts, ",")
	})
}

func sameClaim(t *testing.T, ctx context.Context, cs kubernetes.Interface, before *corev1.PersistentVolumeClaim, after string) {
	t.Helper()
	pvc, err := cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after %s: the data claim: %v", after, err)
	}
	if pvc.UID != before.UID || pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName != "shared" {
		t.Fatalf("after %s: claim %s uid %s (was %s), deleting %v, volume %q", after, pvc.Name, pvc.UID, before.UID, pvc.DeletionTimestamp, pvc.Spec.VolumeName)
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}
