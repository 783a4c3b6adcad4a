package partition

import (
	"math"
	"testing"
	"time"

	"kaas/config"
)

// The cleaner's throttle holds what passes to its rate over each check interval: on a
// clock that moves only as work is done and as it sleeps, 10 MiB at 1 MiB/s take 10 s,
// less what the last check interval let through unchecked (as Apache's Throttler).
func TestThrottleHoldsItsRate(t *testing.T) {
	clock := time.Unix(0, 0)
	th := NewThrottle(1 << 20)
	th.start, th.now = clock, func() time.Time { return clock }
	slept := time.Duration(0)
	th.sleep = func(d time.Duration) { slept += d; clock = clock.Add(d) }
	for i := 0; i < 10*16; i++ { // 64 KiB chunks, each 10 ms of work: 6.4 MiB/s unthrottled
		clock = clock.Add(10 * time.Millisecond)
		th.wait(64 << 10)
	}
	took := clock.Sub(time.Unix(0, 0))
	if took < 9*time.Second || took > 10*time.Second+throttleCheck {
		t.Fatalf("10 MiB at 1 MiB/s took %v (slept %v)", took, slept)
	}
	if NewThrottle(math.MaxFloat64) != nil || NewThrottle(math.Inf(1)) != nil {
		t.Fatal("Apache's default rate throttles")
	}
	var none *Throttle
	none.wait(1 << 30) // no bound: returns at once
}

// The broker's log.cleaner.* settings reach a compacted topic's partitions: the key map
// holds what Apache's dedupe buffer of that size holds, and every partition shares the
// manager's throttle.
func TestCleanerBrokerSettings(t *testing.T) {
	c := config.Default()
	c.LogCleanerDedupeBufferSize = 24 << 10
	c.LogCleanerIOMaxBytesPerSecond = 5 << 20
	m := &manager{cfg: Config{Broker: &c}, throttle: NewThrottle(c.LogCleanerIOMaxBytesPerSecond)}
	cc := m.cleanerConfig(map[string]string{"cleanup.policy": "compact"})
	if cc == nil || cc.MaxKeys != 921 || cc.Throttle != m.throttle || cc.Throttle.rate != 5<<20 {
		t.Fatalf("cleaner config %+v", cc)
	}
	if m.cleanerConfig(map[string]string{}) != nil {
		t.Fatal("a delete topic got a cleaner")
	}
}
