package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the ACL and SCRAM handlers (29-31, 50, 51) share: their file writes (an fsync, and
// a flock another broker may hold for a moment) run on a goroutine the actor system owns,
// never in the connection's Receive; the answer comes back through the call's promise.

// offReceive runs work off the connection actor and answers c with convert(work()).
func offReceive(c *Call, work func() any, convert func(any) kmsg.Response) {
	pr := c.Await(convert)
	run := func() { pr.Resolve(work()) }
	if !c.Env.System.Go(run) {
		run()
	}
}
