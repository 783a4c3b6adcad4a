package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"kaas/broker"
	"kaas/broker/brokertest"
)

// Two brokers of the dev registry on one data directory: the second refuses to start,
// naming the holder, and starts once the first has stopped. (Both used to serve it, and
// one overwrote the other's acknowledged records at the same offsets.)
func TestSecondBrokerOnADataDirRefusesToStart(t *testing.T) {
	c := brokertest.Config(t)
	first, err := broker.Start(c, brokertest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	second := c
	second.NodeID = 1
	if b, err := broker.Start(second, brokertest.Logger(t)); err == nil {
		_ = b.Stop(context.Background())
		t.Fatal("a second broker started on a data directory in use")
	} else if !strings.Contains(err.Error(), "data directory in use") || !strings.Contains(err.Error(), "node 0") {
		t.Fatalf("unclear refusal: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartWith(t, second)
	if b.Addr() == "" {
		t.Fatal("no listener")
	}
}
