package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/broker"
	"kaas/config"
	"kaas/logs/logtest"
)

// StartLogged starts a broker on c whose JSON log, every level, goes to the returned
// sink, printed to the test log if the test fails; the broker stops when the test ends.
// A failed start is returned, not fatal.
func StartLogged(t testing.TB, c config.Config, opts ...broker.Option) (*broker.Broker, *logtest.Sink, error) {
	t.Helper()
	sink := &logtest.Sink{}
	b, err := broker.Start(c, zerolog.New(sink).With().Timestamp().Logger(), opts...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", sink)
		}
	})
	if err != nil {
		return nil, sink, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b, sink, nil
}
