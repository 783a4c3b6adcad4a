package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// outcomeTB records how BinDir ended a test: Skip and Fatal stop the calling goroutine as
// the real ones do, so BinDir runs exactly as in a test.
type outcomeTB struct {
	testing.TB
	kind string // "skip" or "fatal"; "" when BinDir returned
	msg  string
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skip(args ...any) {
	o.kind, o.msg = "skip", fmt.Sprint(args...)
	runtime.Goexit()
}
func (o *outcomeTB) Skipf(format string, args ...any) {
	o.kind, o.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatal(args ...any) {
	o.kind, o.msg = "fatal", fmt.Sprint(args...)
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.kind, o.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func binDirOutcome(t *testing.T) (dir string, o *outcomeTB) {
	o = &outcomeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dir = BinDir(o)
	}()
	<-done
	return dir, o
}

// writeBins fills root's k8s-<Version> directory as build.sh leaves it.
func writeBins(t *testing.T, root string) string {
	dir := filepath.Join(root, "k8s-"+Version)
	if err := os.MkdirAll(filepath.Join(dir, "kwok-stages"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kwok-stages", "STAGES"), []byte("fast v0.8.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBinDirNeverBuilds: with the binaries missing, BinDir skips and names `make k8sbin`
// (a plain `go test ./...` starts no Kubernetes build); under KAAS_REQUIRE_K8S=1, as in
// `make test`, it fails; KAAS_SKIP_K8S=1 skips whatever is there; a complete cache is used.
// The working directory is a temp dir with no hack/k8sbin/build.sh above it, and the cache
// is empty, so nothing here can build anything.
func TestBinDirNeverBuilds(t *testing.T) {
	cases := []struct {
		name     string
		complete bool
		partial  bool // every binary but kube-apiserver
		env      map[string]string
		kind     string
		want     []string // in the message
	}{
		{name: "missing", kind: "skip", want: []string{"make k8sbin", "SKIPPED", "kube-apiserver", "kwok-stages"}},
		{name: "partial", partial: true, kind: "skip", want: []string{"make k8sbin", "(kube-apiserver)"}},
		{name: "missing required", env: map[string]string{"KAAS_REQUIRE_K8S": "1"}, kind: "fatal", want: []string{"make k8sbin", "KAAS_REQUIRE_K8S=1"}},
		{name: "partial required", partial: true, env: map[string]string{"KAAS_REQUIRE_K8S": "1"}, kind: "fatal", want: []string{"(kube-apiserver)"}},
		{name: "skip asked", complete: true, env: map[string]string{"KAAS_SKIP_K8S": "1", "KAAS_REQUIRE_K8S": "1"}, kind: "skip", want: []string{"KAAS_SKIP_K8S=1"}},
		{name: "complete", complete: true, kind: ""},
		{name: "complete required", complete: true, env: map[string]string{"KAAS_REQUIRE_K8S": "1"}, kind: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			t.Chdir(t.TempDir())
			t.Setenv("KAAS_TOOLS_CACHE", root)
			t.Setenv("KAAS_SKIP_K8S", "")
			t.Setenv("KAAS_REQUIRE_K8S", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var wantDir string
			if tc.complete || tc.partial {
				wantDir = writeBins(t, root)
			}
			if tc.partial {
				if err := os.Remove(filepath.Join(wantDir, "kube-apiserver")); err != nil {
					t.Fatal(err)
				}
			}
			dir, o := binDirOutcome(t)
			if o.kind != tc.kind {
				t.Fatalf("BinDir ended with %q (%q), want %q", o.kind, o.msg, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(o.msg, w) {
					t.Errorf("message %q does not say %q", o.msg, w)
				}
			}
			if tc.kind == "" && dir != wantDir {
				t.Errorf("BinDir = %q, want %q", dir, wantDir)
			}
			if entries, _ := os.ReadDir(root); !tc.complete && !tc.partial && len(entries) != 0 {
				t.Errorf("BinDir wrote into the empty tool cache: %v", entries)
			}
		})
	}
}
