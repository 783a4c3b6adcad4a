package partition

import (
	"kaas/actors/actor"
)

// ask is one partition's part of a request: the message to send it (made around the
// promise its answer comes back through). A nil to means the answer is already known
// (an unknown topic) and preset. The manager gathers the answers with spawnCollect.
type ask struct {
	to  *actor.PID
	msg func(actor.Promise) any
}
