package logs

import (
	"fmt"
	"runtime/debug"

	"github.com/rs/zerolog"
)

// Panic adds a recovered panic to e the one way kaas logs them: the value (capped like
// an id, as it may carry client data) as "panic" and the goroutine's stack as "stack".
// Call it in the deferred function that recovered, so the stack is the panicking one.
func Panic(e *zerolog.Event, r any) *zerolog.Event {
	return e.Str("panic", ID(fmt.Sprint(r))).Bytes("stack", debug.Stack())
}
