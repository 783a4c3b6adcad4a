package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metadata (key 3), v0–v12.
//
//	v1: controller_id, rack, is_internal; null topics means all (v0: empty means all).
//	v2: cluster_id. v3: throttle. v4: allow_auto_topic_creation. v5: offline replicas.
//	v7: leader epochs. v8: authorized operations. v9: flexible. v10: topic ids.
//	v11: cluster authorized operations removed. v12: topic lookup by id (name may be null).
//
// Brokers are the registry's, each with the endpoint of the listener the request came in
// on, so a client bootstrapped on one listener stays on it.
func init() { register(3, 0, 12, handleMetadata) }

func handleMetadata(c *Call) {
	req := c.Req.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	fillBrokers(c, resp)
	resp.ClusterID = &c.Env.ClusterID
	resp.ControllerID = c.Env.NodeID
	resp.AuthorizedOperations = -2147483648
	metadataTopics(c, req, resp)
}

// fillBrokers lists every alive broker with its endpoint on the request's listener.
func fillBrokers(c *Call, resp *kmsg.MetadataResponse) {
	for _, b := range c.Env.Registry.Brokers() {
		ep, ok := b.Endpoints[c.Listener]
		if !ok {
			continue
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID = b.ID
		mb.Host = ep.Host
		mb.Port = ep.Port
		mb.Rack = b.Rack
		resp.Brokers = append(resp.Brokers, mb)
	}
}

// metadataTopics answers the topic part. Without a topic catalogue every named topic is
// UNKNOWN_TOPIC_OR_PARTITION (lookups by id: UNKNOWN_TOPIC_ID) and "all topics" is none.
func metadataTopics(c *Call, req *kmsg.MetadataRequest, resp *kmsg.MetadataResponse) {
	for _, t := range req.Topics {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = t.Topic
		mt.TopicID = t.TopicID
		mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		if t.Topic == nil {
			mt.ErrorCode = kerr.UnknownTopicID.Code
		}
		mt.AuthorizedOperations = -2147483648
		resp.Topics = append(resp.Topics, mt)
	}
	c.Respond(resp)
}
