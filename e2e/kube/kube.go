// Package kube runs a real Kubernetes control plane for tests, without containers: etcd
// and kube-apiserver (v1.37.2, built by hack/k8sbin/build.sh into
// ${KAAS_TOOLS_CACHE:-$HOME/.cache/kaas-tools}/k8s-v1.37.2/) as processes on 127.0.0.1
// free ports, every wait under a deadline, stopped by PID (the apiserver before etcd).
// Start hands back a rest.Config and a kubeconfig file of an admin (system:masters).
//
// Binaries missing: the harness never builds them (`make k8sbin` does, ~15-20 min cold). A
// test then skips, naming `make k8sbin`; under KAAS_REQUIRE_K8S=1 (`make test`, after its
// k8sbin step) it fails instead. KAAS_SKIP_K8S=1 skips this tier explicitly, and says so.
//
// A real apiserver refuses loopback addresses in EndpointSlices: slices in tests carry fake
// pod IPs (10.244.x) and tests map pods to loopback ports by ordinal; no test dials an
// address read from a slice.
package kube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Version is the Kubernetes release the binaries are built from.
const Version = "v1.37.2"

// BinDir returns the directory of the control-plane binaries. It never builds them: that
// is `make k8sbin`'s job (hack/k8sbin/build.sh, ~15-20 min cold), so a plain `go test ./...`
// does not start a Kubernetes build. Missing, they skip the test with a message naming
// `make k8sbin`, unless KAAS_REQUIRE_K8S=1 (set by `make test`, which ran k8sbin first):
// then a missing binary fails it. KAAS_SKIP_K8S=1 skips the tier explicitly.
func BinDir(t testing.TB) string {
	t.Helper()
	if os.Getenv("KAAS_SKIP_K8S") == "1" {
		t.Skip("KAAS_SKIP_K8S=1: the real-apiserver tier is skipped on request (unset it to run it; `make k8sbin` builds the binaries)")
	}
	dir := cacheDir()
	if missing := missingBins(dir); missing != "" {
		msg := fmt.Sprintf("kubernetes %s test binaries missing in %s (%s): build them with `make k8sbin` (hack/k8sbin/build.sh, ~15-20 min cold)", Version, dir, missing)
		if os.Getenv("KAAS_REQUIRE_K8S") == "1" {
			t.Fatalf("%s; KAAS_REQUIRE_K8S=1 (make test) makes this tier mandatory", msg)
		}
		t.Skipf("%s; the real-apiserver tier is SKIPPED (KAAS_REQUIRE_K8S=1 makes this a failure)", msg)
	}
	return dir
}

func cacheDir() string {
	root := os.Getenv("KAAS_TOOLS_CACHE")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".cache", "kaas-tools")
	}
	return filepath.Join(root, "k8s-"+Version)
}

// missingBins names what dir lacks of a complete build.sh output ("" when complete): the
// five binaries, and the kwok stages build.sh marks with kwok-stages/STAGES.
func missingBins(dir string) string {
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if stages, err := os.ReadFile(filepath.Join(dir, "kwok-stages", "STAGES")); err != nil || !strings.HasPrefix(string(stages), "fast ") {
		missing = append(missing, "kwok-stages")
	}
	return strings.Join(missing, ", ")
}

// Cluster is a running control plane.
type Cluster struct {
	Config     *rest.Config // an admin's
	Kubeconfig string       // the same, as a kubeconfig file
	Dir        string       // data and logs (<component>.log)

	t     testing.TB
	procs []*process // in start order; stopped in reverse
	once  sync.Once
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// Options chooses what runs beside etcd and the apiserver.
type Options struct {
	// Controllers adds the StatefulSet pipeline without a kubelet: kube-controller-manager
	// (statefulset, endpointslice, garbagecollector, nodelifecycle), kube-scheduler and kwok
	// as the fake kubelet of one fake node (FakeNode), which marks pods Running and Ready
	// with IPs from 10.244.0.0/24. EndpointSlices are then the real controller's.
	Controllers bool
}

// FakeNode is the node kwok plays when Options.Controllers is set.
const FakeNode = "kwok-node-0"

// Start runs etcd and kube-apiserver (and, with opts.Controllers, the controllers, the
// scheduler and kwok) and waits (60 s at most each) until they are ready. They are
// stopped when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bins := BinDir(t)
	dir := t.TempDir()
	c := &Cluster{Dir: dir, t: t}
	t.Cleanup(c.Stop)

	etcdPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd := c.run("etcd", filepath.Join(bins, "etcd"),
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--log-level=warn", "--unsafe-no-fsync")
	c.waitHTTP(etcd, etcdURL+"/health", nil, 30*time.Second)

	token := randomHex(t, 16)
	certDir := filepath.Join(dir, "certs")
	writeFile(t, filepath.Join(dir, "tokens.csv"), token+",admin,admin,system:masters\n")
	key, pub := saKeys(t)
	writeFile(t, filepath.Join(dir, "sa.key"), key)
	writeFile(t, filepath.Join(dir, "sa.pub"), pub)
	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	api := c.run("kube-apiserver", filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--cert-dir="+certDir,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer="+apiURL,
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount")

	c.Config = &rest.Config{
		Host:            apiURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(certDir, "apiserver.crt")},
		QPS:             200, Burst: 400,
	}
	c.waitReady(api, 60*time.Second)
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kaas-test"] = &clientcmdapi.Cluster{Server: apiURL, CertificateAuthority: c.Config.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["kaas-test"] = &clientcmdapi.Context{Cluster: "kaas-test", AuthInfo: "admin"}
	kc.CurrentContext = "kaas-test"
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if opts.Controllers {
		c.startControllers(bins)
	}
	return c
}

func (c *Cluster) startControllers(bins string) {
	t := c.t
	t.Helper()
	c.run("kube-controller-manager", filepath.Join(bins, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		// without nodelifecycle the fake node keeps its not-ready taint
		"--controllers=statefulset,endpointslice,garbagecollector,nodelifecycle")
	c.run("kube-scheduler", filepath.Join(bins, "kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")

	// podPlayStageParallelism 1: higher values handed two pods the same IP.
	cfg := filepath.Join(c.Dir, "kwok.yaml")
	writeFile(t, cfg, fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  enableProfilingHandler: false
  nodeLeaseParallelism: 2
  podPlayStageParallelism: 1
  nodePlayStageParallelism: 2
  podsOnNodeSyncParallelism: 2
  nodePort: %d
  serverAddress: 127.0.0.1:%d
`, freePort(t), freePort(t)))
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--config=" + cfg,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/24", "--node-ip=127.0.0.1"}
	// the stages shipped in kwok's module; without node-heartbeat the node goes Unknown
	for _, st := range []string{"node-initialize", "node-heartbeat", "pod-ready", "pod-complete", "pod-delete"} {
		args = append(args, "--config="+filepath.Join(bins, "kwok-stages", st+".yaml"))
	}
	kwok := c.run("kwok", filepath.Join(bins, "kwok"), args...)

	cs := c.Client(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        FakeNode,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      map[string]string{"kubernetes.io/hostname": FakeNode, "kubernetes.io/os": "linux", "type": "kwok"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create fake node: %v", err)
	}
	c.poll(kwok, 60*time.Second, func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, FakeNode, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

// Client is a clientset on c's admin config.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Stop stops the processes by PID in reverse start order (the apiserver before etcd):
// SIGTERM, then SIGKILL after 10 s. After a failed test it prints each log's tail.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		for i := len(c.procs) - 1; i >= 0; i-- {
			p := c.procs[i]
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if c.t.Failed() {
			for _, p := range c.procs {
				c.t.Logf("--- %s log (tail) ---\n%s", p.name, tail(p.log, 4000))
			}
		}
	})
}

func (c *Cluster) run(name, bin string, args ...string) *process {
	c.t.Helper()
	logPath := filepath.Join(c.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if the test binary dies
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return p
}

// waitHTTP polls url until it answers 200, p exits (fail) or the deadline passes (fail).
func (c *Cluster) waitHTTP(p *process, url string, client *http.Client, d time.Duration) {
	c.t.Helper()
	if client == nil {
		client = &http.Client{Timeout: time.Second}
	}
	c.poll(p, d, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// waitReady polls the apiserver's /readyz with the admin config (the serving certificate
// is written when it starts, so the client is made per try).
func (c *Cluster) waitReady(p *process, d time.Duration) {
	c.t.Helper()
	c.poll(p, d, func() bool {
		if _, err := os.Stat(c.Config.CAFile); err != nil {
			return false
		}
		cs, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	})
}

func (c *Cluster) poll(p *process, d time.Duration, ok func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-p.done:
			c.t.Fatalf("%s exited while starting: %v\n%s", p.name, p.err, tail(p.log, 4000))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready after %v\n%s", p.name, d, tail(p.log, 4000))
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// saKeys is the service-account signing key pair, PEM.
func saKeys(t testing.TB) (key, pub string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	key = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	pub = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	return key, pub
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
