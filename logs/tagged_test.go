package logs

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"
)

// A Tagged logger writes its fields on each event, and nothing below the base level.
func TestTagged(t *testing.T) {
	var buf bytes.Buffer
	base := zerolog.New(&buf).Level(zerolog.InfoLevel)
	l := Tag(&base, "group", "g1").And("file", "g1.json")
	l.Debug().Msg("hidden")
	l.Info().Int("n", 3).Msg("seen")
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("one event expected, got %q: %v", buf.String(), err)
	}
	if got["group"] != "g1" || got["file"] != "g1.json" || got["message"] != "seen" || got["n"] != 3.0 {
		t.Fatalf("event %v", got)
	}
	buf.Reset()
	Tag(&base, "group", "g2").Warn().Msg("one")
	got = nil
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil || got["group"] != "g2" {
		t.Fatalf("event %q", buf.String())
	}
	if _, ok := got["file"]; ok {
		t.Fatalf("second field without And: %v", got)
	}
}
