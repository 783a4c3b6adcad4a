package conn

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
)

// namesOfIDs resolves the topic ids of a request that names topics by id only
// (OffsetCommit and OffsetFetch v10) and calls then with the names found; an id missing
// from the result is unknown (UNKNOWN_TOPIC_ID). The published catalogue answers first;
// ids it misses are asked of the topics manager, which in a cluster reads the catalogue
// another broker writes before it answers (a topic just created there). It returns
// then's response, or nil when the answer comes later (then runs from the manager's).
func namesOfIDs(c *Call, ids [][16]byte, then func(names map[[16]byte]string) kmsg.Response) kmsg.Response {
	names := make(map[[16]byte]string, len(ids))
	var missing []partition.TopicID
	for _, id := range ids {
		if n := c.topicName("", id); n != "" {
			names[id] = n
		} else if id != ([16]byte{}) && c.Env.Topics != nil {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return then(names)
	}
	askTopics(c, &partition.Describe{IDs: missing, Reply: c.Await(func(v any) kmsg.Response {
		if d, ok := v.(*partition.Described); ok {
			for _, ti := range d.Topics {
				if ti.ErrorCode == 0 && ti.Name != "" {
					names[ti.ID] = ti.Name
				}
			}
		}
		return then(names)
	})})
	return nil
}
