package deploytest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kaas/broker/brokertest"
	"kaas/config"
	"kaas/registry"
)

// chart is one rendering with its main objects at hand.
type rendered struct {
	objs     map[string]object
	sts      *appsv1.StatefulSet
	headless *corev1.Service
	client   *corev1.Service
	cm       *corev1.ConfigMap
	broker   corev1.Container
}

func renderChart(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	r := rendered{objs: manifests(t, vals)}
	r.sts = get[*appsv1.StatefulSet](t, r.objs, "StatefulSet", "kaas")
	r.headless = get[*corev1.Service](t, r.objs, "Service", "kaas-headless")
	r.client = get[*corev1.Service](t, r.objs, "Service", "kaas")
	r.cm = get[*corev1.ConfigMap](t, r.objs, "ConfigMap", "kaas")
	if n := len(r.sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want the broker alone", n)
	}
	r.broker = r.sts.Spec.Template.Spec.Containers[0]
	return r
}

// podEnv is the environment the kubelet gives the broker of ordinal i: the ConfigMap
// (envFrom), then env (which wins), the downward API resolved as the StatefulSet
// controller labels the pod.
func (r rendered) podEnv(t *testing.T, i int) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range r.broker.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != r.cm.Name {
			t.Fatalf("envFrom %+v: want the chart's ConfigMap %s", from, r.cm.Name)
		}
		for k, v := range r.cm.Data {
			env[k] = v
		}
	}
	podName := fmt.Sprintf("%s-%d", r.sts.Name, i)
	fields := map[string]string{
		"metadata.name":      podName,
		"metadata.namespace": namespace,
		// What the StatefulSet controller sets on each pod (Kubernetes 1.28+).
		"metadata.labels['apps.kubernetes.io/pod-index']":       strconv.Itoa(i),
		"metadata.labels['statefulset.kubernetes.io/pod-name']": podName,
	}
	for _, e := range r.broker.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s from field %q, which this test does not know the kubelet to set", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			t.Fatalf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	return env
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) with VAR's value as the kubelet does (a reference to an
// undefined variable stays as written).
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// brokerConfig is the broker's configuration in pod i, parsed by the broker's own
// config package from the rendered command line and environment.
func (r rendered) brokerConfig(t *testing.T, i int) config.Config {
	t.Helper()
	env := r.podEnv(t, i)
	var args []string
	for _, a := range r.broker.Args {
		args = append(args, expand(a, env))
	}
	if len(r.broker.Command) > 0 {
		t.Fatalf("command %v overrides the image's entrypoint", r.broker.Command)
	}
	cfg, err := config.Parse(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("pod %d: the broker refuses its settings: %v\nargs %q", i, err, args)
	}
	return cfg
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

// TestBrokerSettings: in every values file, every pod's broker accepts its settings, its
// node id is its ordinal, its registry is the headless Service, and what it binds is what
// the pod and the Services declare.
func TestBrokerSettings(t *testing.T) {
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			r := renderChart(t, valuesFile(t, name))
			replicas := int(*r.sts.Spec.Replicas)
			if r.sts.Spec.ServiceName != r.headless.Name {
				t.Errorf("serviceName %q, want the headless Service %q", r.sts.Spec.ServiceName, r.headless.Name)
			}
			if r.headless.Spec.ClusterIP != corev1.ClusterIPNone || !r.headless.Spec.PublishNotReadyAddresses {
				t.Errorf("headless Service: clusterIP %q publishNotReadyAddresses %v", r.headless.Spec.ClusterIP, r.headless.Spec.PublishNotReadyAddresses)
			}
			if r.sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy %q, want Parallel", r.sts.Spec.PodManagementPolicy)
			}
			kafka, httpPort := containerPort(t, r.broker, "kafka"), containerPort(t, r.broker, "http")
			dataMount := ""
			for _, m := range r.broker.VolumeMounts {
				if m.Name == "data" {
					dataMount = m.MountPath
				}
			}
			for i := 0; i < replicas; i++ {
				cfg := r.brokerConfig(t, i)
				if cfg.NodeID != int32(i) {
					t.Errorf("pod %d: node.id %d", i, cfg.NodeID)
				}
				if cfg.Registry != "kubernetes" || cfg.RegistryService != r.headless.Name || cfg.RegistryNamespace != namespace || cfg.ClusterSize != replicas {
					t.Errorf("pod %d: registry %q service %q namespace %q size %d; want kubernetes %q %q %d",
						i, cfg.Registry, cfg.RegistryService, cfg.RegistryNamespace, cfg.ClusterSize, r.headless.Name, namespace, replicas)
				}
				if len(cfg.Listeners) != 1 || cfg.Listeners[0].Port != int(kafka) || cfg.Listeners[0].Host != "0.0.0.0" {
					t.Errorf("pod %d: listeners %v, want PLAINTEXT on 0.0.0.0:%d", i, cfg.Listeners, kafka)
				}
				adv := cfg.Advertised("PLAINTEXT", 0)
				wantHost := fmt.Sprintf("%s-%d.%s.%s.svc", r.sts.Name, i, r.headless.Name, namespace)
				if adv.Host != wantHost || adv.Port != int(kafka) {
					t.Errorf("pod %d: advertises %s:%d, want %s:%d (its name under the headless Service)", i, adv.Host, adv.Port, wantHost, kafka)
				}
				if cfg.HTTPListen != fmt.Sprintf("0.0.0.0:%d", httpPort) {
					t.Errorf("pod %d: http.listen %q, want the http port %d", i, cfg.HTTPListen, httpPort)
				}
				if cfg.DataDir != dataMount || dataMount == "" {
					t.Errorf("pod %d: data.dir %q, data volume mounted at %q", i, cfg.DataDir, dataMount)
				}
				// The grace period covers the stop and the broker's forced-exit second.
				grace := time.Duration(*r.sts.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
				if cfg.ShutdownTimeout+time.Second >= grace {
					t.Errorf("pod %d: terminationGracePeriodSeconds %v does not cover shutdown.timeout.ms %v", i, grace, cfg.ShutdownTimeout)
				}
			}
			// The node id comes from the pod's ordinal label, nothing else.
			var fromLabel bool
			for _, e := range r.broker.Env {
				if e.Name == "KAAS_NODE_ID" {
					fromLabel = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
						e.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']"
				}
			}
			if !fromLabel {
				t.Errorf("KAAS_NODE_ID is not taken from the pod-index label: %+v", r.broker.Env)
			}
			for _, svc := range []*corev1.Service{r.headless, r.client} {
				for _, p := range svc.Spec.Ports {
					if p.TargetPort.Type != intstr.String || (p.TargetPort.StrVal != "kafka" && p.TargetPort.StrVal != "http") {
						t.Errorf("Service %s port %s targets %v, want a named container port", svc.Name, p.Name, p.TargetPort)
					}
				}
			}
		})
	}
}

// TestSelectors: every selector of the chart picks the broker pods, and only them.
func TestSelectors(t *testing.T) {
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			r := renderChart(t, valuesFile(t, name))
			pod := labels.Set(r.sts.Spec.Template.Labels)
			test := labels.Set(get[*corev1.Pod](t, r.objs, "Pod", "kaas-test-probe").Labels)
			must := func(what string, sel labels.Selector) {
				t.Helper()
				if sel.Empty() || !sel.Matches(pod) {
					t.Errorf("%s %q does not select the broker pods %v", what, sel, pod)
				}
				if sel.Matches(test) {
					t.Errorf("%s %q selects the test pod too", what, sel)
				}
			}
			sts, err := metav1.LabelSelectorAsSelector(r.sts.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			must("StatefulSet selector", sts)
			must("headless Service selector", labels.SelectorFromSet(r.headless.Spec.Selector))
			must("client Service selector", labels.SelectorFromSet(r.client.Spec.Selector))
			for _, c := range r.sts.Spec.Template.Spec.TopologySpreadConstraints {
				s, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
				if err != nil {
					t.Fatal(err)
				}
				must("topology spread", s)
			}
			if o, ok := r.objs["PodDisruptionBudget/kaas"]; ok {
				s, err := metav1.LabelSelectorAsSelector(o.obj.(*policyv1.PodDisruptionBudget).Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				must("PodDisruptionBudget", s)
			}
			if o, ok := r.objs["ServiceMonitor/kaas"]; ok {
				sm := o.obj.(*monitoringv1.ServiceMonitor)
				s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if !s.Matches(labels.Set(r.headless.Labels)) || s.Matches(labels.Set(r.client.Labels)) {
					t.Errorf("ServiceMonitor selector %q: want the headless Service (every pod) and not the client one", s)
				}
				if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
				}
			}
		})
	}
}

// TestProbesHitRealEndpoints: each probe's path answers 200 on a running broker's HTTP
// port, and the probe names the container port the broker's http.listen binds.
func TestProbesHitRealEndpoints(t *testing.T) {
	r := renderChart(t, nil)
	b := brokertest.Start(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" })
	base := "http://" + b.HTTPAddr()
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/no-such-endpoint"); got != http.StatusNotFound {
		t.Fatalf("an unserved path answers %d; the check below could not fail", got)
	}
	probes := map[string]*corev1.Probe{"startup": r.broker.StartupProbe, "readiness": r.broker.ReadinessProbe, "liveness": r.broker.LivenessProbe}
	paths := map[string]string{}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("%s probe %+v: want an HTTP GET", name, p)
		}
		if p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe on port %s, want the http port", name, p.HTTPGet.Port.String())
		}
		if got := status(p.HTTPGet.Path); got != http.StatusOK {
			t.Errorf("%s probe GET %s: %d on a running broker", name, p.HTTPGet.Path, got)
		}
		paths[name] = p.HTTPGet.Path
	}
	// Readiness is the broker's own readiness; liveness and startup only that it serves.
	if paths["readiness"] != "/readyz" || paths["liveness"] != "/healthz" || paths["startup"] != "/healthz" {
		t.Errorf("probe paths %v", paths)
	}
}

// TestRBAC: the Role grants exactly what the broker calls, namespaced, bound to the pods'
// ServiceAccount.
func TestRBAC(t *testing.T) {
	// What the broker calls: the kubernetes registry's informer on the headless Service's
	// EndpointSlices, and each broker's Lease (<service>-broker-<id>), renewed and read
	// through client-go's resourcelock.
	want := map[string][]string{
		"discovery.k8s.io/endpointslices": {"get", "list", "watch"},
		"coordination.k8s.io/leases":      {"create", "get", "list", "update", "watch"},
	}
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			r := renderChart(t, valuesFile(t, name))
			role := get[*rbacv1.Role](t, r.objs, "Role", "kaas")
			got := map[string][]string{}
			for _, rule := range role.Rules {
				if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
					t.Errorf("rule %+v: unexpected resourceNames or URLs", rule)
				}
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						k := g + "/" + res
						got[k] = append(got[k], rule.Verbs...)
						sort.Strings(got[k])
					}
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Role grants %v, want exactly %v", got, want)
			}
			for _, o := range r.objs {
				if _, ok := o.obj.(*rbacv1.ClusterRole); ok {
					t.Errorf("%s: a ClusterRole; the broker needs its namespace only", o.source)
				}
			}
			rb := get[*rbacv1.RoleBinding](t, r.objs, "RoleBinding", "kaas")
			sa := r.sts.Spec.Template.Spec.ServiceAccountName
			if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
				rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != namespace {
				t.Errorf("RoleBinding %+v does not bind Role %s to the pods' ServiceAccount %s", rb, role.Name, sa)
			}
			_, made := r.objs["ServiceAccount/"+sa]
			sav, _ := valuesFile(t, name)["serviceAccount"].(map[string]any)
			if wantMade := sav["create"] != false; made != wantMade {
				t.Errorf("ServiceAccount %s rendered: %v, want %v", sa, made, wantMade)
			}
		})
	}
}

// TestPodHardening: non-root, read-only root, no privilege escalation, no capabilities,
// resources set, and the data on the one shared claim.
func TestPodHardening(t *testing.T) {
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			r := renderChart(t, valuesFile(t, name))
			spec := r.sts.Spec.Template.Spec
			psc, sc := spec.SecurityContext, r.broker.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("pod securityContext %+v: want a non-root user", psc)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container securityContext %+v", sc)
			}
			if r.broker.Resources.Requests.Cpu().IsZero() || r.broker.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want requests and a memory limit", r.broker.Resources)
			}
			if len(spec.TopologySpreadConstraints) != 1 {
				t.Errorf("topology spread %+v", spec.TopologySpreadConstraints)
			}
			claim := ""
			for _, v := range spec.Volumes {
				if v.Name == "data" && v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
			if len(r.sts.Spec.VolumeClaimTemplates) > 0 {
				t.Errorf("volumeClaimTemplates give each pod its own volume; the brokers share one")
			}
			pv, _ := valuesFile(t, name)["persistence"].(map[string]any)
			existing, _ := pv["existingClaim"].(string)
			if existing != "" {
				if claim != existing {
					t.Errorf("data claim %q, want the existing %q", claim, existing)
				}
				for k := range r.objs {
					if strings.HasPrefix(k, "PersistentVolumeClaim/") {
						t.Errorf("%s rendered beside an existing claim", k)
					}
				}
				return
			}
			pvc := get[*corev1.PersistentVolumeClaim](t, r.objs, "PersistentVolumeClaim", claim)
			if !reflect.DeepEqual(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
				t.Errorf("claim access modes %v, want ReadWriteMany", pvc.Spec.AccessModes)
			}
		})
	}
}

// TestDefaults: the default image is the one `make image` builds, the claim survives
// uninstall, and the test hook is a `kaas groups probe` on the client Service.
func TestDefaults(t *testing.T) {
	r := renderChart(t, nil)
	if r.broker.Image != "kaas:latest" {
		t.Errorf("image %q, want kaas:latest (make image)", r.broker.Image)
	}
	pvc := get[*corev1.PersistentVolumeClaim](t, r.objs, "PersistentVolumeClaim", "kaas-data")
	if pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("claim annotations %v: want helm.sh/resource-policy keep", pvc.Annotations)
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, r.objs, "PodDisruptionBudget", "kaas")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB %+v, want maxUnavailable 1", pdb.Spec)
	}
	o := r.objs["Pod/kaas-test-probe"]
	pod := o.obj.(*corev1.Pod)
	if !o.hook || pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("test pod: hook %v annotations %v restart %s", o.hook, pod.Annotations, pod.Spec.RestartPolicy)
	}
	c := pod.Spec.Containers[0]
	bootstrap := fmt.Sprintf("--bootstrap-server=%s.%s.svc:%d", r.client.Name, namespace, containerPort(t, r.broker, "kafka"))
	if c.Image != r.broker.Image || len(c.Args) < 3 || c.Args[0] != "groups" || c.Args[1] != "probe" || !contains(c.Args, bootstrap) {
		t.Errorf("test pod runs %s %q, want the broker image's `groups probe %s`", c.Image, c.Args, bootstrap)
	}
	if _, ok := r.objs["ServiceMonitor/kaas"]; ok {
		t.Errorf("a ServiceMonitor by default; it needs the operator's CRDs")
	}
	if _, ok := r.objs["ConfigMap/kaas-assignment"]; ok {
		t.Errorf("an assignment ConfigMap without an assignment")
	}
	rel, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kaas.streams.svc:9092", "kaas-0.kaas-headless.streams.svc", "helm test kaas", "/kaas groups lag", "keeps the data claim kaas-data"} {
		if !strings.Contains(strings.ReplaceAll(rel.Info.Notes, "<pod>", "kaas-0"), want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, rel.Info.Notes)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestAssignment: an assignment.json in the values reaches the broker's data dir as a
// file the registry's parser accepts, and a change of it or of a setting rolls the pods.
func TestAssignment(t *testing.T) {
	vals := valuesFile(t, "full")
	r := renderChart(t, vals)
	cm := get[*corev1.ConfigMap](t, r.objs, "ConfigMap", "kaas-assignment")
	a, err := registry.ParseAssignment([]byte(cm.Data[registry.AssignmentFile]), int(*r.sts.Spec.Replicas))
	if err != nil {
		t.Fatalf("the registry refuses the rendered assignment.json: %v\n%s", err, cm.Data[registry.AssignmentFile])
	}
	if len(a.ConsumerGroups) != 1 || a.ConsumerGroups[0].Group != "orders-app" || a.ConsumerGroups[0].Broker != 1 || len(a.Partitions) != 1 {
		t.Errorf("assignment %+v", a)
	}
	cfg := r.brokerConfig(t, 0)
	var mount *corev1.VolumeMount
	for i, m := range r.broker.VolumeMounts {
		if m.SubPath == registry.AssignmentFile {
			mount = &r.broker.VolumeMounts[i]
		}
	}
	want := cfg.DataDir + "/__cluster/" + registry.AssignmentFile
	if mount == nil || mount.MountPath != want || !mount.ReadOnly {
		t.Fatalf("assignment mount %+v, want read-only at %s", mount, want)
	}
	for _, v := range r.sts.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && (v.ConfigMap == nil || v.ConfigMap.Name != cm.Name) {
			t.Errorf("volume %s is %+v, want the ConfigMap %s", v.Name, v.VolumeSource, cm.Name)
		}
	}
	// The settings in the ConfigMap are what the broker reads.
	if cfg.GroupInitialRebalanceDelay != 0 || cfg.AutoCreateTopics || cfg.OffsetsRetention != 7*24*time.Hour {
		t.Errorf("settings from the ConfigMap not applied: delay %v auto-create %v retention %v",
			cfg.GroupInitialRebalanceDelay, cfg.AutoCreateTopics, cfg.OffsetsRetention)
	}

	sum := func(vals map[string]any) string {
		return renderChart(t, vals).sts.Spec.Template.Annotations["checksum/config"]
	}
	base := sum(valuesFile(t, "full"))
	if base == "" || sum(valuesFile(t, "full")) != base {
		t.Fatalf("checksum %q is not stable across renders", base)
	}
	moved := valuesFile(t, "full")
	moved["assignment"].(map[string]any)["consumerGroups"] = []any{map[string]any{"group": "orders-app", "broker": 2}}
	retuned := valuesFile(t, "full")
	retuned["config"].(map[string]any)["offsets.retention.minutes"] = "60"
	scaled := valuesFile(t, "full")
	scaled["replicas"] = 4
	if sum(moved) == base || sum(retuned) == base {
		t.Errorf("checksum/config unchanged by a new assignment or setting: the pods would not roll")
	}
	if sum(scaled) != base {
		t.Errorf("checksum/config changed by replicas alone")
	}
	h := sha256.Sum256([]byte("x"))
	if len(base) != len(hex.EncodeToString(h[:])) {
		t.Errorf("checksum %q is not a sha256", base)
	}
}

// TestRenderFails: settings that cannot work fail the render, each with its reason.
func TestRenderFails(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"read-write-once claim", "persistence: {accessModes: [ReadWriteOnce]}", "must be ReadWriteMany"},
		{"read-write-once-pod claim", "persistence: {accessModes: [ReadWriteOncePod]}", "must be ReadWriteMany"},
		{"read-only-many claim", "persistence: {accessModes: [ReadOnlyMany]}", "must be ReadWriteMany"},
		{"pdb min all", "podDisruptionBudget: {maxUnavailable: null, minAvailable: 3}", "allows no eviction"},
		{"pdb min more", "podDisruptionBudget: {maxUnavailable: null, minAvailable: 7}", "allows no eviction"},
		{"pdb min 100%", "podDisruptionBudget: {maxUnavailable: null, minAvailable: 100%}", "allows no eviction"},
		{"pdb min 90% of 3", "podDisruptionBudget: {maxUnavailable: null, minAvailable: 90%}", "allows no eviction"},
		{"pdb max 0", "podDisruptionBudget: {maxUnavailable: 0}", "allows no eviction"},
		{"pdb max 0%", "podDisruptionBudget: {maxUnavailable: 0%}", "allows no eviction"},
		{"pdb max 20% of 3", "podDisruptionBudget: {maxUnavailable: 20%}", "allows no eviction"},
		{"pdb min 1 of 1", "{replicas: 1, podDisruptionBudget: {maxUnavailable: null, minAvailable: 1}}", "allows no eviction"},
		{"pdb both", "podDisruptionBudget: {maxUnavailable: 1, minAvailable: 1}", "not both"},
		{"grace too short", "terminationGracePeriodSeconds: 9", "does not cover a graceful stop"},
		{"grace short of a long stop", "shutdownTimeoutMs: 60000", "does not cover a graceful stop"},
		{"lease renew too slow", "lease: {durationMs: 3000, renewIntervalMs: 2000}", "at most half"},
		{"reserved setting", "config: {node.id: \"4\"}", "the chart sets this setting itself"},
		{"reserved registry", "config: {registry: dev}", "the chart sets this setting itself"},
		{"bad setting key", "config: {NodeId: \"4\"}", "NodeId"},
		{"no replicas", "replicas: 0", "replicas"},
		{"unknown value", "replica: 3", "replica"},
		{"bad pull policy", "image: {repository: kaas, pullPolicy: Sometimes}", "pullPolicy"},
		{"bad assignment", "assignment: {version: 1, consumerGroups: [{group: g, node: 1}]}", "assignment"},
		{"ssl without a secret", "security: {protocol: SSL}", "needs security.tls.secretName"},
		{"tls secret on plaintext", "security: {tls: {secretName: t}}", "serves no TLS"},
		{"sasl users without a secret", "security: {protocol: SASL_PLAINTEXT, sasl: {users: [alice]}}", "needs security.sasl.usersSecret"},
		{"sasl users on plaintext", "security: {sasl: {users: [alice], usersSecret: u}}", "does not authenticate"},
		{"reserved authorizer", "config: {authorizer: simple}", "the chart sets this setting itself"},
		{"bad protocol", "security: {protocol: TLS}", "protocol"},
		{"inter-broker user on plaintext", "security: {sasl: {interBroker: {user: bob}}}", "does not authenticate"},
		{"inter-broker user not a user", "security: {protocol: SASL_PLAINTEXT, sasl: {usersSecret: u, users: [alice], interBroker: {user: bob}}}", "must be one of security.sasl.users"},
		{"inter-broker mechanism not enabled", "security: {protocol: SASL_PLAINTEXT, sasl: {mechanisms: SCRAM-SHA-256, usersSecret: u, users: [bob], interBroker: {user: bob, mechanism: SCRAM-SHA-512}}}", "is not one of security.sasl.mechanisms"},
		{"inter-broker password in values", "security: {protocol: SASL_PLAINTEXT, sasl: {usersSecret: u, users: [bob], interBroker: {user: bob, password: secret}}}", "password"},
		{"reserved inter-broker user", "config: {inter.broker.sasl.username: bob}", "the chart sets this setting itself"},
		{"reserved inter-broker password file", "config: {inter.broker.sasl.password.file: /tmp/p}", "the chart sets this setting itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(t, parse(t, c.values))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render with %s: error %s, want one containing %q", c.values, fmtErr(err), c.want)
			}
		})
	}
	// The edges that must still render.
	for _, ok := range []string{
		"podDisruptionBudget: {maxUnavailable: null, minAvailable: 2}",
		"podDisruptionBudget: {maxUnavailable: 34%}",
		"{replicas: 1, podDisruptionBudget: {maxUnavailable: 1}}",
		"podDisruptionBudget: {enabled: false, maxUnavailable: 0}",
		"terminationGracePeriodSeconds: 11",
		"persistence: {accessModes: [ReadWriteMany, ReadWriteOnce]}",
		"persistence: {existingClaim: mine, accessModes: [ReadWriteOnce]}",
	} {
		if _, err := render(t, parse(t, ok)); err != nil {
			t.Errorf("render with %s: %v", ok, err)
		}
	}
}

// TestSecurity: the security values become the broker's settings, the TLS Secret is
// mounted where they point, and each SASL user gets an init container that writes its
// credentials from the users Secret without a shell.
func TestSecurity(t *testing.T) {
	r := renderChart(t, valuesFile(t, "secure"))
	cfg := r.brokerConfig(t, 0)
	if got := cfg.SecurityProtocolMap["PLAINTEXT"]; got != "SASL_SSL" {
		t.Errorf("listener protocol %q, want SASL_SSL", got)
	}
	if cfg.SSLCertificateLocation != "/etc/kaas/tls/tls.crt" || cfg.SSLKeyLocation != "/etc/kaas/tls/tls.key" ||
		cfg.SSLTruststoreLocation != "/etc/kaas/tls/ca.crt" || cfg.SSLClientAuth != "required" {
		t.Errorf("ssl settings %q %q %q %q", cfg.SSLCertificateLocation, cfg.SSLKeyLocation, cfg.SSLTruststoreLocation, cfg.SSLClientAuth)
	}
	if cfg.Authorizer != "simple" || cfg.SuperUsers != "User:admin;User:CN=ops;User:bob" {
		t.Errorf("authorizer %q super users %q", cfg.Authorizer, cfg.SuperUsers)
	}
	mounted := map[string]string{}
	for _, m := range r.broker.VolumeMounts {
		mounted[m.Name] = m.MountPath
	}
	if mounted["tls"] != "/etc/kaas/tls" {
		t.Errorf("tls mounted at %q", mounted["tls"])
	}
	if _, ok := mounted["users"]; ok {
		t.Errorf("every user's password mounted into the broker, want the inter-broker user's alone")
	}
	secrets := map[string]string{}
	for _, v := range r.sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	if secrets["tls"] != "kaas-tls" || secrets["users"] != "kaas-users" || secrets["inter-broker"] != "kaas-users" {
		t.Errorf("secret volumes %v", secrets)
	}
	// The inter-broker user: its mechanism and name as settings, its password a file
	// holding the one key of the users Secret, mounted where the setting points; the
	// password itself nowhere in the rendering.
	if cfg.InterBrokerSASLMechanism != "SCRAM-SHA-512" || cfg.InterBrokerSASLUsername != "bob" ||
		cfg.InterBrokerSASLPasswordFile != "/etc/kaas/inter-broker/password" {
		t.Errorf("inter-broker settings %q %q %q", cfg.InterBrokerSASLMechanism, cfg.InterBrokerSASLUsername, cfg.InterBrokerSASLPasswordFile)
	}
	if mounted["inter-broker"] != "/etc/kaas/inter-broker" {
		t.Errorf("inter-broker password mounted at %q", mounted["inter-broker"])
	}
	for _, v := range r.sts.Spec.Template.Spec.Volumes {
		if v.Name != "inter-broker" {
			continue
		}
		if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "bob" || v.Secret.Items[0].Path != "password" {
			t.Errorf("inter-broker volume items %+v, want bob's key as password", v.Secret.Items)
		}
	}
	for _, init := range r.sts.Spec.Template.Spec.InitContainers {
		for _, m := range init.VolumeMounts {
			if m.Name == "inter-broker" {
				t.Errorf("init container %s mounts the inter-broker password", init.Name)
			}
		}
	}
	inits := r.sts.Spec.Template.Spec.InitContainers
	if len(inits) != 2 {
		t.Fatalf("%d init containers, want one per SASL user", len(inits))
	}
	for i, user := range []string{"alice", "bob"} {
		args := strings.Join(inits[i].Args, " ")
		want := "users set " + user + " --data.dir=/data --mechanisms=SCRAM-SHA-512 --password-file=/etc/kaas/users/" + user
		if args != want || inits[i].Image != r.broker.Image || len(inits[i].Command) != 0 {
			t.Errorf("init container %d: %q image %q command %v, want %q in the broker's image", i, args, inits[i].Image, inits[i].Command, want)
		}
	}
	// By default: PLAINTEXT, no authorizer, no init container.
	d := renderChart(t, valuesFile(t, ""))
	if dc := d.brokerConfig(t, 0); dc.SecurityProtocolMap["PLAINTEXT"] != "PLAINTEXT" || dc.Authorizer != "" {
		t.Errorf("defaults: protocol %q authorizer %q", dc.SecurityProtocolMap["PLAINTEXT"], dc.Authorizer)
	}
	if n := len(d.sts.Spec.Template.Spec.InitContainers); n != 0 {
		t.Errorf("defaults: %d init containers", n)
	}
	if dc := d.brokerConfig(t, 0); dc.InterBrokerSASLUsername != "" || dc.InterBrokerSASLPasswordFile != "" {
		t.Errorf("defaults: inter-broker user %q password file %q", dc.InterBrokerSASLUsername, dc.InterBrokerSASLPasswordFile)
	}
}

func TestMain(m *testing.M) {
	// helm's Install reads the environment for its own settings; keep the user's out.
	for _, k := range []string{"HELM_NAMESPACE", "HELM_DRIVER", "KUBECONFIG"} {
		os.Unsetenv(k)
	}
	os.Exit(m.Run())
}
