package scenario

import (
	"context"
	"errors"
)

// ErrUnsupported is returned by a client operation the client library does not have; the
// scenario then names the step as skipped in its PASS line instead of failing.
var ErrUnsupported = errors.New("not supported by this client library")

// Client is one client library driven through the scenario.
type Client interface {
	// CreateTopic creates topic with partitions partitions (an existing topic is an error:
	// every scenario runs against a fresh broker).
	CreateTopic(ctx context.Context, topic string, partitions int) error
	// Produce produces records Key(i)/Value(i) for i in [0, n) with acks=all and returns
	// once every one was acknowledged.
	Produce(ctx context.Context, topic string, n int) error
	// EndOffsets is the log end offset of every partition of topic.
	EndOffsets(ctx context.Context, topic string) (map[int32]int64, error)
	// NewMember starts a group member that subscribes to topic and, for each record, calls
	// t.Admit then t.Consumed and marks the record for commit. id names the member.
	NewMember(ctx context.Context, id int, t *Tracker) (Member, error)
	Admin
}

// Member is one running group member.
type Member interface {
	// Close commits what the member consumed and leaves the group.
	Close(ctx context.Context) error
}

// Group is one group as ListGroups or DescribeGroups shows it.
type Group struct {
	State    string // "" when the API version does not report it
	Protocol string
	Members  int
	Assigned int // members holding at least one partition; -1 when the client cannot tell
}

// Admin is the group administration of a client library. A method the library lacks
// returns ErrUnsupported.
type Admin interface {
	// ListGroups maps every group the broker lists to its state.
	ListGroups(ctx context.Context) (map[string]string, error)
	// DescribeGroup describes group; a group that does not exist is State "Dead" (or an
	// error carrying GROUP_ID_NOT_FOUND, which the scenario accepts as well).
	DescribeGroup(ctx context.Context, group string) (Group, error)
	// FetchOffsets is the committed offset of every partition of topic that has one.
	FetchOffsets(ctx context.Context, group, topic string) (map[int32]int64, error)
	// CommitOffsets commits offsets for group outside any generation: the offset reset
	// of an empty group.
	CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error
	// DeleteOffsets deletes the committed offsets of partitions of topic (OffsetDelete).
	DeleteOffsets(ctx context.Context, group, topic string, partitions []int32) error
	// DeleteGroup deletes the (empty) group.
	DeleteGroup(ctx context.Context, group string) error
}
