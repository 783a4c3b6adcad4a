package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The image a build writes, loaded back from its OCI layout and from its docker tarball:
// the config a container engine runs, a filesystem of the binary and /data alone, a binary
// that runs as a broker from the image's own environment, and the same digest from a
// second build of the same source.
func TestImage(t *testing.T) {
	// The bound is for a hang: the static build compiles everything again on a cold
	// cache (its flags differ from the tests'), minutes on two busy cores.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	goarch, runnable := "amd64", runtime.GOOS == "linux"
	if runnable {
		goarch = runtime.GOARCH
	}

	// Two builds from the source: the same binary, and the same image bytes.
	bins := [2]string{filepath.Join(dir, "build1", "kaas"), filepath.Join(dir, "build2", "kaas")}
	var res [2]Result
	for i, bin := range bins {
		if err := Compile(ctx, "../..", bin, goarch, ""); err != nil {
			t.Fatal(err)
		}
		r, err := Assemble(bin, filepath.Join(dir, "dist"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		res[i] = r
	}
	if a, b := fileSum(t, bins[0]), fileSum(t, bins[1]); a != b {
		t.Fatalf("two builds of one source gave two binaries: %x, %x", a, b)
	}
	if res[0].Digest != res[1].Digest {
		t.Fatalf("two builds gave two image digests: %s, %s", res[0].Digest, res[1].Digest)
	}
	for _, f := range []string{"kaas-image.tar", "oci/index.json"} {
		a, b := fileSum(t, filepath.Join(dir, "dist0", f)), fileSum(t, filepath.Join(dir, "dist1", f))
		if a != b {
			t.Fatalf("two builds wrote two different %s", f)
		}
	}
	r := res[0]
	build, err := ReadBuild(bins[0])
	if err != nil {
		t.Fatal(err)
	}

	// The layout: one manifest per tag, all the image.
	idx, err := layout.ImageIndexFromPath(r.Layout)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range im.Manifests {
		refs = append(refs, m.Annotations["org.opencontainers.image.ref.name"])
		if m.Digest != r.Digest {
			t.Fatalf("layout entry %v: digest %s, image is %s", m.Annotations, m.Digest, r.Digest)
		}
	}
	if want := []string{build.Tag(), "latest"}; !slices.Equal(refs, want) {
		t.Fatalf("layout tags %q, want %q", refs, want)
	}
	img, err := idx.Image(r.Digest)
	if err != nil {
		t.Fatal(err)
	}

	// The tarball: both tags name the image (same config, same layers).
	for _, tg := range Tags(build) {
		tag, err := name.NewTag(Repository + ":" + tg)
		if err != nil {
			t.Fatal(err)
		}
		timg, err := tarball.ImageFromPath(r.Tarball, &tag)
		if err != nil {
			t.Fatalf("tarball image %s: %v", tag, err)
		}
		if a, b := configName(t, timg), configName(t, img); a != b {
			t.Fatalf("tarball %s: config %s, layout's is %s", tag, a, b)
		}
		if a, b := diffIDs(t, timg), diffIDs(t, img); !slices.Equal(a, b) {
			t.Fatalf("tarball %s: layers %v, layout's are %v", tag, a, b)
		}
	}

	// The config.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/kaas"}) || len(c.Cmd) != 0 || len(c.Shell) != 0 {
		t.Fatalf("entrypoint %q cmd %q shell %q: want exec form /kaas alone", c.Entrypoint, c.Cmd, c.Shell)
	}
	uid, _, _ := strings.Cut(c.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Fatalf("user %q: want a numeric user that is not root", c.User)
	}
	env := map[string]string{}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range map[string]string{
		"KAAS_LISTENERS":   "PLAINTEXT://0.0.0.0:9092",
		"KAAS_HTTP_LISTEN": "0.0.0.0:9644",
		"KAAS_DATA_DIR":    "/data",
	} {
		if env[k] != v {
			t.Fatalf("env %s=%q, want %q (env %q)", k, env[k], v, c.Env)
		}
	}
	if _, ok := c.Volumes["/data"]; !ok {
		t.Fatalf("volumes %v: want /data", c.Volumes)
	}
	for _, p := range []string{"9092/tcp", "9644/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Fatalf("exposed ports %v: want %s", c.ExposedPorts, p)
		}
	}
	if cf.OS != "linux" || cf.Architecture != goarch {
		t.Fatalf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, goarch)
	}
	if !cf.Created.Equal(build.Created) || build.Revision != "" && build.Created.Equal(time.Unix(0, 0)) {
		t.Fatalf("created %s: want the commit time %s", cf.Created, build.Created)
	}
	if got := c.Labels["org.opencontainers.image.version"]; got != build.Version {
		t.Fatalf("version label %q, want %q", got, build.Version)
	}

	// The filesystem: /kaas and /data, nothing else (no shell, no libc).
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := readFS(t, img, root)
	if want := []string{"data", "kaas"}; !slices.Equal(fs, want) {
		t.Fatalf("image holds %q, want %q", fs, want)
	}

	if !runnable {
		t.Skipf("a linux/%s binary does not run on %s/%s", goarch, runtime.GOOS, runtime.GOARCH)
	}
	kaas := filepath.Join(root, "kaas")

	// --version prints the version the image is labelled with.
	out, err := exec.CommandContext(ctx, kaas, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("kaas --version: %v\n%s", err, out)
	}
	info, err := buildinfo.ReadFile(kaas)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kaas " + build.Version + " " + info.GoVersion + " linux/" + goarch + "\n"; string(out) != want {
		t.Fatalf("kaas --version printed %q, want %q", out, want)
	}

	// The binary is a broker when run with the image's environment (its listeners moved to
	// loopback and a free port, its data dir to a temp dir): it answers ApiVersions and
	// Metadata, serves /healthz, and exits 0 on SIGTERM.
	runBroker(ctx, t, kaas, c.Env, filepath.Join(dir, "data"))
}

func runBroker(ctx context.Context, t *testing.T, kaas string, imageEnv []string, dataDir string) {
	over := map[string]string{
		"KAAS_LISTENERS":   "PLAINTEXT://127.0.0.1:0",
		"KAAS_HTTP_LISTEN": "127.0.0.1:0",
		"KAAS_DATA_DIR":    dataDir,
	}
	var env []string
	for _, kv := range imageEnv {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := over[k]; ok {
			kv = k + "=" + v
		}
		env = append(env, kv)
	}
	cmd := exec.CommandContext(ctx, kaas)
	cmd.Env = env
	cmd.Dir = filepath.Dir(dataDir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	var logs bytes.Buffer
	output := func() string { logMu.Lock(); defer logMu.Unlock(); return logs.String() }
	type started struct {
		Listeners []string `json:"listeners"`
		HTTP      string   `json:"http"`
	}
	up := make(chan started, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logMu.Lock()
			logs.Write(sc.Bytes())
			logs.WriteByte('\n')
			logMu.Unlock()
			var l struct {
				started
				Message string `json:"message"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "kaas_started" {
				up <- l.started
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-eof
			_ = cmd.Wait()
		}
	}()

	var s started
	select {
	case s = <-up:
	case <-eof:
		t.Fatalf("kaas exited before it started:\n%s", output())
	case <-time.After(60 * time.Second):
		t.Fatalf("kaas did not start in 60 s:\n%s", output())
	}
	if len(s.Listeners) != 1 || !strings.HasPrefix(s.Listeners[0], "PLAINTEXT://127.0.0.1:") {
		t.Fatalf("kaas started on %q, want one loopback listener", s.Listeners)
	}
	addr := strings.TrimPrefix(s.Listeners[0], "PLAINTEXT://")
	if ents, err := os.ReadDir(dataDir); err != nil || len(ents) == 0 {
		t.Fatalf("data dir from KAAS_DATA_DIR: %d entries, %v\n%s", len(ents), err, output())
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(rctx, cl)
	if err != nil {
		t.Fatalf("ApiVersions: %v\n%s", err, output())
	}
	if av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
		t.Fatalf("ApiVersions: error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
	}
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl)
	if err != nil {
		t.Fatalf("Metadata: %v\n%s", err, output())
	}
	host, port, _ := net.SplitHostPort(addr)
	if len(md.Brokers) != 1 || md.Brokers[0].Host != host || strconv.Itoa(int(md.Brokers[0].Port)) != port {
		t.Fatalf("Metadata brokers %+v, want %s", md.Brokers, addr)
	}
	cl.Close()

	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+s.HTTP+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-eof:
	case <-time.After(30 * time.Second):
		t.Fatalf("kaas still running 30 s after SIGTERM:\n%s", output())
	}
	exited = true
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kaas exited %d after SIGTERM:\n%s", ee.ExitCode(), output())
		}
		t.Fatal(err)
	}
}

// readFS lists the image's flattened filesystem, writing its regular files under root.
func readFS(t *testing.T, img v1.Image, root string) []string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := strings.TrimSuffix(h.Name, "/")
		names = append(names, n)
		switch n {
		case "kaas":
			if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 {
				t.Fatalf("kaas: type %c mode %o uid %d, want a root-owned 0755 file", h.Typeflag, h.Mode, h.Uid)
			}
			f, err := os.OpenFile(filepath.Join(root, "kaas"), os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		case "data":
			if h.Typeflag != tar.TypeDir || h.Uid != userID || h.Gid != userID {
				t.Fatalf("data/: type %c owner %d:%d, want a directory of %s", h.Typeflag, h.Uid, h.Gid, User)
			}
		}
	}
	slices.Sort(names)
	return names
}

func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func diffIDs(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.RootFS.DiffIDs
}

// A tag is the version with what a tag may not hold replaced; a -X version is read back
// from the binary's build flags.
func TestTagAndLdflags(t *testing.T) {
	for v, want := range map[string]string{
		"dev-0123456789ab+dirty (2026-01-02T03:04:05Z)": "dev-0123456789ab-dirty",
		"v0.0.0-20261203150031-fb691d950be0+dirty":      "v0.0.0-20261203150031-fb691d950be0-dirty",
		"1.2.3": "1.2.3",
		".x":    "v.x",
	} {
		if got := (Build{Version: v}).Tag(); got != want {
			t.Errorf("tag of %q: %q, want %q", v, got, want)
		}
	}
	for f, want := range map[string]string{
		"-X kaas/broker.Version=1.2.3":          "1.2.3",
		"-s -X=kaas/broker.Version=2.0 -w":      "2.0",
		"-X other.V=1 -X kaas/broker.Version=3": "3",
		"-s -w":                                 "",
	} {
		if got := ldflagsVersion(f); got != want {
			t.Errorf("ldflagsVersion(%q) = %q, want %q", f, got, want)
		}
	}
}
