package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/internal/testwait"
)

// apiVersions sends one ApiVersions request on c and reads its answer.
func apiVersions(c net.Conn) error {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "pause-test", "1"
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pause-test")).AppendRequest(nil, req, 1)
	if _, err := c.Write(frame); err != nil {
		return err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(size[:])))
	return err
}

// TestPausedBrokerConnectionsEnd: a broker stopped (SIGSTOP) past its lease has its
// connections ended and its dials refused by its watchdog, as a killed broker's are, so
// clients go to the peers that adopt what it owned instead of waiting out their own
// timeouts. Resumed, it listens again and serves.
func TestPausedBrokerConnectionsEnd(t *testing.T) {
	c := newCluster(t, false)
	addr := c.seeds()[0]
	var held net.Conn
	// Polled: the broker is starting.
	testwait.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		cn, err := net.Dial("tcp", addr)
		if err == nil {
			if err = apiVersions(cn); err == nil {
				held = cn
				return nil
			}
			cn.Close()
		}
		return fmt.Errorf("broker 0 never answered: %w", err)
	})
	defer held.Close()

	c.procs[0].Pause()
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			c.procs[0].Resume()
		}
	}()
	// Before the watchdog, this read waited for the whole pause.
	_ = held.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := held.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a paused broker's connection stayed open 30 s")
	}
	t.Logf("connection ended %v after the pause: %v", time.Since(paused).Round(time.Millisecond), err)
	if cn, err := net.DialTimeout("tcp", addr, 10*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if cn != nil {
			cn.Close()
		}
		t.Fatalf("dial of the paused broker: %v, want connection refused", err)
	}

	c.procs[0].Resume()
	resumed = true
	// Polled: the resumed broker listens again.
	testwait.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		cn, err := net.Dial("tcp", addr)
		if err == nil {
			_ = cn.SetDeadline(time.Now().Add(10 * time.Second))
			err = apiVersions(cn)
			cn.Close()
			if err == nil {
				return nil
			}
		}
		return fmt.Errorf("resumed broker 0 never answered again: %w", err)
	})
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(c.dir), "broker.log"))
	for _, ev := range []string{"pause_watchdog_fired", "listener_relistened"} {
		if !strings.Contains(string(b), ev) {
			t.Errorf("the brokers' log has no %s", ev)
		}
	}
}
