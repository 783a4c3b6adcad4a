package logs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestPanic(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	func() {
		defer func() {
			if r := recover(); r != nil {
				Panic(log.Error(), r).Msg("thing_panicked")
			}
		}()
		panic(strings.Repeat("x", 10000))
	}()
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if p, _ := line["panic"].(string); len(p) > 400 {
		t.Fatalf("panic value logged whole: %d bytes", len(p))
	}
	if s, _ := line["stack"].(string); !strings.Contains(s, "TestPanic") {
		t.Fatalf("stack lacks the panicking function: %.200s", s)
	}
}
