package broker_test

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/broker/brokertest"
)

// BenchmarkApiVersions measures ApiVersions requests/s over loopback: 8 connections, each
// keeping 32 requests in flight.
func BenchmarkApiVersions(b *testing.B) {
	br := brokertest.Start(b, nil)
	const conns, depth = 8, 32
	per := b.N/conns + 1
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < conns; i++ {
		c := brokertest.Dial(b, br.Addr())
		req := apiVersions(3)
		frame := c.Encode(req, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() {
				buf := make([]byte, 0, len(frame)*depth)
				for sent := 0; sent < per; {
					buf = buf[:0]
					for j := 0; j < depth && sent < per; j++ {
						buf = append(buf, frame...)
						sent++
					}
					if _, err := c.C.Write(buf); err != nil {
						return
					}
				}
			}()
			for got := 0; got < per; got++ {
				if _, err := c.ReadFrame(10 * time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*conns)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkIdleConnectionMemory reports the heap and goroutine stack held per idle
// connection (its actor, reader and writer goroutines, buffers).
func BenchmarkIdleConnectionMemory(b *testing.B) {
	br := brokertest.Start(b, nil)
	const n = 2000
	measure := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse
	}
	for i := 0; i < b.N; i++ {
		before := measure()
		conns := make([]net.Conn, 0, n)
		for j := 0; j < n; j++ {
			c := brokertest.Dial(b, br.Addr())
			c.Roundtrip(kmsg.NewPtrApiVersionsRequest(), 1) // the actor is up and idle
			conns = append(conns, c.C)
		}
		after := measure()
		// Client-side sockets live in this process too; subtract a loopback-only baseline
		// by reporting the total, which is an upper bound on the broker's cost.
		b.ReportMetric(float64(after-before)/n, "bytes/conn")
		for _, c := range conns {
			c.Close()
		}
	}
}
