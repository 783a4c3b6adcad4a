// Package brokertest starts in-process brokers for tests: on 127.0.0.1:0, with a temp
// data dir, short timeouts, and a logger that writes through t.Log.
package brokertest

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/broker"
	"kaas/config"
)

// Config is the test default: one listener on a free loopback port, no HTTP unless asked,
// no initial rebalance delay, small session bounds.
func Config(t testing.TB) config.Config {
	c := config.Default()
	c.Listeners = []config.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 0}}
	c.DataDir = t.TempDir()
	c.HTTPListen = ""
	c.GroupInitialRebalanceDelay = 0
	c.GroupMinSessionTimeout = 10 * time.Millisecond
	return c
}

// Start starts a broker with Config(t) changed by mutate, and stops it when the test ends.
func Start(t testing.TB, mutate func(*config.Config)) *broker.Broker {
	t.Helper()
	c := Config(t)
	if mutate != nil {
		mutate(&c)
	}
	return StartWith(t, c)
}

// StartWith starts a broker with exactly c.
func StartWith(t testing.TB, c config.Config) *broker.Broker {
	t.Helper()
	b, err := broker.Start(c, Logger(t))
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

// Logger writes to the test log at Info (Debug with KAAS_TEST_DEBUG=1). Lines written
// after the test ended (a late actor) are dropped: t.Log would panic.
func Logger(t testing.TB) zerolog.Logger {
	tw := &testWriter{t: t}
	t.Cleanup(func() { tw.done.Store(true) })
	w := zerolog.ConsoleWriter{Out: tw, NoColor: true, TimeFormat: "15:04:05.000"}
	lvl := zerolog.InfoLevel
	if os.Getenv("KAAS_TEST_DEBUG") != "" {
		lvl = zerolog.DebugLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
