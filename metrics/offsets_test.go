package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestOffsetsLag(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := NewOffsets(reg)
	end := o.LogEnd("t", 0)
	end.Set(10)
	g := o.Group("g")
	g.Set("t", 0, 4)
	g.Set("t", 1, 2) // a partition led elsewhere: committed, no lag
	if v := lagOf(t, reg); v != 6 {
		t.Fatalf("lag %v, want 6", v)
	}
	if n := count(t, reg, "kaas_group_committed_offset"); n != 2 {
		t.Fatalf("%d committed series, want 2", n)
	}

	// A commit past the end (the log was cut back) is lag 0, never negative.
	g.Set("t", 0, 12)
	if v := lagOf(t, reg); v != 0 {
		t.Fatalf("lag %v, want 0", v)
	}

	// A new incarnation replaces the old; the old one's Remove leaves the new alone.
	g2 := o.Group("g")
	g2.Replace(map[TopicPartition]int64{{"t", 0}: 7})
	g.Remove()
	if v := lagOf(t, reg); v != 3 {
		t.Fatalf("lag %v after the old incarnation left, want 3", v)
	}
	end2 := o.LogEnd("t", 0)
	end2.Set(9)
	end.Remove()
	if v := lagOf(t, reg); v != 2 {
		t.Fatalf("lag %v, want 2", v)
	}
	// Gone: no series at all.
	g2.Remove()
	end2.Remove()
	if n := count(t, reg, ""); n != 0 {
		t.Fatalf("%d series after every actor left", n)
	}
	// Nil records nothing and does not panic.
	var none *Offsets
	none.Group("x").Set("t", 0, 1)
	none.LogEnd("t", 0).Set(1)
}

func lagOf(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "kaas_group_lag" && len(f.Metric) == 1 {
			l := map[string]string{}
			for _, p := range f.Metric[0].Label {
				l[p.GetName()] = p.GetValue()
			}
			if l["group"] != "g" || l["topic"] != "t" || l["partition"] != "0" {
				t.Fatalf("lag series labelled %v", l)
			}
			return f.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no single kaas_group_lag series")
	return 0
}

// count is the number of series of family name ("" every family).
func count(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if name == "" || f.GetName() == name {
			n += len(f.Metric)
		}
	}
	return n
}

// A group's offsets read the same whether they are few (a slice) or many (a map), across
// the change from one to the other, deletes and a Replace.
func TestGroupOffsetsFewAndMany(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := NewOffsets(reg)
	g := o.Group("g")
	for p := range int32(fewOffsets + 4) {
		g.Set("t", p, int64(p))
		g.Set("t", p, int64(p)+100) // an update, not a second entry
		if n := count(t, reg, "kaas_group_committed_offset"); n != int(p)+1 {
			t.Fatalf("%d committed series after %d partitions", n, p+1)
		}
	}
	g.Delete("t", 0)
	g.Delete("t", 0)
	if n := count(t, reg, "kaas_group_committed_offset"); n != fewOffsets+3 {
		t.Fatalf("%d committed series after a delete, want %d", n, fewOffsets+3)
	}
	g.Replace(map[TopicPartition]int64{{"t", 0}: 5, {"t", 1}: 6})
	g.Delete("t", 1)
	if n := count(t, reg, "kaas_group_committed_offset"); n != 1 {
		t.Fatalf("%d committed series after Replace and a delete, want 1", n)
	}
	end := o.LogEnd("t", 0)
	end.Set(9)
	if v := lagOf(t, reg); v != 4 {
		t.Fatalf("lag %v, want 4", v)
	}
}
