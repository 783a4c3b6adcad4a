package conn

import (
	"regexp"
	"testing"
)

// Every close reason has a name, used as a log field and a metric label, so the names
// must be distinct snake_case words, and each reason must say which event it logs.
func TestCloseReasonsAreNamed(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]closeReason{}
	for r := closeReason(1); r < numCloseReasons; r++ {
		info := closeReasons[r]
		if !snake.MatchString(info.name) {
			t.Errorf("reason %d is named %q, want snake_case", r, info.name)
		}
		if other, dup := seen[info.name]; dup {
			t.Errorf("reasons %d and %d are both named %q", other, r, info.name)
		}
		seen[info.name] = r
		if !snake.MatchString(info.event) {
			t.Errorf("reason %s logs event %q, want snake_case", r, info.event)
		}
		if info.drain && info.kind != closeOrderly {
			t.Errorf("reason %s drains, but only an orderly close answers what it read", r)
		}
	}
	if s := closeReason(0).String(); s != "unknown" {
		t.Errorf("no reason reads %q", s)
	}
	if s := numCloseReasons.String(); s != "unknown" {
		t.Errorf("a reason past the table reads %q", s)
	}
}
