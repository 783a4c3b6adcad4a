package scenario

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestIndexRoundTrip(t *testing.T) {
	for _, i := range []int{0, 7, 9999} {
		got, err := Index(Key(i), Value(i))
		if err != nil || got != i {
			t.Fatalf("Index(Key(%d), Value(%d)) = %d, %v", i, i, got, err)
		}
	}
	if _, err := Index(Key(1), Value(2)); err == nil {
		t.Fatal("a key and value of different records must not parse")
	}
}

func TestTrackerProvesEveryOffset(t *testing.T) {
	end := map[int32]int64{0: 2, 1: 1}
	tr := NewTracker(3, end)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tr.Consumed("a", 0, 0, Key(0), Value(0)))
	must(tr.Consumed("a", 1, 0, Key(2), Value(2)))
	if err := tr.Check(); err == nil || !strings.Contains(err.Error(), "0/1") {
		t.Fatalf("Check with partition 0 offset 1 unconsumed = %v", err)
	}
	must(tr.Consumed("b", 0, 1, Key(1), Value(1)))
	must(tr.Consumed("b", 0, 1, Key(1), Value(1))) // a duplicate is fine
	must(tr.Check())
	if s := tr.Stats(); s.Unique != 3 || s.Total != 4 || s.Members["b"] != 2 {
		t.Fatalf("Stats = %+v", s)
	}
	if f := tr.Frontier(); f[0] != 2 || f[1] != 1 {
		t.Fatalf("Frontier = %v", f)
	}
}

func TestTrackerRejectsWrongRecords(t *testing.T) {
	tr := NewTracker(3, map[int32]int64{0: 3})
	if err := tr.Consumed("a", 0, 0, Key(0), Value(0)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Consumed("a", 0, 0, Key(1), Value(1)); err == nil {
		t.Fatal("a position that yields two records must fail")
	}
	if err := tr.Wait(context.Background(), 3); err == nil {
		t.Fatal("Wait must return the kept error")
	}
}

func TestGateHoldsUntilOpened(t *testing.T) {
	tr := NewTracker(2, map[int32]int64{0: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tr.Admit(ctx); err == nil {
		t.Fatal("Admit must hold at a closed gate")
	}
	tr.Open(1)
	if err := tr.Admit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Consumed("a", 0, 0, Key(0), Value(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Admit(context.Background()) }()
	select {
	case <-done:
		t.Fatal("Admit passed a reached gate")
	case <-time.After(5 * time.Millisecond):
	}
	tr.Open(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCheckEnd(t *testing.T) {
	if err := CheckEnd(map[int32]int64{0: 5, 1: 5}, 2, 10); err != nil {
		t.Fatal(err)
	}
	if err := CheckEnd(map[int32]int64{0: 10, 1: 0}, 2, 10); err == nil {
		t.Fatal("an empty partition must fail")
	}
	if err := CheckEnd(map[int32]int64{0: 6, 1: 5}, 2, 10); err == nil {
		t.Fatal("a record too many must fail")
	}
}
