package testwait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records what For does to its test instead of failing the real one.
type fakeTB struct {
	testing.TB
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatal(args ...any) { f.fatals = append(f.fatals, fmt.Sprint(args...)) }

func TestForFailsWithTheLastErrorWhenNeverMet(t *testing.T) {
	var f fakeTB
	calls := 0
	start := time.Now()
	For(&f, 50*time.Millisecond, 5*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("attempt %d", calls)
	})
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the 50ms timeout", took)
	}
	if len(f.fatals) != 1 {
		t.Fatalf("Fatal called %d times, want once", len(f.fatals))
	}
	want := fmt.Sprintf("not within 50ms: attempt %d", calls)
	if f.fatals[0] != want {
		t.Fatalf("failed with %q, want %q (the last error)", f.fatals[0], want)
	}
	if calls < 2 {
		t.Fatalf("cond called %d times, want polling", calls)
	}
}

func TestForReturnsOnceMet(t *testing.T) {
	var f fakeTB
	calls := 0
	For(&f, time.Minute, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if len(f.fatals) != 0 {
		t.Fatalf("failed a test whose condition held: %v", f.fatals)
	}
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3 (stop at the first nil)", calls)
	}
}

// A timeout of zero still asks once: a condition that already holds passes.
func TestForAsksAtLeastOnce(t *testing.T) {
	var f fakeTB
	For(&f, 0, time.Millisecond, func() error { return nil })
	if len(f.fatals) != 0 {
		t.Fatalf("failed a condition that held at once: %v", f.fatals)
	}
}

// Until carries cond's last error for errors.Is.
func TestUntilWrapsTheLastError(t *testing.T) {
	sentinel := errors.New("still closed")
	err := Until(10*time.Millisecond, time.Millisecond, func() error { return sentinel })
	if !errors.Is(err, sentinel) {
		t.Fatalf("Until returned %v, want it to wrap %v", err, sentinel)
	}
	if !strings.Contains(err.Error(), "10ms") {
		t.Fatalf("Until's error %q does not name the timeout", err)
	}
	if err := Until(10*time.Millisecond, time.Millisecond, func() error { return nil }); err != nil {
		t.Fatalf("Until returned %v for a condition that held", err)
	}
}

func TestCondNamesWhatItWaitsFor(t *testing.T) {
	var f fakeTB
	For(&f, 5*time.Millisecond, time.Millisecond, Cond("the file written", func() bool { return false }))
	if len(f.fatals) != 1 || f.fatals[0] != "not within 5ms: the file written" {
		t.Fatalf("failed with %q, want the condition's name", f.fatals)
	}
	if err := Cond("held", func() bool { return true })(); err != nil {
		t.Fatalf("a condition that holds gave %v", err)
	}
}
