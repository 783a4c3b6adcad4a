package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is; the Dockerfile at the root of the repository states the same.
const (
	// User is the numeric user and group the broker runs as (the "nonroot" id of
	// distroless images). Numeric, so the image needs no /etc/passwd.
	User    = "65532:65532"
	userID  = 65532
	DataDir = "/data"
	// Repository is the name of the tags in the docker tarball.
	Repository = "kaas"
	// defaultPath is what a Dockerfile build gives an image from scratch; stated in both so
	// the two configs agree whatever the engine adds.
	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Env is the image's default environment: a broker in a container listens on every
// interface (the binary's defaults are loopback, which nothing outside the container
// reaches) and keeps its data on the /data volume. Clients need
// KAAS_ADVERTISED_LISTENERS set to an address they can reach.
var Env = []string{
	defaultPath,
	"KAAS_LISTENERS=PLAINTEXT://0.0.0.0:9092",
	"KAAS_HTTP_LISTEN=0.0.0.0:9644",
	"KAAS_DATA_DIR=" + DataDir,
}

// Ports are the Kafka listener and the HTTP endpoint (/healthz, /readyz, /metrics).
var Ports = []string{"9092/tcp", "9644/tcp"}

// Build is the identity of one kaas binary, read from what the Go toolchain stamped in it.
type Build struct {
	Version  string    // as `kaas --version` prints it
	Revision string    // vcs.revision, full; empty outside a checkout
	Created  time.Time // the commit time, or SOURCE_DATE_EPOCH; the Unix epoch without either
	GOOS     string
	GOARCH   string
}

// Tag is the version as an image tag: a tag allows [A-Za-z0-9_.-], at most 128 long.
func (b Build) Tag() string {
	v, _, _ := strings.Cut(b.Version, " ")
	t := []byte(v)
	for i, c := range t {
		ok := c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			t[i] = '-'
		}
	}
	if len(t) == 0 || t[0] == '.' || t[0] == '-' {
		t = append([]byte("v"), t...)
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return string(t)
}

// Compile cross-compiles the static broker binary of the module at src to out, with the
// flags the Dockerfile uses. version, when set, is stamped as kaas/broker.Version.
func Compile(ctx context.Context, src, out, goarch, version string) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("binary path: %w", err)
	}
	args := []string{"build", "-trimpath", "-buildvcs=auto"}
	if version != "" {
		args = append(args, "-ldflags=-X kaas/broker.Version="+version)
	}
	args = append(args, "-o", out, "./cmd/kaas")
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = "go"
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/kaas in %s: %w", src, err)
	}
	return nil
}

// ReadBuild reads the identity of the binary at path. Its version is what the binary's
// `--version` prints (broker.VersionString: the -X version, else the module version, else
// dev-<revision>[+dirty] (<commit time>), else dev).
func ReadBuild(path string) (Build, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return Build{}, fmt.Errorf("read build info of %s: %w", path, err)
	}
	b := Build{Version: "dev", Created: time.Unix(0, 0).UTC()}
	var when string
	dirty := false
	xVersion := ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		case "GOOS":
			b.GOOS = s.Value
		case "GOARCH":
			b.GOARCH = s.Value
		case "-ldflags":
			xVersion = ldflagsVersion(s.Value)
		}
	}
	switch {
	case xVersion != "" && xVersion != "dev":
		b.Version = xVersion
	case info.Main.Version != "" && info.Main.Version != "(devel)":
		b.Version = info.Main.Version
	case b.Revision != "":
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		b.Version = "dev-" + rev
		if dirty {
			b.Version += "+dirty"
		}
		if when != "" {
			b.Version += " (" + when + ")"
		}
	}
	if when != "" {
		t, err := time.Parse(time.RFC3339, when)
		if err != nil {
			return Build{}, fmt.Errorf("vcs.time %q of %s: %w", when, path, err)
		}
		b.Created = t.UTC()
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Build{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		b.Created = time.Unix(n, 0).UTC()
	}
	return b, nil
}

// ldflagsVersion finds -X kaas/broker.Version=... in the -ldflags a binary was built with.
func ldflagsVersion(ldflags string) string {
	const key = "kaas/broker.Version="
	f := strings.Fields(ldflags)
	for i, w := range f {
		var v string
		switch {
		case w == "-X" && i+1 < len(f):
			v = f[i+1]
		case strings.HasPrefix(w, "-X="):
			v = w[len("-X="):]
		default:
			continue
		}
		if rest, ok := strings.CutPrefix(v, key); ok {
			return strings.Trim(rest, `"'`)
		}
	}
	return ""
}

// Layer is the image's one layer: /kaas (root's, 0755) and the empty /data, owned by the
// broker's user, 0700 like every directory the broker makes under data.dir. Every entry
// carries the build's time, so the same binary always gives the same bytes.
func Layer(bin []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []struct {
		h    tar.Header
		body []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(DataDir, "/") + "/", Mode: 0o700,
			Uid: userID, Gid: userID, ModTime: created, Format: tar.FormatPAX}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: "kaas", Mode: 0o755, Size: int64(len(bin)),
			ModTime: created, Format: tar.FormatPAX}, bin},
	}
	for _, e := range hdrs {
		if err := tw.WriteHeader(&e.h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.h.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// Image is the kaas image of one binary: from scratch, one layer, OCI media types.
func Image(bin []byte, b Build) (v1.Image, error) {
	raw, err := Layer(bin, b.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: b.Created},
			CreatedBy: "COPY kaas /kaas; COPY --chown=" + User + " data /data",
			Comment:   "kaas deploy/image",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: b.Created}
	cf.OS = "linux"
	cf.Architecture = b.GOARCH
	cf.Config = v1.Config{
		Entrypoint:   []string{"/kaas"},
		User:         User,
		Env:          append([]string(nil), Env...),
		ExposedPorts: map[string]struct{}{},
		Volumes:      map[string]struct{}{DataDir: {}},
		WorkingDir:   "/",
		StopSignal:   "SIGTERM",
		Labels:       Labels(b),
	}
	for _, p := range Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// Labels are the OCI annotations of the build.
func Labels(b Build) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   "kaas",
		"org.opencontainers.image.version": b.Version,
		"org.opencontainers.image.created": b.Created.Format(time.RFC3339),
	}
	if b.Revision != "" {
		l["org.opencontainers.image.revision"] = b.Revision
	}
	return l
}

// Tags are the image's tags: its version and latest.
func Tags(b Build) []string { return []string{b.Tag(), "latest"} }

// WriteLayout writes img as an OCI image layout at dir (replacing one there), one
// manifest entry per tag (annotated with org.opencontainers.image.ref.name, as
// `skopeo copy oci:dir:tag` reads it).
func WriteLayout(dir string, img v1.Image, tags []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove old layout %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	for _, t := range tags {
		err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": t,
			"io.containerd.image.name":          Repository + ":" + t,
		}))
		if err != nil {
			return fmt.Errorf("layout %s: tag %s: %w", dir, t, err)
		}
	}
	return nil
}

// WriteTarball writes img as a tarball `docker load` reads, tagged kaas:<tag> for each tag.
// It writes the format tarball.Write does (manifest.json, the config, gzipped layers),
// with the tags in a fixed order and no timestamps, so the same image gives the same bytes.
func WriteTarball(path string, img v1.Image, tags []string) (err error) {
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("config name: %w", err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	repoTags := make([]string, 0, len(tags))
	for _, t := range tags {
		repoTags = append(repoTags, Repository+":"+t)
	}
	sort.Strings(repoTags)
	desc := tarball.Descriptor{Config: cfgName.String(), RepoTags: repoTags}

	tmp, err := os.CreateTemp(filepath.Dir(path), ".kaas-image-*.tar")
	if err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := tar.NewWriter(tmp)
	entry := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size}); err != nil {
			return fmt.Errorf("tarball entry %s: %w", name, err)
		}
		if _, err := io.Copy(tw, r); err != nil {
			return fmt.Errorf("tarball entry %s: %w", name, err)
		}
		return nil
	}
	if err := entry(cfgName.String(), int64(len(cfg)), bytes.NewReader(cfg)); err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("layer digest: %w", err)
		}
		size, err := l.Size()
		if err != nil {
			return fmt.Errorf("layer size: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("layer %s: %w", d, err)
		}
		name := d.Hex + ".tar.gz"
		err = entry(name, size, rc)
		rc.Close()
		if err != nil {
			return err
		}
		desc.Layers = append(desc.Layers, name)
	}
	m, err := json.Marshal(tarball.Manifest{desc})
	if err != nil {
		return fmt.Errorf("manifest.json: %w", err)
	}
	if err := entry("manifest.json", int64(len(m)), bytes.NewReader(m)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	return nil
}

// Result is what one build wrote.
type Result struct {
	Build   Build
	Digest  v1.Hash // the image manifest's digest
	Layout  string
	Tarball string
}

// Assemble builds the image of the binary at bin and writes dist/oci and
// dist/kaas-image.tar.
func Assemble(bin, dist string) (Result, error) {
	b, err := ReadBuild(bin)
	if err != nil {
		return Result{}, err
	}
	if b.GOOS != "" && b.GOOS != "linux" {
		return Result{}, fmt.Errorf("%s is built for %s: an image needs a linux binary", bin, b.GOOS)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return Result{}, fmt.Errorf("read binary: %w", err)
	}
	img, err := Image(data, b)
	if err != nil {
		return Result{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return Result{}, fmt.Errorf("digest: %w", err)
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return Result{}, fmt.Errorf("make %s: %w", dist, err)
	}
	r := Result{Build: b, Digest: d, Layout: filepath.Join(dist, "oci"), Tarball: filepath.Join(dist, "kaas-image.tar")}
	if err := WriteLayout(r.Layout, img, Tags(b)); err != nil {
		return Result{}, err
	}
	if err := WriteTarball(r.Tarball, img, Tags(b)); err != nil {
		return Result{}, err
	}
	return r, nil
}
