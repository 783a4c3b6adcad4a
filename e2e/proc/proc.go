// Package proc runs the kaas binary as a real process for tests that kill, stop and
// restart it: built once per test binary, started on a loopback port, waited for.
package proc

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kaas/internal/testwait"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{} // build tags -> binary
)

// Build compiles cmd/kaas once per test binary and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	return BuildTagged(t, "")
}

// BuildTagged compiles cmd/kaas with the given build tags (comma-separated; "chaos"
// puts the fault injector in, KAAS_CHAOS_SEED turns it on), once per tag set.
func BuildTagged(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[tags]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "kaas-bin-")
	if err != nil {
		t.Fatalf("build kaas: %v", err)
	}
	p := filepath.Join(dir, "kaas")
	args := []string{"build", "-buildvcs=auto", "-o", p}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "kaas/cmd/kaas")...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build kaas (tags %q): %v", tags, err)
	}
	recordSources()
	built[tags] = p
	return p
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Broker is one kaas process.
type Broker struct {
	Addr    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Start runs bin on 127.0.0.1:port with dataDir and extra flags, appending its output to
// <dataDir>/../broker.log, and waits until it accepts connections.
func Start(t testing.TB, bin, dataDir string, port int, extra ...string) *Broker {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{
		"--listeners=PLAINTEXT://" + addr,
		"--data.dir=" + dataDir,
		"--http.listen=",
		"--log.level=info",
		"--log.format=json",
	}, extra...)
	cmd := exec.Command(bin, args...)
	logPath := filepath.Join(filepath.Dir(dataDir), "broker.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kaas: %v", err)
	}
	b := &Broker{Addr: addr, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { b.err = cmd.Wait(); close(b.done) }()
	t.Cleanup(b.Kill)
	if err := testwait.Until(20*time.Second, 5*time.Millisecond, func() error {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-b.done:
			logs, _ := os.ReadFile(logPath)
			t.Fatalf("kaas exited before listening: %v\n%s", b.err, logs)
		default:
		}
		return err
	}); err != nil {
		b.Kill()
		t.Fatalf("kaas did not listen on %s: %v", addr, err)
	}
	return b
}

// Kill sends SIGKILL (no shutdown path runs) and waits for the process to go.
func (b *Broker) Kill() {
	select {
	case <-b.done:
		return
	default:
	}
	_ = b.cmd.Process.Kill()
	<-b.done
}

// Term sends SIGTERM and waits up to timeout for the exit; it returns the exit code, or
// an error when the process did not exit in time (it is then killed).
func (b *Broker) Term(timeout time.Duration) (int, error) {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(timeout):
		b.Kill()
		return -1, errors.New("did not exit after SIGTERM")
	}
	var ee *exec.ExitError
	if errors.As(b.err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, b.err
}

// Pid is the process id of the running broker.
func (b *Broker) Pid() int { return b.cmd.Process.Pid }

// Pause stops the process (SIGSTOP) as a frozen VM or a long GC pause would; Resume
// continues it.
func (b *Broker) Pause() { _ = b.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (b *Broker) Resume() { _ = b.cmd.Process.Signal(syscall.SIGCONT) }

// Exited reports whether the process has ended.
func (b *Broker) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// recordSources stats every Go source file of the module the binary is built from, and
// its go.mod and go.sum, so that Go's test cache records them as the test's inputs: a
// package whose tests run the binary imports none of kaas, and without this a result
// cached before a change to kaas would be reused after it.
func recordSources() {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(self))) // e2e/proc/proc.go
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module (deploy/...): not in the binary
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") || path == filepath.Join(root, "go.mod") || path == filepath.Join(root, "go.sum") {
			_, _ = os.Stat(path)
		}
		return nil
	})
}
