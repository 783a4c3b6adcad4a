package conn_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
	"kaas/internal/testwait"
)

// Each way a connection closes logs one line with its reason: a client that breaks the
// protocol a warning, counted by reason; a client that hangs up, and a connection the
// broker drains as it stops, a debug line.
func TestCloseLogsOneLineWithItsReason(t *testing.T) {
	b, sink, err := brokertest.StartLogged(t, brokertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testwait.For(t, 10*time.Second, 10*time.Millisecond, testwait.Cond("no "+what+" in the log", ok))
	}
	closes := func(reason string) []string {
		var out []string
		for _, ev := range []string{"connection_closed", "connection_closed_bad_input"} {
			for _, line := range sink.Events(ev) {
				if strings.Contains(line, `"reason":"`+reason+`"`) {
					out = append(out, line)
				}
			}
		}
		return out
	}

	// An API key the broker does not serve.
	bad := brokertest.Dial(t, b.Addr())
	frame := make([]byte, 14)
	binary.BigEndian.PutUint32(frame, 10)
	binary.BigEndian.PutUint16(frame[4:], 1000) // api key
	binary.BigEndian.PutUint32(frame[8:], 7)    // correlation id
	binary.BigEndian.PutUint16(frame[12:], 0xffff)
	bad.Write(frame)
	if !bad.Closed(10 * time.Second) {
		t.Fatal("a request for an unknown API key left its connection open")
	}
	waitFor("unknown_api_key close", func() bool { return len(closes("unknown_api_key")) > 0 })
	if l := sink.Events("connection_closed_bad_input"); len(l) != 1 ||
		!strings.Contains(l[0], `"level":"warn"`) || !strings.Contains(l[0], `"api_key":1000`) {
		t.Fatalf("bad input lines: %q", l)
	}

	// A client that hangs up after a request.
	gone := brokertest.Dial(t, b.Addr())
	gone.Roundtrip(kmsg.NewPtrApiVersionsRequest(), 1)
	_ = gone.C.Close()
	waitFor("client_closed close", func() bool { return len(closes("client_closed")) > 0 })

	// A connection still open when the broker stops is drained.
	_ = brokertest.Dial(t, b.Addr()).Roundtrip(kmsg.NewPtrApiVersionsRequest(), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("broker_stopping close", func() bool { return len(closes("broker_stopping")) > 0 })

	for _, reason := range []string{"unknown_api_key", "client_closed", "broker_stopping"} {
		if l := closes(reason); len(l) != 1 {
			t.Errorf("%d lines for a close of reason %s, want 1: %q", len(l), reason, l)
		}
	}
	if n := sink.Count(`"message":"connection_closed`); n != 3 {
		t.Errorf("%d close lines for 3 connections:\n%s", n, sink)
	}
	if n := value(b.Env().Metrics.ClosedBadInput.WithLabelValues("unknown_api_key")); n != 1 {
		t.Errorf("%v connections counted closed for unknown_api_key, want 1", n)
	}
}
