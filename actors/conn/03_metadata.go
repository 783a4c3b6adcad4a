package conn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/partition"
	"kaas/cluster"
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

// leaderWait is how long, in a cluster, a Metadata answer waits for a partition that is
// moving (or was just created) to be served by its new leader before it answers
// LEADER_NOT_AVAILABLE (partition.Describe.WaitLeader). A move takes a few hundred
// milliseconds once the old leader is known gone; a paused leader is known gone only
// when its lease lapses, up to a lease after its watchdog ended its connections. A
// client told LEADER_NOT_AVAILABLE asks again only after its metadata age (franz-go:
// 5 s), one told the new leader goes on at once. Every client's request timeout is
// longer (10 s and up).
func leaderWait(c *Call) time.Duration {
	return max(2*time.Second, c.Env.Config.LeaseDuration+time.Second)
}

func handleMetadata(c *Call) {
	req := c.Req.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	fillBrokers(c, resp)
	resp.ClusterID = &c.Env.ClusterID
	resp.ControllerID = c.Env.NodeID
	if c.Env.Ownership != nil {
		// The broker that writes the topic catalogue (creates, deletes, grows topics).
		if id, st := c.Env.Ownership().Catalogue(); st != cluster.Unavailable {
			resp.ControllerID = id
		} else {
			resp.ControllerID = -1
		}
	}
	resp.AuthorizedOperations = -2147483648
	metadataTopics(c, req, resp)
}

// fillBrokers lists the live brokers (listedBrokers) in a Metadata response.
func fillBrokers(c *Call, resp *kmsg.MetadataResponse) {
	for _, b := range listedBrokers(c, false) {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port, mb.Rack = b.id, b.host, b.port, b.rack
		resp.Brokers = append(resp.Brokers, mb)
	}
}

// listedBroker is one broker as Metadata and DescribeCluster list it.
type listedBroker struct {
	id     int32
	host   string
	port   int32
	rack   *string
	fenced bool
}

// listedBrokers is every alive broker with its endpoint on the request's listener, by
// id. In a cluster, a broker is listed only while it is in the view this broker routes
// by: a peer whose lease lapsed (a paused process still accepts connections, and would
// hold every request sent to it) is left out, so clients drop it and its connections and
// send nothing more to it. With fenced, the brokers left out are listed too, marked
// fenced (DescribeCluster's include_fenced_brokers).
func listedBrokers(c *Call, fenced bool) []listedBroker {
	var st *cluster.State
	if c.Env.Ownership != nil {
		st = c.Env.Ownership()
	}
	known := c.Env.Registry.Brokers()
	if fenced {
		known = c.Env.Registry.All()
	}
	var out []listedBroker
	for _, b := range known {
		ep, ok := b.Endpoints[c.Listener]
		if !ok {
			continue
		}
		// A peer whose held connection just ended is left out too: a client whose own
		// connections to it ended at the same instant (a kill, or the watchdog of a
		// paused peer) asks for Metadata first, and would go on picking it.
		left := !b.Alive || !st.Alive(b.ID) || b.ID != c.Env.NodeID && c.Env.Registry.Suspect(b.ID)
		if left && !fenced {
			continue
		}
		out = append(out, listedBroker{id: b.ID, host: ep.Host, port: ep.Port, rack: b.Rack, fenced: left})
	}
	return out
}

// metadataTopics asks the topics manager for the topic part: all topics (null list; v0:
// empty list), or the named ones (auto-created when the request allows it, v4+, and
// auto.create.topics.enable is on), or, from v12, topics looked up by id. Every partition
// is led by this broker at the partition's leader epoch; the replica set is the leader
// (the data's durability comes from the shared volume, not from replicas).
func metadataTopics(c *Call, req *kmsg.MetadataRequest, resp *kmsg.MetadataResponse) {
	all := req.Topics == nil || req.Version == 0 && len(req.Topics) == 0
	if !all && len(req.Topics) == 0 {
		c.Respond(resp)
		return
	}
	d := &partition.Describe{All: all, AutoCreate: req.Version < 4 || req.AllowAutoTopicCreation, WaitLeader: leaderWait(c)}
	type ask struct {
		byID  bool
		index int
	}
	var asks []ask
	if !all {
		for _, t := range req.Topics {
			if t.Topic == nil {
				asks = append(asks, ask{byID: true})
				continue
			}
			asks = append(asks, ask{index: len(d.Names)})
			d.Names = append(d.Names, *t.Topic)
		}
		for i, t := range req.Topics {
			if t.Topic == nil {
				asks[i].index = len(d.Names) + len(d.IDs)
				d.IDs = append(d.IDs, t.TopicID)
			}
		}
	}
	build := func(res *partition.Described) kmsg.Response {
		if all {
			for i := range res.Topics {
				resp.Topics = append(resp.Topics, metadataTopic(c, req.Version, &res.Topics[i]))
			}
			return resp
		}
		for i, t := range req.Topics {
			var ti partition.TopicInfo
			switch {
			case res != nil:
				ti = res.Topics[asks[i].index]
			case t.Topic == nil:
				ti = partition.TopicInfo{ID: t.TopicID, ErrorCode: kerr.UnknownTopicID.Code}
			default:
				ti = partition.TopicInfo{Name: *t.Topic, ErrorCode: kerr.UnknownTopicOrPartition.Code}
			}
			resp.Topics = append(resp.Topics, metadataTopic(c, req.Version, &ti))
		}
		return resp
	}
	if noTopics(c) {
		if all {
			c.Respond(resp)
		} else {
			c.Respond(build(nil))
		}
		return
	}
	d.Reply = c.Await(func(v any) kmsg.Response { return build(v.(*partition.Described)) })
	askTopics(c, d)
}

func metadataTopic(c *Call, version int16, ti *partition.TopicInfo) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.ErrorCode = ti.ErrorCode
	if ti.Name != "" {
		name := ti.Name
		mt.Topic = &name
	}
	mt.TopicID = ti.ID
	mt.AuthorizedOperations = -2147483648
	for _, p := range ti.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Partition
		mp.Leader = p.Leader
		mp.LeaderEpoch = p.LeaderEpoch
		mp.Replicas, mp.ISR, mp.ErrorCode = partitionNodes(p, mt.ErrorCode)
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// partitionNodes is a partition's replicas and ISR as Metadata and
// DescribeTopicPartitions answer them, and the partition's error code: kaas keeps one
// copy on the shared volume, so the replica set is the broker holding it and the ISR
// its leader.
func partitionNodes(p partition.PartitionInfo, topicCode int16) (replicas, isr []int32, code int16) {
	replicas, isr = []int32{}, []int32{}
	if p.Replica >= 0 {
		replicas = []int32{p.Replica}
	}
	if p.Leader >= 0 {
		isr = []int32{p.Leader}
	} else if topicCode == 0 {
		// No broker serves it right now (it is moving): Apache's answer during a
		// leader election, which clients retry within moments. The replica list still
		// names the broker taking it, as Apache's names the assigned replicas, so a
		// topic's replication factor reads the same throughout.
		code = kerr.LeaderNotAvailable.Code
	}
	return replicas, isr, code
}
