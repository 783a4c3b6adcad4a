//go:build !linux

package partition

// lowPriority is a no-op where threads have no priority of their own.
func lowPriority() {}

// atLowPriority runs f.
func atLowPriority(f func() error) error { return f() }
