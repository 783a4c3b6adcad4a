package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCleanerSeries: a partition's series exist while it is registered (its last clean
// time only after its first pass), a replaced incarnation's Remove leaves its successor's,
// and a nil Cleaner records nothing.
func TestCleanerSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewCleaner(reg)
	count := func(name string) int {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	old := c.Partition("t", 0)
	old.SetDirtyRatio(0.4)
	if count("kaas_log_cleaner_dirty_ratio") != 1 || count("kaas_log_cleaner_last_clean_timestamp_seconds") != 0 {
		t.Fatal("a partition never cleaned: want its dirty ratio and no last clean time")
	}
	cur := c.Partition("t", 0) // a restarted actor
	cur.SetCleaned(1500)
	old.Remove()
	if count("kaas_log_cleaner_last_clean_timestamp_seconds") != 1 {
		t.Fatal("the old incarnation's Remove withdrew its successor's series")
	}
	c.Cleaned(1000, 300)
	c.Failed("swap")
	if v := testutil.ToFloat64(c.reclaimed); v != 700 {
		t.Fatalf("reclaimed %v, want 700", v)
	}
	if v := testutil.ToFloat64(c.errors.WithLabelValues("swap")); v != 1 {
		t.Fatalf("swap errors %v, want 1", v)
	}
	cur.Remove()
	if count("kaas_log_cleaner_dirty_ratio") != 0 {
		t.Fatal("a removed partition is still exported")
	}

	var none *Cleaner
	none.Cleaned(1, 1)
	none.Failed("clean")
	p := none.Partition("t", 1)
	p.SetDirtyRatio(1)
	p.SetCleaned(1)
	p.Remove()
}
