package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/group"
	"kaas/auth"
)

// ConsumerGroupHeartbeat (key 68), v0–v1: the consumer group protocol (KIP-848).
//
//	v0: a joining member (epoch 0) with an empty member id gets one from the coordinator.
//	v1: subscribed_topic_regex (RE2 syntax, whole topic names; the topics it matches are
//	    filtered by the principal's DESCRIBE rights; INVALID_REGULAR_EXPRESSION when it
//	    does not compile); the client makes its member id (an empty one is
//	    INVALID_REQUEST).
//
// Without consumer in group.coordinator.rebalance.protocols every request is answered
// UNSUPPORTED_VERSION (Apache KafkaApis), and ApiVersions does not advertise the key:
// clients fall back to the classic protocol. The request's shape is checked first
// (group.ValidateConsumerHeartbeat, Apache's order), then the coordinator routing, then
// the group actor runs it (actors/group/consumer.go).
func init() { register(68, 0, 1, handleConsumerGroupHeartbeat) }

func handleConsumerGroupHeartbeat(c *Call) {
	req := c.Req.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(code int16, msg string) {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = strPtr(msg)
		}
		c.Respond(resp)
	}
	cfg := c.Env.Config
	if cfg == nil || !cfg.ConsumerProtocol() {
		fail(kerr.UnsupportedVersion.Code, "The consumer group protocol is not enabled (group.coordinator.rebalance.protocols).")
		return
	}
	shape := group.HeartbeatShape{
		Version: c.Version, Group: req.Group, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceID: req.InstanceID, RackID: req.RackID, RebalanceTimeout: req.RebalanceTimeoutMillis,
		Subscribed: req.SubscribedTopicNames, Regex: req.SubscribedTopicRegex, ServerAssignor: req.ServerAssignor,
		OwnedNull: req.Topics == nil, OwnedEmpty: len(req.Topics) == 0,
	}
	if code, msg := group.ValidateConsumerHeartbeat(shape, cfg.GroupConsumerAssignors); code != 0 {
		fail(code, msg)
		return
	}
	if code := groupRoute(c, req.Group); code != 0 {
		fail(code, "")
		return
	}
	msg := &group.ConsumerHeartbeat{
		Group: req.Group, Version: c.Version, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceID: req.InstanceID, RackID: req.RackID, RebalanceTimeout: req.RebalanceTimeoutMillis,
		Subscribed: req.SubscribedTopicNames, Regex: req.SubscribedTopicRegex, ServerAssignor: req.ServerAssignor,
		ClientID: c.ClientID, ClientHost: c.ClientHost(), CanDescribe: describeFilter(c),
	}
	if req.Topics != nil {
		msg.Owned = make([]group.OwnedTopic, len(req.Topics))
		for i, t := range req.Topics {
			msg.Owned[i] = group.OwnedTopic{ID: t.TopicID, Partitions: t.Partitions}
		}
	}
	msg.Reply = c.Await(func(v any) kmsg.Response {
		r := v.(*group.ConsumerHeartbeatResult)
		resp.ErrorCode = r.ErrorCode
		if r.ErrorMessage != "" {
			resp.ErrorMessage = strPtr(r.ErrorMessage)
		}
		resp.MemberEpoch = r.MemberEpoch
		if r.MemberID != "" {
			resp.MemberID = strPtr(r.MemberID)
		}
		if r.ErrorCode != 0 {
			// Apache's error response: the member id and epoch are not echoed.
			resp.MemberID, resp.MemberEpoch = nil, 0
			return resp
		}
		resp.HeartbeatIntervalMillis = r.HeartbeatInterval
		if r.HasAssignment {
			a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
			for _, t := range r.Assignment {
				at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
				at.TopicID, at.Partitions = t.ID, t.Partitions
				a.Topics = append(a.Topics, at)
			}
			if a.Topics == nil {
				a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
			}
			resp.Assignment = &a
		}
		return resp
	})
	askGroups(c, msg)
}

// describeFilter is the request principal's DESCRIBE right on a topic, which filters the
// topics a regular expression subscription resolves to (Apache): the authorizer is safe
// for any goroutine, so the group actor may ask it. Everything is allowed without one.
func describeFilter(c *Call) func(topic string) bool {
	a := c.Env.Authorizer
	if a == nil {
		return func(string) bool { return true }
	}
	p, h := c.Principal, c.Host
	return func(topic string) bool { return a.Authorize(p, h, auth.Describe, auth.Topic, topic) }
}
