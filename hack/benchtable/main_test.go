package main

import (
	"strings"
	"testing"
)

func TestParsePairsKaasWithEachPeer(t *testing.T) {
	in := `goos: linux
BenchmarkCommits/kgo/256x64-2         	       1	2000 ns/op	 20212 kaas_commits/s	  1.5 kaas_p99_ms	3047 kfake_sync_commits/s	44034 kfake_mem_commits/s	  1.2 kfake_mem_p99_ms
BenchmarkDataPath-2   	       1	 105.0 kaas_produce_MB/s	  75.5 kfake_produce_MB/s	 1.39 produce_ratio
--- BENCH: something
PASS
`
	rows, err := parse(strings.NewReader(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"Commits/kgo/256x64", "commits/s", "kfake_mem", 20212, 44034},
		{"Commits/kgo/256x64", "commits/s", "kfake_sync", 20212, 3047},
		{"Commits/kgo/256x64", "p99_ms", "kfake_mem", 1.5, 1.2},
		{"DataPath", "produce_MB/s", "kfake", 105, 75.5},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	var out strings.Builder
	write(&out, rows)
	for _, s := range []string{"0.46×", "6.63×", "1.25×", "1.39×", "lower", "higher"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

// Costs are lower-is-better, rates higher-is-better (the join storms report the
// broker's CPU time a request as cpu_us/req).
func TestLowerIsBetter(t *testing.T) {
	for figure, want := range map[string]bool{
		"ms": true, "cpu_s": true, "cpu_us/req": true, "bytes/group": true, "p99_ms": true,
		"joins/s": false, "commits/s": false, "produce_MB/s": false,
	} {
		if got := lowerIsBetter(figure); got != want {
			t.Errorf("lowerIsBetter(%q) = %t, want %t", figure, got, want)
		}
	}
}
