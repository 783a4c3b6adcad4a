package conn

import (
	"time"
)

// askTopics sends msg to the topics manager. Without one (a broker started with no data
// path) every data API answers the error its caller gives.
func askTopics(c *Call, msg any) {
	c.Env.System.Send(c.Env.Topics, msg)
}

// noTopics reports whether there is no topics manager to ask.
func noTopics(c *Call) bool { return c.Env.Topics == nil }

func msDuration(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }
