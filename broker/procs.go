package broker

import (
	"os"
	"runtime"
)

// SpareProc gives the Go scheduler one P (a slot for running goroutines) more than it
// would use by default, unless the operator set GOMAXPROCS, and returns the number in
// effect. A goroutine that returns from a blocking disk syscall needs a free P to go on;
// with every P busy it waits in the global run queue behind the runnable goroutines. The
// offsets journal makes every commit durable one fdatasync after another, so under load
// it lost that wait on each write: with 256 committers over 64 groups, each on its own
// connection, a broker on 2 cores made 12,000–13,000 durable commits/s with 2 Ps and
// 15,800–16,200/s with 3. With one or 16 committers it made no measurable difference.
//
// cmd/kaas calls it once at start; it is not done by Start, since GOMAXPROCS belongs to
// the whole process. Setting it stops Go's own updates of GOMAXPROCS when the container's
// CPU limit changes; a pod whose limit changes picks the new one up at its next restart.
func SpareProc() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := runtime.GOMAXPROCS(0) + 1
	runtime.GOMAXPROCS(n)
	return n
}
