package conn

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/actors/actor/actortest"
	"kaas/config"
	"kaas/metrics"
	"kaas/registry"
)

// connections.max.idle.ms on synctest's clock, over net.Pipe (whose deadlines run on
// that clock): requests four fifths of the timeout apart keep a connection open for
// three timeouts; then, silent, it is open 1 ms before the timeout after its last
// request and closed at it. On the real clock a loaded machine could stretch a gap past
// the timeout; here the durations are exact.
func TestIdleTimeoutOnTheFakeClock(t *testing.T) {
	actortest.Bubble(t, func(t *testing.T) {
		const idle = time.Second
		cfg := config.Default()
		env := &Env{
			Config: &cfg, ClusterID: "test", System: actor.NewSystem(zerolog.Nop()),
			Registry: registry.NewDev(registry.Broker{}), Metrics: metrics.New(), Log: zerolog.Nop(),
		}
		client, server := net.Pipe()
		pid := env.System.Spawn(Props(Config{Env: env, Conn: server, Listener: "PLAINTEXT",
			MaxFrame: 1 << 20, Idle: idle, MaxInflight: 8}))
		defer func() {
			client.Close()
			_ = env.System.Stop(pid, 5*time.Second)
			if !env.System.Shutdown() {
				t.Error("the actor system's goroutines did not end")
			}
		}()

		start := time.Now()
		for time.Since(start) < 3*idle {
			if _, err := roundtrip(t, client, kmsg.NewPtrApiVersionsRequest()); err != nil {
				t.Fatalf("request %v after the first, on a busy connection: %v", time.Since(start), err)
			}
			time.Sleep(idle * 4 / 5)
		}
		if _, err := roundtrip(t, client, kmsg.NewPtrApiVersionsRequest()); err != nil {
			t.Fatalf("last request on a busy connection: %v", err)
		}
		_ = client.SetReadDeadline(time.Time{})
		closed := make(chan error, 1)
		go func() {
			_, err := client.Read(make([]byte, 1))
			closed <- err
		}()
		time.Sleep(idle - time.Millisecond)
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("closed (%v) before the idle timeout", err)
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("open at the idle timeout after the last request")
		}
	})
}
