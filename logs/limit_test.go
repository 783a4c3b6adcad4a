package logs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLimiter: the first event goes through, those within the interval are held back,
// and the next one after it carries their count.
func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(time.Second)
	l.now = func() time.Time { return now }
	var out bytes.Buffer
	log := zerolog.New(&out)
	for i := 0; i < 330; i++ {
		l.Event(log.Error()).Int("i", i).Msg("disk_full")
		now = now.Add(time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || strings.Contains(lines[0], "suppressed") || !strings.Contains(lines[0], `"i":0`) {
		t.Fatalf("330 events within a second logged:\n%s", out.String())
	}
	now = now.Add(time.Second)
	l.Event(log.Error()).Int("i", 330).Msg("disk_full")
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"suppressed":329`) {
		t.Fatalf("the event after the interval does not carry the count:\n%s", out.String())
	}
	// A quiet interval: the next event goes through with nothing suppressed.
	now = now.Add(5 * time.Second)
	l.Event(log.Error()).Msg("disk_full")
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[2], "suppressed") {
		t.Fatalf("after a quiet interval:\n%s", out.String())
	}
	// A disabled level is nil already: nothing counted, nothing logged.
	nop := zerolog.Nop()
	if e := l.Event(nop.Error()); e != nil {
		t.Fatal("a disabled event let through")
	}
}
