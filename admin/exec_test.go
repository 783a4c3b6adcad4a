package admin

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// execute runs bin with args and returns its combined output and exit code.
func execute(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("run %s %v: %v", bin, args, err)
		return "", -1
	}
}
