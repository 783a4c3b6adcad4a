// Package deploytest checks what kaas ships for deployment: the Helm chart (lint, render,
// strict decoding into the Kubernetes API types, the assertions that matter) and the
// Grafana dashboard (every query names a metric a running broker exports). It is a module
// of its own so helm's and Prometheus' dependency trees stay out of kaas's go.mod.
package deploytest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../helm/kaas"
	releaseName = "kaas"
	namespace   = "streams"
)

// kubeVersion is the Kubernetes the checks render for: the release the project builds
// its control plane from (helm's own default, read from its build, is v1.20 in a test
// binary).
func kubeVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	v, err := common.ParseKubeVersion("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// decoder strict-decodes manifests: an unknown field, a duplicate field, a wrong type or
// an unknown kind is an error.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// valuesFile reads testdata/<name>.yaml ("" : the chart's defaults).
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if name == "" {
		return vals
	}
	raw, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return vals
}

// parse reads YAML values written inline in a test.
func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &vals); err != nil {
		t.Fatalf("values %q: %v", s, err)
	}
	return vals
}

// render renders the chart as `helm template` does (a client-side dry-run install),
// hooks included.
func render(t *testing.T, vals map[string]any) (*release.Release, error) {
	t.Helper()
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: common.DefaultCapabilities,
	}
	inst := action.NewInstall(cfg)
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName = releaseName
	inst.Namespace = namespace
	inst.Replace = true
	inst.KubeVersion = kubeVersion(t)
	rel, err := inst.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		t.Fatalf("release is a %T", rel)
	}
	return r, nil
}

// object is one rendered document, decoded into its API type.
type object struct {
	source string
	gvk    schema.GroupVersionKind
	obj    runtime.Object
	hook   bool
}

// manifests renders vals and strict-decodes every document, failing the test on any.
func manifests(t *testing.T, vals map[string]any) map[string]object {
	t.Helper()
	rel, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	out := map[string]object{}
	add := func(source, doc string, hook bool) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			return
		}
		obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: strict decode: %v\n%s", source, err, doc)
		}
		key := gvk.Kind + "/" + obj.(interface{ GetName() string }).GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s rendered twice", source, key)
		}
		out[key] = object{source, *gvk, obj, hook}
	}
	for _, doc := range splitDocs(rel.Manifest) {
		add(sourceOf(doc), doc, false)
	}
	for _, h := range rel.Hooks {
		add(h.Path, h.Manifest, true)
	}
	return out
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func splitDocs(s string) []string { return docSep.Split(s, -1) }

func sourceOf(doc string) string {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "# Source: ") {
			return strings.TrimPrefix(l, "# Source: ")
		}
	}
	return "?"
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func get[T runtime.Object](t *testing.T, objs map[string]object, kind, name string) T {
	t.Helper()
	o, ok := objs[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s among %v", kind, name, keys(objs))
	}
	v, ok := o.obj.(T)
	if !ok {
		t.Fatalf("%s %s decoded as %T", kind, name, o.obj)
	}
	return v
}

func keys(objs map[string]object) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// valueFiles are the values files every chart-wide check runs over: the defaults, and
// the files under testdata/.
func valueFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{""}
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	if len(names) < 4 {
		t.Fatalf("values files %v: want several", names)
	}
	return names
}

func label(name string) string {
	if name == "" {
		return "defaults"
	}
	return name
}

// TestLintStrict is `helm lint --strict` for each values file: warnings fail too.
func TestLintStrict(t *testing.T) {
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = namespace
			l.KubeVersion = kubeVersion(t)
			res := l.Run([]string{chartDir}, valuesFile(t, name))
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
				t.Fatalf("lint --strict: %d charts, errors %v", res.TotalChartsLinted, res.Errors)
			}
		})
	}
}

// TestRenderStrict renders each values file and strict-decodes every manifest; each must
// hold the objects the chart promises.
func TestRenderStrict(t *testing.T) {
	for _, name := range valueFiles(t) {
		t.Run(label(name), func(t *testing.T) {
			objs := manifests(t, valuesFile(t, name))
			for _, want := range []string{"StatefulSet/kaas", "Service/kaas", "Service/kaas-headless", "ConfigMap/kaas",
				"Role/kaas", "RoleBinding/kaas", "Pod/kaas-test-probe"} {
				if _, ok := objs[want]; !ok {
					t.Errorf("no %s among %v", want, keys(objs))
				}
			}
			for k, o := range objs {
				meta := o.obj.(interface{ GetNamespace() string })
				if meta.GetNamespace() != namespace {
					t.Errorf("%s (%s) in namespace %q, want %q", k, o.source, meta.GetNamespace(), namespace)
				}
			}
		})
	}
}

// TestStrictDecoderRefuses proves the decoder the checks rely on refuses what it must.
func TestStrictDecoderRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: 80}\n",
		"unknown kind":  "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
		"duplicate":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
	} {
		if _, _, err := decoder.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprint(err)
}
