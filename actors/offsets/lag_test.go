package offsets

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
	"kaas/metrics"
)

// settled has the offsets actor pid take what it was sent before: the journal gives it a
// batch's outcome before the batch's commits are answered, and a request sent after the
// answer is served after that outcome, with its metrics published.
func (j *journalHarness) settled(pid *actor.PID) struct{} {
	j.t.Helper()
	j.fetchFrom(pid)
	return struct{}{}
}

// committedSeries counts the kaas_group_committed_offset series of group (read after
// settled).
func committedSeries(t *testing.T, reg *prometheus.Registry, group string, _ struct{}) (n int, offset float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "kaas_group_committed_offset" {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "group" && l.GetValue() == group {
					n++
					offset = m.GetGauge().GetValue()
				}
			}
		}
	}
	return n, offset
}

// The offsets actor publishes what it serves (a journaled commit), and withdraws it once
// the group is no longer its own: fenced when the gate closes, or stopped.
func TestCommittedOffsetsPublishedWhileOwned(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	reg := prometheus.NewRegistry()
	m := NewMetrics(nil)
	m.Offsets = metrics.NewOffsets(reg)
	var open atomic.Bool
	open.Store(true)
	cfg := j.cfg
	cfg.Group, cfg.Metrics = "owned", m
	cfg.Gate = func() bool { return open.Load() }
	pid := j.sys.Spawn(Props(cfg))
	if got := j.commitTo(pid, entry("t", 0, 5)); got[0] != 0 {
		t.Fatalf("commit: %v", got)
	}
	if n, off := committedSeries(t, reg, "owned", j.settled(pid)); n != 1 || off != 5 {
		t.Fatalf("%d series at %v after a commit of 5, want 1 at 5", n, off)
	}
	open.Store(false)
	if got := j.commitTo(pid, entry("t", 0, 6)); got[0] != kerr.NotCoordinator.Code {
		t.Fatalf("commit after the gate closed: %v", got)
	}
	if n, _ := committedSeries(t, reg, "owned", j.settled(pid)); n != 0 {
		t.Fatalf("a fenced group still reports %d committed series", n)
	}

	cfg.Group, cfg.Gate = "stopped", nil
	pid = j.sys.Spawn(Props(cfg))
	if got := j.commitTo(pid, entry("t", 1, 3)); got[0] != 0 {
		t.Fatalf("commit: %v", got)
	}
	if n, _ := committedSeries(t, reg, "stopped", j.settled(pid)); n != 1 {
		t.Fatalf("%d series, want 1", n)
	}
	if err := j.sys.Poison(pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, _ := committedSeries(t, reg, "stopped", struct{}{}); n != 0 {
		t.Fatalf("a stopped group still reports %d committed series", n)
	}
}

// A committed offset that is not a position (-1 "none", -2 kafkajs's "earliest") is not
// published, so it makes no lag series, here or in the dashboard's lag across brokers
// (the leader's log end minus kaas_group_committed_offset, which would read the log end
// plus 2): Apache's tools show no offset and no lag for such a partition. A position
// next to it still has its lag, and a position committed over it is published again.
func TestNegativeCommittedOffsetHasNoLag(t *testing.T) {
	j := newJournalHarness(t, "g", ckptNever)
	reg := prometheus.NewRegistry()
	m := NewMetrics(nil)
	m.Offsets = metrics.NewOffsets(reg)
	m.Offsets.LogEnd("t", 0).Set(10)
	m.Offsets.LogEnd("t", 1).Set(10)
	cfg := j.cfg
	cfg.Group, cfg.Metrics = "reset", m
	pid := j.sys.Spawn(Props(cfg))
	if got := j.commitTo(pid, entry("t", 0, -2), entry("t", 1, 4)); got[0] != 0 || got[1] != 0 {
		t.Fatalf("commit: %v", got)
	}
	committed, lag := seriesByPartition(t, reg, j.settled(pid))
	if len(committed) != 1 || committed["1"] != 4 {
		t.Fatalf("committed series %v, want only partition 1 at 4", committed)
	}
	if len(lag) != 1 || lag["1"] != 6 {
		t.Fatalf("lag series %v, want only partition 1 at 6", lag)
	}
	if got := j.commitTo(pid, entry("t", 0, 3), entry("t", 1, -1)); got[0] != 0 || got[1] != 0 {
		t.Fatalf("second commit: %v", got)
	}
	committed, lag = seriesByPartition(t, reg, j.settled(pid))
	if len(committed) != 1 || committed["0"] != 3 || len(lag) != 1 || lag["0"] != 7 {
		t.Fatalf("committed series %v, lag %v; want only partition 0 at 3 with lag 7", committed, lag)
	}
	// A fresh incarnation publishes what it loads the same way.
	if err := j.sys.Poison(pid, waitFor); err != nil {
		t.Fatal(err)
	}
	pid = j.sys.Spawn(Props(cfg))
	j.fetchFrom(pid)
	if committed, _ = seriesByPartition(t, reg, j.settled(pid)); len(committed) != 1 || committed["0"] != 3 {
		t.Fatalf("committed series after a reload %v, want only partition 0 at 3", committed)
	}
}

// seriesByPartition is the kaas_group_committed_offset and kaas_group_lag values in reg,
// by partition.
func seriesByPartition(t *testing.T, reg *prometheus.Registry, _ struct{}) (committed, lag map[string]float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	committed, lag = map[string]float64{}, map[string]float64{}
	for _, f := range fams {
		for _, mm := range f.Metric {
			var p string
			for _, l := range mm.Label {
				if l.GetName() == "partition" {
					p = l.GetValue()
				}
			}
			switch f.GetName() {
			case "kaas_group_committed_offset":
				committed[p] = mm.GetGauge().GetValue()
			case "kaas_group_lag":
				lag[p] = mm.GetGauge().GetValue()
			}
		}
	}
	return committed, lag
}
