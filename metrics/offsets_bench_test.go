package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The cost the actors pay to publish (per committed partition, per high-watermark move)
// and what a scrape of many groups costs.

func BenchmarkPublishCommit(b *testing.B) {
	g := NewOffsets(nil).Group("g")
	for i := 0; b.Loop(); i++ {
		g.Set("orders", int32(i&63), int64(i))
	}
}

func BenchmarkPublishLogEnd(b *testing.B) {
	e := NewOffsets(nil).LogEnd("orders", 0)
	for i := 0; b.Loop(); i++ {
		e.Set(int64(i))
	}
}

// BenchmarkScrape gathers 1,000 groups of 10 partitions each (10,000 committed and lag
// series) over 10 topics of 10 partitions.
func BenchmarkScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	o := NewOffsets(reg)
	for t := 0; t < 10; t++ {
		for p := 0; p < 10; p++ {
			o.LogEnd(fmt.Sprintf("t%d", t), int32(p)).Set(1000)
		}
	}
	for g := 0; g < 1000; g++ {
		gr := o.Group(fmt.Sprintf("group-%d", g))
		for p := 0; p < 10; p++ {
			gr.Set(fmt.Sprintf("t%d", g%10), int32(p), 500)
		}
	}
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
