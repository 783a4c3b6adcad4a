package actor

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A Limiter of 1 runs its works one at a time in order of arrival, the later ones
// waiting in its queue, and every result reaches the actor that asked.
func TestLimiterRunsInTurn(t *testing.T) {
	sys := NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	l := NewLimiter(1)
	release := make(chan struct{})
	results := make(chan int, 8)
	waited := make(chan []bool, 1)
	pid := sys.Spawn(PropsOf(func() Actor {
		return receiveFunc(func(ctx Context) {
			switch m := ctx.Message().(type) {
			case string:
				var w []bool
				w = append(w, l.Background(ctx, func() any { <-release; return 0 }))
				for i := 1; i < 4; i++ {
					w = append(w, l.Background(ctx, func() any { return i }))
				}
				waited <- w
			case int:
				results <- m
			}
		})
	}))
	defer func() { _ = sys.Stop(pid, 5*time.Second) }()
	sys.Send(pid, "go")
	if w := <-waited; w[0] || !w[1] || !w[2] || !w[3] {
		t.Fatalf("waits %v, want the first to start and the others to wait", w)
	}
	select {
	case r := <-results:
		t.Fatalf("result %d before the first work ended", r)
	default:
	}
	close(release)
	for want := range 4 {
		select {
		case got := <-results:
			if got != want {
				t.Fatalf("result %d, want %d (in order)", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("result %d did not come", want)
		}
	}
}
