package logs

import (
	"strings"
	"testing"
)

func TestID(t *testing.T) {
	if got := ID("my-group"); got != "my-group" {
		t.Fatalf("short id changed to %q", got)
	}
	exact := strings.Repeat("a", MaxIDBytes)
	if got := ID(exact); got != exact {
		t.Fatal("an id of MaxIDBytes was cut")
	}
	long := strings.Repeat("x", 1<<20)
	got := ID(long)
	if len(got) > MaxIDBytes+64 || !strings.HasPrefix(got, strings.Repeat("x", MaxIDBytes)) ||
		!strings.Contains(got, "1048576 bytes") {
		t.Fatalf("1 MiB id logged as %d bytes: %.400q", len(got), got)
	}
	// Two long ids with the same prefix are told apart by their hash.
	if other := ID(long[:len(long)-1] + "y"); other == got {
		t.Fatal("two long ids with one prefix log the same")
	}
	// A cut never splits a UTF-8 sequence.
	u := strings.Repeat("é", MaxIDBytes)
	if s := ID(u); !strings.HasPrefix(s, strings.Repeat("é", MaxIDBytes/2)) || strings.Contains(s, "\uFFFD") {
		t.Fatalf("cut of a UTF-8 id: %.300q", s)
	}
}

func TestIDs(t *testing.T) {
	ids := make([]string, MaxIDs+5)
	for i := range ids {
		ids[i] = strings.Repeat("g", i+1)
	}
	ids[0] = strings.Repeat("x", 1<<20)
	got := IDs(ids)
	if len(got) != MaxIDs {
		t.Fatalf("%d ids listed, want at most %d", len(got), MaxIDs)
	}
	if got[0] != ID(ids[0]) || got[MaxIDs-1] != ids[MaxIDs-1] {
		t.Fatalf("ids not bounded one by one: %.100q … %q", got[0], got[MaxIDs-1])
	}
	if got := IDs(nil); len(got) != 0 {
		t.Fatalf("no ids listed as %q", got)
	}
}
