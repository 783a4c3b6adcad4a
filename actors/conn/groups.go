package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
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
	if c.Env.Registry != nil && !c.Env.Registry.IsCoordinator(group) {
		return kerr.NotCoordinator.Code
	}
	return 0
}

// askGroups sends msg to the groups manager.
func askGroups(c *Call, msg any) { c.Env.System.Send(c.Env.Groups, msg) }

// partitionKnown is where UNKNOWN_TOPIC_OR_PARTITION will be decided for OffsetCommit and
// OffsetDelete (Apache checks the metadata cache before the coordinator, §4.7) once the
// topic catalogue answers "does this partition exist". Until then every partition is.
func partitionKnown(c *Call, topic string, partition int32) bool { return true }

func strPtr(s string) *string { return &s }
