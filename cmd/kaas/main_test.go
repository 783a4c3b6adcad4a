package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	kproc "kaas/e2e/proc"
	"kaas/internal/testwait"
)

// TestSigtermAnswersParkedRequestsAndExitsZero runs the binary, parks a JoinGroup behind a
// long initial rebalance delay, sends SIGTERM, and expects the join answered with a
// retriable code and the process gone with status 0 well within 10 s.
func TestSigtermAnswersParkedRequestsAndExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := kproc.Build(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	b := kproc.Start(t, bin, dataDir, kproc.FreePort(t), "--group.initial.rebalance.delay.ms=60000")

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		t.Fatal(err)
	}

	raw := brokertest.Dial(t, b.Addr)
	joined := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		req := kmsg.NewPtrJoinGroupRequest()
		req.SetVersion(3) // no KIP-394 round trip: the join parks at once
		req.Group = "parked"
		req.SessionTimeoutMillis = 30000
		req.RebalanceTimeoutMillis = 60000
		req.ProtocolType = "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		req.Protocols = append(req.Protocols, p)
		raw.Send(req, 1)
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.SetVersion(3)
		frame, err := raw.ReadFrame(15 * time.Second)
		if err == nil {
			_, err = brokertest.Decode(frame, resp)
		}
		if err != nil {
			t.Errorf("join: %v", err)
			joined <- nil
			return
		}
		joined <- resp
	}()
	// Wait until the join has reached the group and parked behind the initial delay.
	adm := kadm.NewClient(cl)
	end, _ := ctx.Deadline()
	testwait.For(t, time.Until(end), 10*time.Millisecond, func() error {
		described, err := adm.DescribeGroups(ctx, "parked")
		if err == nil && described["parked"].State == "PreparingRebalance" {
			return nil
		}
		return fmt.Errorf("the join never parked: %v", err)
	})

	start := time.Now()
	code, err := b.Term(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	t.Logf("stopped in %v", time.Since(start))
	select {
	case resp := <-joined:
		if resp == nil {
			t.Fatal("parked join got no response")
		}
		if resp.ErrorCode != kerr.NotCoordinator.Code && resp.ErrorCode != kerr.CoordinatorNotAvailable.Code &&
			resp.ErrorCode != kerr.RebalanceInProgress.Code {
			t.Fatalf("parked join answered with %v", kerr.ErrorForCode(resp.ErrorCode))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked join was never answered")
	}
	logs, _ := os.ReadFile(b.LogPath)
	for _, want := range []string{`"message":"kaas_started"`, `"message":"kaas_stopped"`} {
		if !strings.Contains(string(logs), want) {
			t.Fatalf("log lacks %s:\n%s", want, logs)
		}
	}
}

func TestHelpListsSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker binary")
	}
	bin := kproc.Build(t)
	out, err := execOutput(bin, "--help")
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{"--listeners", "KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS", "default 3000"} {
		if !strings.Contains(out, want) {
			t.Fatalf("--help lacks %q:\n%s", want, out)
		}
	}
}

// --version names the build: the VCS revision `go build` stamps in a checkout, the Go
// release and the platform, and exits 0 without starting a broker.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker binary")
	}
	bin := kproc.Build(t)
	out, err := execOutput(bin, "--version")
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "kaas ") || !strings.Contains(out, runtime.Version()) ||
		!strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("--version printed %q", out)
	}
	if _, err := exec.LookPath("git"); err == nil && strings.HasPrefix(out, "kaas dev ") {
		t.Fatalf("--version printed %q: a binary built in a checkout carries its revision", out)
	}
}

// An SSL listener without its certificate and key stops the binary at start with an
// error naming the settings, instead of serving plaintext on it.
func TestSSLListenerWithoutCertificateRefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker binary")
	}
	bin := kproc.Build(t)
	out, err := execOutput(bin, "--listeners=SSL://127.0.0.1:0", "--http.listen=", "--data.dir="+t.TempDir())
	if err == nil {
		t.Fatalf("started with an SSL listener and no certificate:\n%s", out)
	}
	if !strings.Contains(out, "--ssl.certificate.location and --ssl.key.location") {
		t.Fatalf("unclear refusal:\n%s", out)
	}
}
