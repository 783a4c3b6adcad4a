package broker

import (
	"runtime"
	"testing"
)

func TestSpareProc(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	t.Setenv("GOMAXPROCS", "")
	if got := SpareProc(); got != before+1 || runtime.GOMAXPROCS(0) != before+1 {
		t.Fatalf("SpareProc %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), before+1)
	}
	runtime.GOMAXPROCS(before)
	// The operator's GOMAXPROCS is kept as it is.
	t.Setenv("GOMAXPROCS", "1")
	if got := SpareProc(); got != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with GOMAXPROCS set: SpareProc %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), before)
	}
}
