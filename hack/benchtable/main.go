// Command benchtable reads `go test -bench` output on stdin, passes it through to stdout,
// and ends it with one table: every figure a benchmark reports for kaas (a metric named
// kaas_<figure>) beside the same figure for kfake (kfake_<figure>, kfake_mem_<figure>,
// kfake_sync_<figure>), as a ratio kaas / kfake. `make bench` pipes through it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one figure of one benchmark, kaas beside one kfake.
type row struct {
	bench, figure, peer string
	kaas, kfake         float64
}

// peers are kfake's variants, named after the prefix of their metrics.
var peers = []string{"kfake_mem_", "kfake_sync_", "kfake_"}

// parse reads benchmark result lines ("BenchmarkX-2  1  123 ns/op  4.5 kaas_y/s ...")
// and returns their rows, in the order they were read.
func parse(r io.Reader, echo io.Writer) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if echo != nil {
			fmt.Fprintln(echo, line)
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		metrics := map[string]float64{}
		var order []string
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			metrics[f[i+1]] = v
			order = append(order, f[i+1])
		}
		bench := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(bench, '-'); i > 0 {
			if _, err := strconv.Atoi(bench[i+1:]); err == nil {
				bench = bench[:i]
			}
		}
		for _, name := range order {
			figure, ok := strings.CutPrefix(name, "kaas_")
			if !ok {
				continue
			}
			for _, p := range peers {
				if v, ok := metrics[p+figure]; ok {
					rows = append(rows, row{bench: bench, figure: figure, peer: strings.TrimSuffix(p, "_"), kaas: metrics[name], kfake: v})
				}
			}
		}
	}
	return rows, sc.Err()
}

// lowerIsBetter tells figures where less is better (latencies, memory) from rates.
func lowerIsBetter(figure string) bool {
	for _, s := range []string{"_ms", "ms", "_s", "bytes", "MiB", "/group", "/conn", "/req"} {
		if strings.HasSuffix(figure, s) || strings.Contains(figure, "p99") || strings.Contains(figure, "p50") {
			return true
		}
	}
	return false
}

func write(w io.Writer, rows []row) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].bench < rows[j].bench })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\tfigure\tkaas\tpeer\tpeer's\tkaas/peer\tbetter\t")
	for _, r := range rows {
		ratio := "-"
		if r.kfake != 0 {
			ratio = strconv.FormatFloat(r.kaas/r.kfake, 'f', 2, 64) + "×"
		}
		better := "higher"
		if lowerIsBetter(r.figure) {
			better = "lower"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.bench, r.figure, num(r.kaas), r.peer, num(r.kfake), ratio, better)
	}
	tw.Flush()
}

func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func main() {
	rows, err := parse(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	fmt.Println()
	fmt.Println("kaas beside kfake, every benchmark of this run:")
	write(os.Stdout, rows)
}
