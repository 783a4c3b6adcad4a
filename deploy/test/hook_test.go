package deploytest

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	kproc "kaas/e2e/proc"
)

// TestHelmTestHookRuns runs the `helm test` pod's command line, as rendered, with the
// kaas binary against a kaas broker process (only the bootstrap address is changed to
// the broker's loopback port): it must produce, join the group, fetch, commit and read
// the commit back, and do so again on a second `helm test`.
func TestHelmTestHookRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kaas binary")
	}
	r := renderChart(t, nil)
	pod := get[*corev1.Pod](t, r.objs, "Pod", "kaas-test-probe")
	c := pod.Spec.Containers[0]
	if len(c.Command) > 0 {
		t.Fatalf("the hook overrides the image's entrypoint: %v", c.Command)
	}
	bin := kproc.Build(t)
	b := kproc.Start(t, bin, t.TempDir()+"/data", kproc.FreePort(t), "--group.initial.rebalance.delay.ms=0")
	var args []string
	swapped := false
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--bootstrap-server=") {
			a, swapped = "--bootstrap-server="+b.Addr, true
		}
		args = append(args, a)
	}
	if !swapped {
		t.Fatalf("hook args %q name no --bootstrap-server", c.Args)
	}
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("run %d: kaas %q: %v\nstdout:\n%s\nstderr:\n%s", run, args, err, out.String(), errb.String())
		}
		for _, step := range []string{"produce", "join", "fetch", "commit", "offset-fetch"} {
			if !strings.Contains(out.String(), "\n"+step+" ") {
				t.Fatalf("run %d: no %s step in\n%s", run, step, out.String())
			}
		}
	}
}
