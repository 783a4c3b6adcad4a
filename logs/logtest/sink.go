// Package logtest holds what tests share for looking at kaas's logs.
package logtest

import (
	"bytes"
	"strings"
	"sync"
)

// Sink keeps a broker's JSON log lines for assertions; the broker's actors write to
// it while the test reads.
type Sink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything logged so far.
func (s *Sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count is how many lines hold sub.
func (s *Sink) Count(sub string) int {
	n := 0
	for _, line := range strings.Split(s.String(), "\n") {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

// Events are the lines whose message is msg.
func (s *Sink) Events(msg string) []string {
	var out []string
	for _, line := range strings.Split(s.String(), "\n") {
		if strings.Contains(line, `"message":"`+msg+`"`) {
			out = append(out, line)
		}
	}
	return out
}
