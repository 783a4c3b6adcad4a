package partition

import (
	"runtime"
	"syscall"
)

// cleanerNice is the nice value of the thread a cleaning pass runs on: the pass is a
// CPU-bound loop, and on a broker with few cores the kernel should give the threads
// serving requests the processor first.
const cleanerNice = 19

// lowPriority locks the calling goroutine to its thread and lowers that thread's
// priority to cleanerNice. The goroutine must end without unlocking it, so that the
// runtime retires the thread with its priority rather than hand it to other goroutines.
// A thread whose priority cannot be changed runs the pass at its own.
func lowPriority() {
	runtime.LockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), cleanerNice)
}

// atLowPriority runs f on a goroutine of its own, on a thread at cleanerNice that the
// runtime retires after it, and waits for it.
func atLowPriority(f func() error) error {
	done := make(chan error, 1)
	go func() {
		lowPriority()
		done <- f()
	}()
	return <-done
}
