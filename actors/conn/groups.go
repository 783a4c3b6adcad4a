package conn

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/offsets"
	"kaas/actors/partition"
	"kaas/cluster"
)

// What the group API handlers (08-16, 42, 47) share: where a group request goes.

// int32Min is Apache's "not requested" authorized_operations.
const int32Min = -2147483648

// groupAuthorizedOperations is Apache 4.0's answer with no authorizer: every GROUP
// operation (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS: bits 3, 8, 6, 10, 11).
const groupAuthorizedOperations = 1<<3 | 1<<6 | 1<<8 | 1<<10 | 1<<11

// groupRoute says why a request for group cannot go to the groups manager:
// COORDINATOR_NOT_AVAILABLE while it is not running, NOT_COORDINATOR when the registry
// gives the group to another broker. 0 means ask it.
func groupRoute(c *Call, group string) int16 {
	if c.Env.Groups == nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	if own := c.Env.Ownership; own != nil {
		return ownershipCode(own().Group(group))
	}
	return 0
}

// ownershipCode is what a group API answers for a group in status st: nothing (serve
// it), NOT_COORDINATOR (another broker's: look it up again), COORDINATOR_LOAD_IN_PROGRESS
// (this broker's, while its previous owner lets it go), COORDINATOR_NOT_AVAILABLE (no
// view yet, or no broker alive).
func ownershipCode(_ int32, st cluster.Status) int16 {
	switch st {
	case cluster.Mine:
		return 0
	case cluster.Elsewhere:
		return kerr.NotCoordinator.Code
	case cluster.Waiting:
		return kerr.CoordinatorLoadInProgress.Code
	default:
		return kerr.CoordinatorNotAvailable.Code
	}
}

// groupCheck is the check every single-group API makes before asking the groups manager:
// INVALID_GROUP_ID for an empty id (these APIs do not take the empty-id exemption of
// OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups, §4.0), then groupRoute.
func groupCheck(c *Call, group string) int16 {
	if group == "" {
		return kerr.InvalidGroupID.Code
	}
	return groupRoute(c, group)
}

// askGroups sends msg to the groups manager.
func askGroups(c *Call, msg any) { c.Env.System.Send(c.Env.Groups, msg) }

// withExistence asks the topics manager which of tps exist, then runs then with the
// answer (exists[i] for tps[i]) in the connection actor. OffsetCommit and OffsetDelete
// answer UNKNOWN_TOPIC_OR_PARTITION for partitions missing from the catalogue before the
// coordinator sees the request, as Apache's KafkaApis does with its metadata cache
// (§4.7, §4.13). then returns the response to send, or nil when it handed the call on
// with a second Await (ask the groups manager next): no actor waits on another.
// Without a topics manager every partition exists.
func withExistence(c *Call, tps []offsets.TopicPartition, then func(exists []bool) kmsg.Response) {
	if c.Env.Topics == nil || len(tps) == 0 {
		all := make([]bool, len(tps))
		for i := range all {
			all[i] = true
		}
		if resp := then(all); resp != nil {
			c.Respond(resp)
		}
		return
	}
	asked := make([]partition.TopicPartition, len(tps))
	for i, tp := range tps {
		asked[i] = partition.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
	}
	if c.Env.Catalog != nil {
		// The published catalogue answers without a round trip to the topics manager,
		// unless it misses a partition: then the manager answers, after re-reading a
		// catalogue another broker writes (a topic just created there).
		if exists := c.Env.Catalog.Exists(asked); !slices.Contains(exists, false) {
			if resp := then(exists); resp != nil {
				c.Respond(resp)
			}
			return
		}
	}
	askTopics(c, &partition.PartitionsExist{Partitions: asked, Reply: c.Await(func(v any) kmsg.Response {
		e, _ := v.(*partition.Existence)
		if e == nil || len(e.Exists) != len(tps) {
			// A broken invariant of the topics manager: report nothing as known rather
			// than commit to partitions that may not exist.
			c.Log().Error().Int("asked", len(tps)).Msg("partition_existence_answer_malformed")
			e = &partition.Existence{Exists: make([]bool, len(tps))}
		}
		return then(e.Exists)
	})})
}

func strPtr(s string) *string { return &s }
