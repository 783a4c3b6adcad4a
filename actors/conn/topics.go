package conn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// askTopics sends msg to the topics manager. Without one (a broker started with no data
// path) every data API answers the error its caller gives.
func askTopics(c *Call, msg any) {
	c.Env.System.Send(c.Env.Topics, msg)
}

// noTopics reports whether there is no data path: no topics manager to ask, or no
// catalogue it publishes for the data route (route.go).
func noTopics(c *Call) bool { return c.Env.Topics == nil || c.Env.Catalog == nil }

func msDuration(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

// unknownHere says whether a partition the published catalogue answered with code may
// exist all the same: in a cluster another broker writes the catalogue, and a topic
// created through it is known here only once this broker reads it again. Such a
// partition is asked of the topics manager (partition.ResolveMessage), which reads the
// catalogue first; a broker alone knows every topic there is.
func unknownHere(c *Call, code int16) bool {
	return c.Env.Ownership != nil && c.Env.Topics != nil &&
		(code == kerr.UnknownTopicOrPartition.Code || code == kerr.UnknownTopicID.Code)
}
