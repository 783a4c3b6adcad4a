package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// outcomeTB records how binDir ended a test: Skip and Fatal stop the calling goroutine as
// the real ones do.
type outcomeTB struct {
	testing.TB
	kind string // "skip" or "fatal"; "" when binDir returned
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

// TestBinDirNeverBuilds: with the control-plane binaries missing, binDir skips and names
// `make k8sbin` instead of running the ~15-20 min build; under KAAS_REQUIRE_K8S=1, as in
// `make test`, it fails; a cache as build.sh leaves it is used. The tool cache is an empty
// temp dir and the working directory has no hack/k8sbin/build.sh above it, so nothing here
// can build anything.
func TestBinDirNeverBuilds(t *testing.T) {
	cases := []struct {
		name     string
		complete bool
		require  bool
		kind     string
		want     string
	}{
		{name: "missing", kind: "skip", want: "make k8sbin"},
		{name: "missing required", require: true, kind: "fatal", want: "KAAS_REQUIRE_K8S=1"},
		{name: "complete", complete: true},
		{name: "complete required", complete: true, require: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			t.Chdir(t.TempDir())
			t.Setenv("KAAS_TOOLS_CACHE", root)
			t.Setenv("KAAS_SKIP_K8S", "")
			t.Setenv("KAAS_REQUIRE_K8S", "")
			if tc.require {
				t.Setenv("KAAS_REQUIRE_K8S", "1")
			}
			wantDir := filepath.Join(root, "k8s-"+k8sVersion)
			if tc.complete {
				if err := os.MkdirAll(filepath.Join(wantDir, "kwok-stages"), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, b := range k8sBins {
					if err := os.WriteFile(filepath.Join(wantDir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				for _, f := range []string{"STAGES", "pod-ready.yaml"} {
					if err := os.WriteFile(filepath.Join(wantDir, "kwok-stages", f), []byte("fast v0.8.0\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			o := &outcomeTB{TB: t}
			var dir string
			done := make(chan struct{})
			go func() {
				defer close(done)
				dir = binDir(o)
			}()
			<-done
			if o.kind != tc.kind {
				t.Fatalf("binDir ended with %q (%q), want %q", o.kind, o.msg, tc.kind)
			}
			if !strings.Contains(o.msg, tc.want) {
				t.Errorf("message %q does not say %q", o.msg, tc.want)
			}
			if tc.kind == "" && dir != wantDir {
				t.Errorf("binDir = %q, want %q", dir, wantDir)
			}
			if entries, _ := os.ReadDir(root); !tc.complete && len(entries) != 0 {
				t.Errorf("binDir wrote into the empty tool cache: %v", entries)
			}
		})
	}
}
