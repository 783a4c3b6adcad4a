package txn

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"kaas/e2e/eos"
	kproc "kaas/e2e/proc"
	"kaas/internal/testwait"
)

var crashSeed = flag.Uint64("txn.seed", 1, "seed of TestEOSKill's kill instants")

// restartable is a broker process killed with SIGKILL and started again on the same
// port and data directory.
type restartable interface {
	kill()
	start(t *testing.T)
}

type kaasProc struct {
	bin, data string
	port      int
	b         *kproc.Broker
}

func (k *kaasProc) kill() { k.b.Kill() }
func (k *kaasProc) start(t *testing.T) {
	k.b = kproc.Start(t, k.bin, k.data, k.port, "--log.level=warn")
}

// fakeProc is e2e/fakebroker (kfake) persisting to a directory with fsync on: the
// reference's crash behaviour.
type fakeProc struct {
	bin, data string
	port      int
	cmd       *exec.Cmd
	done      chan struct{}
}

func (f *fakeProc) kill() {
	_ = f.cmd.Process.Signal(syscall.SIGKILL)
	<-f.done
}

func (f *fakeProc) start(t *testing.T) {
	f.cmd = exec.Command(f.bin, "--port="+strconv.Itoa(f.port), "--data.dir="+f.data)
	f.cmd.Stderr = os.Stderr
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.done = make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	t.Cleanup(func() {
		select {
		case <-f.done:
		default:
			f.kill()
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(f.port)
	if err := testwait.Until(20*time.Second, 5*time.Millisecond, func() error {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("fakebroker did not listen on %s: %v", addr, err)
	}
}

func startRestartable(t *testing.T) (restartable, string) {
	t.Helper()
	dir := t.TempDir()
	port := kproc.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if *brokerKind == "fake" {
		bin := filepath.Join(dir, "fakebroker")
		build := exec.Command("go", "build", "-o", bin, "kaas/e2e/fakebroker")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			t.Fatal(err)
		}
		f := &fakeProc{bin: bin, data: filepath.Join(dir, "data"), port: port}
		f.start(t)
		return f, addr
	}
	k := &kaasProc{bin: kproc.Build(t), data: filepath.Join(dir, "data"), port: port}
	k.start(t)
	return k, addr
}

// TestEOSKill runs the consume-transform-produce pipeline while the broker is killed
// with SIGKILL at random instants (some while an EndTxn is in flight) and restarted,
// rounds times. Every transaction must be all or nothing across its partitions and its
// offsets: read_committed output holds every input record exactly once, the group's
// offsets end at the input's end, and no transaction is left hanging (the last stable
// offset reaches the end of every partition).
func TestEOSKill(t *testing.T) {
	const (
		n      = 4000
		rounds = 20
	)
	br, addr := startRestartable(t)
	adm := admin(t, addr)
	for _, topic := range []string{inTopic, outTopic} {
		if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	produceInput(t, addr, n)

	l := eos.NewLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		name := "m" + strconv.Itoa(i)
		m := eos.Member{Seeds: []string{addr}, TxnID: "kill-" + name, Tag: name, Group: group, In: inTopic, Out: outTopic,
			SessionTimeout: 6 * time.Second, RetryTimeout: 20 * time.Second}
		wg.Go(func() { m.Run(l, stop) })
	}
	defer func() {
		l.Stop()
		close(stop)
		wg.Wait()
	}()

	rng := rand.New(rand.NewPCG(*crashSeed, 0))
	duringEnd := 0
	for round := 0; round < rounds; round++ {
		want := l.Commits() + 1 + rng.IntN(3)
		// Every third kill aims at an EndTxn in flight.
		aim := round%3 == 0
		if !l.WaitFor(want, aim, time.Now().Add(90*time.Second)) {
			t.Fatalf("round %d: the members committed nothing for 90 s (%d commits so far)", round, l.Commits())
		}
		if aim {
			duringEnd++
		}
		br.kill()
		br.start(t)
	}

	// Every input record is committed once the group's offsets reach the input's end.
	inEnds, err := adm.ListEndOffsets(context.Background(), inTopic)
	if err != nil {
		t.Fatal(err)
	}
	if err := testwait.Until(120*time.Second, 100*time.Millisecond, func() error {
		fetched, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return err
		}
		var behind error
		inEnds.Each(func(o kadm.ListedOffset) {
			c, ok := fetched.Lookup(inTopic, o.Partition)
			if o.Offset > 0 && (!ok || c.At != o.Offset) {
				behind = fmt.Errorf("group offset of %s[%d] = %d, input's end %d", inTopic, o.Partition, c.At, o.Offset)
			}
		})
		return behind
	}); err != nil {
		t.Fatalf("pipeline did not finish: %v", err)
	}
	l.Stop()

	// No hanging transaction: once the members' transactions are decided, the last
	// stable offset of every output partition reaches its end.
	if err := testwait.Until(60*time.Second, 100*time.Millisecond, func() error {
		ends, err := adm.ListEndOffsets(context.Background(), outTopic)
		if err != nil {
			return err
		}
		stable, err := adm.ListCommittedOffsets(context.Background(), outTopic)
		if err != nil {
			return err
		}
		var hanging error
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := stable.Lookup(outTopic, o.Partition)
			if s.Offset != o.Offset {
				hanging = fmt.Errorf("%s[%d]: last stable offset %d, end %d", outTopic, o.Partition, s.Offset, o.Offset)
			}
		})
		return hanging
	}); err != nil {
		t.Fatalf("a transaction is left hanging: %v", err)
	}

	rc := readAll(t, addr, true)
	var lost, twice []string
	for i := 0; i < n; i++ {
		switch k := strconv.Itoa(i); {
		case rc[k] == 0:
			lost = append(lost, k)
		case rc[k] > 1:
			twice = append(twice, k)
		}
	}
	if len(lost) > 0 || len(twice) > 0 || len(rc) != n {
		t.Fatalf("read_committed after %d kills: %d lost %v, %d twice %v, %d distinct keys (want %d)",
			rounds, len(lost), head(lost), len(twice), head(twice), len(rc), n)
	}
	t.Logf("%d kills (%d aimed at an EndTxn in flight), %d transactions committed, exactly once", rounds, duringEnd, l.Commits())
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
