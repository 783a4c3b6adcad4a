package conn

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/logs"
)

// Authorization (--authorizer=simple) runs before a request's handler, and so before any
// coordinator or leader routing: a principal without rights on a group never learns
// where it lives or whether it exists (apache-classic-group-coordinator.md §6). Each
// API's check is a row of AuthzTable. A check either answers the request itself (all of
// it denied), or takes the denied parts out of the request, lets the handler answer the
// rest, and puts the denied parts back into the response with their error code (a
// patch run before the response is encoded). Handlers know nothing of it.

// AuthzRule is one row of the authorization table: the API, what it checks in order,
// and what a denied principal gets. docs/security.md shows this table; a test checks
// that the two agree.
type AuthzRule struct {
	Key    int16
	API    string
	Checks string
	Denied string
	check  func(c *Call) bool
}

// AuthzTable is every API's authorization, in key order: the group APIs as Apache 3.7's
// KafkaApis (§6), the data and topic APIs as Apache's, the ACL and SCRAM APIs on the
// cluster.
func AuthzTable() []AuthzRule { return authzTable }

var authzTable = []AuthzRule{
	{0, "Produce", "with a transactional_id TRANSACTIONAL_ID: WRITE; TOPIC: WRITE per topic", "every partition 53; that topic's partitions 29", checkProduce},
	{1, "Fetch", "TOPIC: READ per topic", "that topic's partitions 29", checkFetch},
	{2, "ListOffsets", "TOPIC: DESCRIBE per topic", "that topic's partitions 29", checkListOffsets},
	{3, "Metadata", "TOPIC: DESCRIBE per topic; auto-creation also CLUSTER or TOPIC: CREATE", "named topics 29; all topics: unauthorized ones left out", checkMetadata},
	{8, "OffsetCommit", "GROUP: READ, then TOPIC: READ per topic", "every partition 30; or that topic's partitions 29", checkOffsetCommit},
	{9, "OffsetFetch", "GROUP: DESCRIBE per group, then TOPIC: DESCRIBE", "group error 30; named topics: partitions 29, offset -1; all topics: unauthorized ones left out", checkOffsetFetch},
	{10, "FindCoordinator", "GROUP key: DESCRIBE; TRANSACTIONAL_ID key: DESCRIBE", "30 / 53, node -1 (per key in v4+)", checkFindCoordinator},
	{11, "JoinGroup", "GROUP: READ", "top-level 30", checkGroupRead},
	{12, "Heartbeat", "GROUP: READ", "top-level 30", checkGroupRead},
	{13, "LeaveGroup", "GROUP: READ", "top-level 30", checkGroupRead},
	{14, "SyncGroup", "GROUP: READ (after the v5 protocol-field check)", "top-level 30", checkGroupRead},
	{15, "DescribeGroups", "GROUP: DESCRIBE per group; authorized_operations from the ACLs", "that group 30", checkDescribeGroups},
	{16, "ListGroups", "CLUSTER: DESCRIBE, else GROUP: DESCRIBE per group", "unauthorized groups left out; no error", checkListGroups},
	{19, "CreateTopics", "CLUSTER: CLUSTER_ACTION (a broker forwarding), else CLUSTER: CREATE, else TOPIC: CREATE per topic", "that topic 29", byBroker(checkCreateTopics)},
	{20, "DeleteTopics", "CLUSTER: CLUSTER_ACTION (a broker forwarding), else TOPIC: DELETE per topic", "that topic 29", byBroker(checkDeleteTopics)},
	{21, "DeleteRecords", "TOPIC: DELETE per topic", "that topic's partitions 29, low watermark -1", checkDeleteRecords},
	{22, "InitProducerId", "TRANSACTIONAL_ID: WRITE; without one CLUSTER: IDEMPOTENT_WRITE or WRITE on some topic", "53 / 31", checkInitProducerID},
	{23, "OffsetForLeaderEpoch", "TOPIC: DESCRIBE per topic", "that topic's partitions 29", checkOffsetForLeaderEpoch},
	{24, "AddPartitionsToTxn", "v0–v3: TRANSACTIONAL_ID: WRITE, then TOPIC: WRITE per topic; v4+: CLUSTER: CLUSTER_ACTION", "every partition 53; that topic's partitions 29, the others 55; v4+: top-level 31", checkAddPartitionsToTxn},
	{25, "AddOffsetsToTxn", "TRANSACTIONAL_ID: WRITE, then GROUP: READ", "53 / 30", checkAddOffsetsToTxn},
	{26, "EndTxn", "TRANSACTIONAL_ID: WRITE", "53", checkEndTxn},
	{27, "WriteTxnMarkers", "CLUSTER: CLUSTER_ACTION", "every partition 31", checkWriteTxnMarkers},
	{28, "TxnOffsetCommit", "TRANSACTIONAL_ID: WRITE, then GROUP: READ, then TOPIC: READ per topic", "every partition 53, then 30; or that topic's partitions 29", checkTxnOffsetCommit},
	{29, "DescribeAcls", "CLUSTER: DESCRIBE", "31", nil},
	{30, "CreateAcls", "CLUSTER: ALTER", "31 per creation", nil},
	{31, "DeleteAcls", "CLUSTER: ALTER", "31 per filter", nil},
	{32, "DescribeConfigs", "TOPIC, GROUP or CLUSTER: DESCRIBE_CONFIGS per resource", "that resource 29 / 30 / 31", checkDescribeConfigs},
	{33, "AlterConfigs", "CLUSTER: CLUSTER_ACTION (a broker forwarding), else TOPIC, GROUP or CLUSTER: ALTER_CONFIGS per resource", "that resource 29 / 30 / 31", byBroker(checkAlterConfigs)},
	{35, "DescribeLogDirs", "CLUSTER: DESCRIBE", "top-level 31 (v3+), no log dirs", checkDescribeLogDirs},
	{37, "CreatePartitions", "CLUSTER: CLUSTER_ACTION (a broker forwarding), else TOPIC: ALTER per topic", "that topic 29", byBroker(checkCreatePartitions)},
	{42, "DeleteGroups", "GROUP: DELETE per group", "that group 30", checkDeleteGroups},
	{44, "IncrementalAlterConfigs", "CLUSTER: CLUSTER_ACTION (a broker forwarding), else TOPIC, GROUP or CLUSTER: ALTER_CONFIGS per resource", "that resource 29 / 30 / 31", byBroker(checkIncrementalAlterConfigs)},
	{47, "OffsetDelete", "GROUP: DELETE, then TOPIC: READ per topic", "top-level 30; that topic's partitions 29", checkOffsetDelete},
	{50, "DescribeUserScramCredentials", "CLUSTER: DESCRIBE", "top-level 31", nil},
	{51, "AlterUserScramCredentials", "CLUSTER: ALTER", "31 per user", nil},
	{60, "DescribeCluster", "none; cluster_authorized_operations: CLUSTER: DESCRIBE, then the ACLs", "cluster_authorized_operations 0", checkDescribeCluster},
	{61, "DescribeProducers", "TOPIC: READ per topic", "that topic's partitions 29", checkDescribeProducers},
	{65, "DescribeTransactions", "TRANSACTIONAL_ID: DESCRIBE per id; TOPIC: DESCRIBE per topic shown", "that id 53; unauthorized topics left out", checkDescribeTransactions},
	{66, "ListTransactions", "TRANSACTIONAL_ID: DESCRIBE per id, in the handler", "unauthorized ids left out; no error", nil},
	{68, "ConsumerGroupHeartbeat", "GROUP: READ, then TOPIC: DESCRIBE per subscribed topic name", "top-level 30; top-level 29", checkConsumerGroupHeartbeat},
	{69, "ConsumerGroupDescribe", "GROUP: DESCRIBE per group, then TOPIC: DESCRIBE on its members' assignments; authorized_operations from the ACLs", "that group 30; that group 29, without members", checkConsumerGroupDescribe},
	{75, "DescribeTopicPartitions", "TOPIC: DESCRIBE per topic, in the handler (pages count visible topics only); authorized_operations from the ACLs", "named topics 29, after the rest; all topics: unauthorized ones left out", nil},
}

// authzChecks is the table by key; APIs without a row (ApiVersions, the SASL APIs) need
// no right, and those whose row has no check authorize in their handler.
var authzChecks = func() map[int16]func(*Call) bool {
	m := map[int16]func(*Call) bool{}
	for _, r := range authzTable {
		if r.check != nil {
			m[r.Key] = r.check
		}
	}
	return m
}()

// authorizing runs key's check before h; with authorization off it is h.
func authorizing(key int16, h Handler) Handler {
	return func(c *Call) {
		if c.Env.Authorizer != nil {
			if check := authzChecks[key]; check != nil && !check(c) {
				return
			}
		}
		h(c)
	}
}

// byBroker lets a principal with CLUSTER_ACTION on the cluster pass check whole: a broker
// forwarding a topic request to the catalogue's writer (forward.go), which authorized its
// client itself before it forwarded. Asked quietly: a client without the right is then
// checked as before, and only a denial there is counted and logged.
func byBroker(check func(*Call) bool) func(*Call) bool {
	return func(c *Call) bool {
		if c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.ClusterAction, auth.Cluster, auth.ClusterName) {
			return true
		}
		return check(c)
	}
}

// allowed asks the authorizer and counts and logs a denial.
func (c *Call) allowed(op auth.Operation, t auth.ResourceType, name string) bool {
	a := c.Env.Authorizer
	if a.Authorize(c.Principal, c.Host, op, t, name) {
		return true
	}
	c.denied(op, t, name)
	return false
}

// denied counts and logs one denied resource.
func (c *Call) denied(op auth.Operation, t auth.ResourceType, name string) {
	if m := c.Env.Metrics; m != nil {
		m.AuthorizationDenied.WithLabelValues(c.api.name, strings.ToLower(t.String())).Inc()
	}
	c.Log().Debug().Str("principal", logs.ID(c.Principal.String())).Str("operation", op.String()).
		Str("resource_type", t.String()).Str("resource", logs.ID(name)).Msg("authorization_denied")
}

// patch adds a step that completes the response before it is encoded.
func (c *Call) patch(p func(kmsg.Response)) { c.patches = append(c.patches, p) }

// mergeBack puts the denied entries back among got, the handler's answers for the
// allowed ones in request order: entry i of the request is made by denied(i) when
// isDenied[i], else it is got's next.
func mergeBack[T any](got []T, isDenied []bool, denied func(i int) T) []T {
	out := make([]T, 0, len(isDenied))
	j := 0
	for i, d := range isDenied {
		if d {
			out = append(out, denied(i))
		} else if j < len(got) {
			out = append(out, got[j])
			j++
		}
	}
	return append(out, got[j:]...)
}

// keep splits xs by allow: the kept items and, per item, whether it was denied.
func keep[T any](xs []T, allow func(T) bool) (kept []T, isDenied []bool, some bool) {
	isDenied = make([]bool, len(xs))
	kept = make([]T, 0, len(xs))
	for i, x := range xs {
		if allow(x) {
			kept = append(kept, x)
		} else {
			isDenied[i], some = true, true
		}
	}
	return kept, isDenied, some
}

// topicName is a request topic's name, looked up by id when the request names it so.
func (c *Call) topicName(name string, id [16]byte) string {
	if name == "" && id != ([16]byte{}) && c.Env.Catalog != nil {
		return c.Env.Catalog.Routes().Find("", id, 0).Topic
	}
	return name
}

// topicAllowed checks op on the topic named (or with id); a topic id no catalogue entry
// has is left to the handler (UNKNOWN_TOPIC_ID).
func (c *Call) topicAllowed(op auth.Operation, name string, id [16]byte) bool {
	n := c.topicName(name, id)
	if n == "" && id != ([16]byte{}) {
		return true
	}
	return c.allowed(op, auth.Topic, n)
}

var (
	groupDenied   = kerr.GroupAuthorizationFailed.Code
	topicDenied   = kerr.TopicAuthorizationFailed.Code
	clusterDenied = kerr.ClusterAuthorizationFailed.Code
	txnDenied     = kerr.TransactionalIDAuthorizationFailed.Code
)

// ---- group APIs (§6) ----

func checkFindCoordinator(c *Call) bool {
	req := c.Req.(*kmsg.FindCoordinatorRequest)
	// The key's resource, and the code of a denial; an unknown key type is the
	// handler's (INVALID_REQUEST).
	keyAllowed := func(key string) (bool, int16) {
		switch req.CoordinatorType {
		case 0:
			return c.allowed(auth.Describe, auth.Group, key), groupDenied
		case 1:
			return c.allowed(auth.Describe, auth.TransactionalID, key), txnDenied
		}
		return true, 0
	}
	if c.Version < 4 {
		ok, code := keyAllowed(req.CoordinatorKey)
		if ok {
			return true
		}
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = code, -1, -1
		resp.ErrorMessage = strPtr(kerr.ErrorForCode(code).Error())
		c.Respond(resp)
		return false
	}
	keys := req.CoordinatorKeys
	codes := make([]int16, len(keys))
	isDenied := make([]bool, len(keys))
	var kept []string
	some := false
	for i, k := range keys {
		if ok, code := keyAllowed(k); ok {
			kept = append(kept, k)
		} else {
			isDenied[i], codes[i], some = true, code, true
		}
	}
	if !some {
		return true
	}
	req.CoordinatorKeys = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.FindCoordinatorResponse)
		resp.Coordinators = mergeBack(resp.Coordinators, isDenied, func(i int) kmsg.FindCoordinatorResponseCoordinator {
			rc := kmsg.NewFindCoordinatorResponseCoordinator()
			rc.Key, rc.NodeID, rc.Port, rc.ErrorCode = keys[i], -1, -1, codes[i]
			rc.ErrorMessage = strPtr(kerr.ErrorForCode(codes[i]).Error())
			return rc
		})
	})
	return true
}

// checkGroupRead is JoinGroup, Heartbeat, LeaveGroup and SyncGroup: READ on the group,
// else top-level GROUP_AUTHORIZATION_FAILED.
func checkGroupRead(c *Call) bool {
	var group string
	switch req := c.Req.(type) {
	case *kmsg.JoinGroupRequest:
		group = req.Group
	case *kmsg.HeartbeatRequest:
		group = req.Group
	case *kmsg.LeaveGroupRequest:
		group = req.Group
	case *kmsg.SyncGroupRequest:
		// Apache checks the v5 protocol fields before the ACL: the handler answers
		// INCONSISTENT_GROUP_PROTOCOL.
		if c.Version >= 5 && (req.ProtocolType == nil || req.Protocol == nil) {
			return true
		}
		group = req.Group
	}
	if c.allowed(auth.Read, auth.Group, group) {
		return true
	}
	switch req := c.Req.(type) {
	case *kmsg.JoinGroupRequest:
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = groupDenied, -1
		if c.Version < 7 {
			resp.Protocol = strPtr("")
		}
		c.Respond(resp)
	case *kmsg.HeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = groupDenied
		c.Respond(resp)
	case *kmsg.LeaveGroupRequest:
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = groupDenied
		c.Respond(resp)
	case *kmsg.SyncGroupRequest:
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = groupDenied
		c.Respond(resp)
	}
	return false
}

func checkOffsetCommit(c *Call) bool {
	req := c.Req.(*kmsg.OffsetCommitRequest)
	partitionsWith := func(t kmsg.OffsetCommitRequestTopic, code int16) kmsg.OffsetCommitResponseTopic {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		return rt
	}
	if !c.allowed(auth.Read, auth.Group, req.Group) {
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			resp.Topics = append(resp.Topics, partitionsWith(t, groupDenied))
		}
		c.Respond(resp)
		return false
	}
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.OffsetCommitRequestTopic) bool {
		return c.topicAllowed(auth.Read, t.Topic, t.TopicID) // v10: by id
	})
	if !some {
		return true
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetCommitResponse)
		resp.Topics = mergeBack(resp.Topics, isDenied, func(i int) kmsg.OffsetCommitResponseTopic {
			return partitionsWith(orig[i], topicDenied)
		})
	})
	return true
}

// checkTxnOffsetCommit is Apache's KafkaApis.handleTxnOffsetCommitRequest: WRITE on the
// transactional id, READ on the group (each failing every partition), then READ per
// topic.
func checkTxnOffsetCommit(c *Call) bool {
	req := c.Req.(*kmsg.TxnOffsetCommitRequest)
	partitionsWith := func(t kmsg.TxnOffsetCommitRequestTopic, code int16) kmsg.TxnOffsetCommitResponseTopic {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		return rt
	}
	refuse := func(code int16) bool {
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range req.Topics {
			resp.Topics = append(resp.Topics, partitionsWith(t, code))
		}
		c.Respond(resp)
		return false
	}
	if !c.allowed(auth.Write, auth.TransactionalID, req.TransactionalID) {
		return refuse(txnDenied)
	}
	if !c.allowed(auth.Read, auth.Group, req.Group) {
		return refuse(groupDenied)
	}
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.TxnOffsetCommitRequestTopic) bool {
		return c.allowed(auth.Read, auth.Topic, t.Topic)
	})
	if !some {
		return true
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.TxnOffsetCommitResponse)
		resp.Topics = mergeBack(resp.Topics, isDenied, func(i int) kmsg.TxnOffsetCommitResponseTopic {
			return partitionsWith(orig[i], topicDenied)
		})
	})
	return true
}

func checkOffsetFetch(c *Call) bool {
	req := c.Req.(*kmsg.OffsetFetchRequest)
	if c.Version < 8 {
		if !c.allowed(auth.Describe, auth.Group, req.Group) {
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			if c.Version < 2 {
				// v1 carries errors in partitions only (OffsetFetchRequest.getErrorResponse).
				for _, t := range req.Topics {
					rt := kmsg.NewOffsetFetchResponseTopic()
					rt.Topic = t.Topic
					for _, p := range t.Partitions {
						rp := kmsg.NewOffsetFetchResponseTopicPartition()
						rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p, -1, -1, strPtr(""), groupDenied
						rt.Partitions = append(rt.Partitions, rp)
					}
					resp.Topics = append(resp.Topics, rt)
				}
			} else {
				resp.ErrorCode = groupDenied
			}
			c.Respond(resp)
			return false
		}
		all := req.Topics == nil
		c.patch(func(r kmsg.Response) {
			resp := r.(*kmsg.OffsetFetchResponse)
			out := resp.Topics[:0]
			for _, t := range resp.Topics {
				if c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.Topic, t.Topic) {
					out = append(out, t)
					continue
				}
				c.denied(auth.Describe, auth.Topic, t.Topic)
				if all {
					continue
				}
				for j := range t.Partitions {
					p := &t.Partitions[j]
					p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode = -1, -1, strPtr(""), topicDenied
				}
				out = append(out, t)
			}
			resp.Topics = out
		})
		return true
	}
	orig := req.Groups
	kept, isDenied, some := keep(orig, func(g kmsg.OffsetFetchRequestGroup) bool {
		return c.allowed(auth.Describe, auth.Group, g.Group)
	})
	req.Groups = kept
	if some && len(kept) == 0 {
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Groups = mergeBack(nil, isDenied, func(i int) kmsg.OffsetFetchResponseGroup {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = orig[i].Group, groupDenied
			return rg
		})
		c.Respond(resp)
		return false
	}
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetFetchResponse)
		for gi := range resp.Groups {
			g := &resp.Groups[gi]
			all := gi < len(kept) && kept[gi].Topics == nil
			out := g.Topics[:0]
			for _, t := range g.Topics {
				// v10: a topic id no catalogue entry has is answered UNKNOWN_TOPIC_ID.
				unknownID := t.Topic == "" && t.TopicID != [16]byte{}
				if unknownID || c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.Topic, t.Topic) {
					out = append(out, t)
					continue
				}
				c.denied(auth.Describe, auth.Topic, t.Topic)
				if all {
					continue
				}
				for j := range t.Partitions {
					p := &t.Partitions[j]
					p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode = -1, -1, strPtr(""), topicDenied
				}
				out = append(out, t)
			}
			g.Topics = out
		}
		if some {
			resp.Groups = mergeBack(resp.Groups, isDenied, func(i int) kmsg.OffsetFetchResponseGroup {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = orig[i].Group, groupDenied
				return rg
			})
		}
	})
	return true
}

// groupOperations are the operations a GROUP resource has, as DescribeGroups'
// authorized_operations reports them.
var groupOperations = []auth.Operation{auth.Read, auth.Delete, auth.Describe, auth.DescribeConfigs, auth.AlterConfigs}

func checkDescribeGroups(c *Call) bool {
	req := c.Req.(*kmsg.DescribeGroupsRequest)
	orig := req.Groups
	kept, isDenied, some := keep(orig, func(g string) bool { return c.allowed(auth.Describe, auth.Group, g) })
	req.Groups = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.DescribeGroupsResponse)
		if req.IncludeAuthorizedOperations {
			for i := range resp.Groups {
				g := &resp.Groups[i]
				if g.AuthorizedOperations != int32Min {
					g.AuthorizedOperations = c.Env.Authorizer.AuthorizedOperations(c.Principal, c.Host, auth.Group, g.Group, groupOperations)
				}
			}
		}
		if some {
			resp.Groups = mergeBack(resp.Groups, isDenied, func(i int) kmsg.DescribeGroupsResponseGroup {
				g := kmsg.NewDescribeGroupsResponseGroup()
				g.Group, g.ErrorCode, g.AuthorizedOperations = orig[i], groupDenied, int32Min
				return g
			})
		}
	})
	return true
}

// checkConsumerGroupHeartbeat is Apache's: READ on the group, then DESCRIBE on every
// subscribed topic name (TOPIC_AUTHORIZATION_FAILED if one is denied).
func checkConsumerGroupHeartbeat(c *Call) bool {
	req := c.Req.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	if !c.allowed(auth.Read, auth.Group, req.Group) {
		resp.ErrorCode = groupDenied
		c.Respond(resp)
		return false
	}
	var denied []string
	for _, t := range req.SubscribedTopicNames {
		if !c.allowed(auth.Describe, auth.Topic, t) {
			denied = append(denied, t)
		}
	}
	if len(denied) > 0 {
		resp.ErrorCode = kerr.TopicAuthorizationFailed.Code
		resp.ErrorMessage = strPtr("Unauthorized topics: " + strings.Join(denied, ", "))
		c.Respond(resp)
		return false
	}
	return true
}

// checkConsumerGroupDescribe is DESCRIBE per group, like DescribeGroups.
func checkConsumerGroupDescribe(c *Call) bool {
	req := c.Req.(*kmsg.ConsumerGroupDescribeRequest)
	orig := req.Groups
	kept, isDenied, some := keep(orig, func(g string) bool { return c.allowed(auth.Describe, auth.Group, g) })
	req.Groups = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.ConsumerGroupDescribeResponse)
		// A group whose members' assignments name a topic the principal may not describe
		// is answered TOPIC_AUTHORIZATION_FAILED, without its members (Apache KafkaApis).
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if g.ErrorCode != 0 || describableAssignments(c, g.Members) {
				continue
			}
			name := g.Group
			*g = kmsg.NewConsumerGroupDescribeResponseGroup()
			g.Group, g.ErrorCode, g.AuthorizedOperations = name, kerr.TopicAuthorizationFailed.Code, int32Min
			g.ErrorMessage = strPtr("The group has described topic(s) that the client is not authorized to describe.")
		}
		if req.IncludeAuthorizedOperations {
			for i := range resp.Groups {
				g := &resp.Groups[i]
				if g.AuthorizedOperations != int32Min {
					g.AuthorizedOperations = c.Env.Authorizer.AuthorizedOperations(c.Principal, c.Host, auth.Group, g.Group, groupOperations)
				}
			}
		}
		if some {
			resp.Groups = mergeBack(resp.Groups, isDenied, func(i int) kmsg.ConsumerGroupDescribeResponseGroup {
				g := kmsg.NewConsumerGroupDescribeResponseGroup()
				g.Group, g.ErrorCode, g.AuthorizedOperations = orig[i], groupDenied, int32Min
				return g
			})
		}
	})
	return true
}

// describableAssignments: the principal may describe every topic of the members'
// assignments and target assignments.
func describableAssignments(c *Call, ms []kmsg.ConsumerGroupDescribeResponseGroupMember) bool {
	seen := map[string]bool{}
	for _, m := range ms {
		for _, a := range []kmsg.Assignment{m.Assignment, m.TargetAssignment} {
			for _, t := range a.TopicPartitions {
				if seen[t.Topic] {
					continue
				}
				seen[t.Topic] = true
				if !c.allowed(auth.Describe, auth.Topic, t.Topic) {
					return false
				}
			}
		}
	}
	return true
}

func checkListGroups(c *Call) bool {
	if c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.Cluster, auth.ClusterName) {
		return true
	}
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.ListGroupsResponse)
		out := resp.Groups[:0]
		for _, g := range resp.Groups {
			if c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.Group, g.Group) {
				out = append(out, g)
			}
		}
		resp.Groups = out
	})
	return true
}

func checkDeleteGroups(c *Call) bool {
	req := c.Req.(*kmsg.DeleteGroupsRequest)
	// The handler answers a repeated id once; so does the denial.
	seen := map[string]bool{}
	var orig []string
	for _, g := range req.Groups {
		if !seen[g] {
			seen[g] = true
			orig = append(orig, g)
		}
	}
	kept, isDenied, some := keep(orig, func(g string) bool { return c.allowed(auth.Delete, auth.Group, g) })
	if !some {
		return true
	}
	req.Groups = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.DeleteGroupsResponse)
		resp.Groups = mergeBack(resp.Groups, isDenied, func(i int) kmsg.DeleteGroupsResponseGroup {
			g := kmsg.NewDeleteGroupsResponseGroup()
			g.Group, g.ErrorCode = orig[i], groupDenied
			return g
		})
	})
	return true
}

func checkOffsetDelete(c *Call) bool {
	req := c.Req.(*kmsg.OffsetDeleteRequest)
	if !c.allowed(auth.Delete, auth.Group, req.Group) {
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = groupDenied
		c.Respond(resp)
		return false
	}
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.OffsetDeleteRequestTopic) bool {
		return c.allowed(auth.Read, auth.Topic, t.Topic)
	})
	if !some {
		return true
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.OffsetDeleteResponse)
		if resp.ErrorCode != 0 {
			return // a group-level error stands alone
		}
		resp.Topics = mergeBack(resp.Topics, isDenied, func(i int) kmsg.OffsetDeleteResponseTopic {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = orig[i].Topic
			for _, p := range orig[i].Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, topicDenied
				rt.Partitions = append(rt.Partitions, rp)
			}
			return rt
		})
	})
	return true
}

// ---- data and topic APIs ----

// withholdTopics takes out of a request's topics those allow refuses, and puts each back
// into the response as denied makes it (a topic with every partition answered
// topicDenied), in the request's order after the served ones, as Apache's KafkaApis
// merges its unauthorized topics.
func withholdTopics[T any](c *Call, topics *[]T, allow func(T) bool, denied func(kmsg.Response, T)) bool {
	orig := *topics
	kept, isDenied, some := keep(orig, allow)
	if !some {
		return true
	}
	*topics = kept
	c.patch(func(r kmsg.Response) {
		for i, d := range isDenied {
			if d {
				denied(r, orig[i])
			}
		}
	})
	return true
}

func checkProduce(c *Call) bool {
	req := c.Req.(*kmsg.ProduceRequest)
	if req.TransactionID != nil && !c.allowed(auth.Write, auth.TransactionalID, *req.TransactionID) {
		if req.Acks == 0 {
			c.NoResponse()
			return false
		}
		c.Respond(produceResponse(req, nil, kerr.TransactionalIDAuthorizationFailed.Code))
		return false
	}
	return withholdTopics(c, &req.Topics, func(t kmsg.ProduceRequestTopic) bool {
		return c.topicAllowed(auth.Write, t.Topic, t.TopicID)
	}, func(r kmsg.Response, t kmsg.ProduceRequestTopic) {
		resp := r.(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, topicDenied, -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}

func checkFetch(c *Call) bool {
	req := c.Req.(*kmsg.FetchRequest)
	return withholdTopics(c, &req.Topics, func(t kmsg.FetchRequestTopic) bool {
		return c.topicAllowed(auth.Read, t.Topic, t.TopicID)
	}, func(r kmsg.Response, t kmsg.FetchRequestTopic) {
		resp := r.(*kmsg.FetchResponse)
		if resp.ErrorCode != 0 {
			return
		}
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, topicDenied, -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}

func checkListOffsets(c *Call) bool {
	req := c.Req.(*kmsg.ListOffsetsRequest)
	return withholdTopics(c, &req.Topics, func(t kmsg.ListOffsetsRequestTopic) bool {
		return c.allowed(auth.Describe, auth.Topic, t.Topic)
	}, func(r kmsg.Response, t kmsg.ListOffsetsRequestTopic) {
		resp := r.(*kmsg.ListOffsetsResponse)
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.Timestamp, rp.Offset, rp.LeaderEpoch = p.Partition, topicDenied, -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}

func checkOffsetForLeaderEpoch(c *Call) bool {
	req := c.Req.(*kmsg.OffsetForLeaderEpochRequest)
	return withholdTopics(c, &req.Topics, func(t kmsg.OffsetForLeaderEpochRequestTopic) bool {
		return c.allowed(auth.Describe, auth.Topic, t.Topic)
	}, func(r kmsg.Response, t kmsg.OffsetForLeaderEpochRequestTopic) {
		resp := r.(*kmsg.OffsetForLeaderEpochResponse)
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p.Partition, topicDenied, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}

// topicOperations and clusterOperations are the operations Metadata's
// authorized_operations report for a TOPIC and the CLUSTER (KIP-430).
var (
	topicOperations = []auth.Operation{auth.Read, auth.Write, auth.Create, auth.Delete, auth.Alter, auth.Describe,
		auth.DescribeConfigs, auth.AlterConfigs}
	clusterOperations = []auth.Operation{auth.Create, auth.Alter, auth.Describe, auth.ClusterAction, auth.DescribeConfigs,
		auth.AlterConfigs, auth.IdempotentWrite}
)

func checkMetadata(c *Call) bool {
	req := c.Req.(*kmsg.MetadataRequest)
	// authorized_operations, when asked (v8+ topics, v8-10 cluster), come from the ACLs.
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.MetadataResponse)
		a := c.Env.Authorizer
		if req.IncludeClusterAuthorizedOperations && c.Version >= 8 && c.Version <= 10 {
			resp.AuthorizedOperations = a.AuthorizedOperations(c.Principal, c.Host, auth.Cluster, auth.ClusterName, clusterOperations)
		}
		if req.IncludeTopicAuthorizedOperations && c.Version >= 8 {
			for i := range resp.Topics {
				if t := &resp.Topics[i]; t.ErrorCode == 0 && t.Topic != nil {
					t.AuthorizedOperations = a.AuthorizedOperations(c.Principal, c.Host, auth.Topic, *t.Topic, topicOperations)
				}
			}
		}
	})
	all := req.Topics == nil || c.Version == 0 && len(req.Topics) == 0
	if all {
		c.patch(func(r kmsg.Response) {
			resp := r.(*kmsg.MetadataResponse)
			out := resp.Topics[:0]
			for _, t := range resp.Topics {
				if t.Topic != nil && c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Describe, auth.Topic, *t.Topic) {
					out = append(out, t)
				}
			}
			resp.Topics = out
		})
		return true
	}
	autoCreate := (c.Version < 4 || req.AllowAutoTopicCreation) && c.Env.Config != nil && c.Env.Config.AutoCreateTopics
	canCreateAll := autoCreate && c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Create, auth.Cluster, auth.ClusterName)
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.MetadataRequestTopic) bool {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		name = c.topicName(name, t.TopicID)
		if name == "" {
			return true // an unknown id: the handler's UNKNOWN_TOPIC_ID
		}
		if !c.allowed(auth.Describe, auth.Topic, name) {
			return false
		}
		// A topic that would be auto-created needs CREATE (Apache answers a topic it may
		// not create TOPIC_AUTHORIZATION_FAILED).
		if autoCreate && !canCreateAll && c.Env.Catalog != nil {
			if _, exists := c.Env.Catalog.Partitions(name); !exists {
				return c.allowed(auth.Create, auth.Topic, name)
			}
		}
		return true
	})
	if !some {
		return true
	}
	deniedTopic := func(i int) kmsg.MetadataResponseTopic {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.TopicID, mt.ErrorCode = orig[i].Topic, orig[i].TopicID, topicDenied
		mt.AuthorizedOperations = int32Min
		return mt
	}
	if len(kept) == 0 {
		// Nothing left to ask: an empty list would mean every topic at v0.
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		fillBrokers(c, resp)
		resp.ClusterID = &c.Env.ClusterID
		resp.ControllerID = c.Env.NodeID
		resp.AuthorizedOperations = int32Min
		resp.Topics = mergeBack(nil, isDenied, deniedTopic)
		c.Respond(resp)
		return false
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.MetadataResponse)
		for i, d := range isDenied {
			if d {
				resp.Topics = append(resp.Topics, deniedTopic(i))
			}
		}
	})
	return true
}

func checkDeleteRecords(c *Call) bool {
	req := c.Req.(*kmsg.DeleteRecordsRequest)
	return withholdTopics(c, &req.Topics, func(t kmsg.DeleteRecordsRequestTopic) bool {
		return c.allowed(auth.Delete, auth.Topic, t.Topic)
	}, func(r kmsg.Response, t kmsg.DeleteRecordsRequestTopic) {
		resp := r.(*kmsg.DeleteRecordsResponse)
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LowWatermark = p.Partition, topicDenied, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}

func checkCreateTopics(c *Call) bool {
	if c.Env.Authorizer.Authorize(c.Principal, c.Host, auth.Create, auth.Cluster, auth.ClusterName) {
		return true
	}
	req := c.Req.(*kmsg.CreateTopicsRequest)
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.CreateTopicsRequestTopic) bool {
		return c.allowed(auth.Create, auth.Topic, t.Topic)
	})
	if !some {
		return true
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.CreateTopicsResponse)
		for i, d := range isDenied {
			if d {
				rt := kmsg.NewCreateTopicsResponseTopic()
				rt.Topic, rt.ErrorCode = orig[i].Topic, topicDenied
				rt.ErrorMessage = strPtr(kerr.TopicAuthorizationFailed.Message)
				rt.NumPartitions, rt.ReplicationFactor = -1, -1
				resp.Topics = append(resp.Topics, rt)
			}
		}
	})
	return true
}

func checkDeleteTopics(c *Call) bool {
	req := c.Req.(*kmsg.DeleteTopicsRequest)
	// v0-5 name topics in TopicNames; v6 in Topics (by name or id).
	origNames := req.TopicNames
	keptNames, deniedNames, anyNames := keep(origNames, func(n string) bool { return c.allowed(auth.Delete, auth.Topic, n) })
	origTopics := req.Topics
	keptTopics, deniedTopics, anyTopics := keep(origTopics, func(t kmsg.DeleteTopicsRequestTopic) bool {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		return c.topicAllowed(auth.Delete, name, t.TopicID)
	})
	if !anyNames && !anyTopics {
		return true
	}
	req.TopicNames, req.Topics = keptNames, keptTopics
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.DeleteTopicsResponse)
		add := func(name *string, id [16]byte) {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.TopicID, rt.ErrorCode = name, id, topicDenied
			rt.ErrorMessage = strPtr(kerr.TopicAuthorizationFailed.Message)
			resp.Topics = append(resp.Topics, rt)
		}
		for i, d := range deniedNames {
			if d {
				add(strPtr(origNames[i]), [16]byte{})
			}
		}
		for i, d := range deniedTopics {
			if d {
				add(origTopics[i].Topic, origTopics[i].TopicID)
			}
		}
	})
	return true
}

func checkCreatePartitions(c *Call) bool {
	req := c.Req.(*kmsg.CreatePartitionsRequest)
	orig := req.Topics
	kept, isDenied, some := keep(orig, func(t kmsg.CreatePartitionsRequestTopic) bool {
		return c.allowed(auth.Alter, auth.Topic, t.Topic)
	})
	if !some {
		return true
	}
	req.Topics = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.CreatePartitionsResponse)
		for i, d := range isDenied {
			if d {
				rt := kmsg.NewCreatePartitionsResponseTopic()
				rt.Topic, rt.ErrorCode = orig[i].Topic, topicDenied
				rt.ErrorMessage = strPtr(kerr.TopicAuthorizationFailed.Message)
				resp.Topics = append(resp.Topics, rt)
			}
		}
	})
	return true
}

func checkDescribeConfigs(c *Call) bool {
	req := c.Req.(*kmsg.DescribeConfigsRequest)
	orig := req.Resources
	codes := make([]int16, len(orig))
	isDenied := make([]bool, len(orig))
	var kept []kmsg.DescribeConfigsRequestResource
	some := false
	for i, r := range orig {
		ok := true
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			ok, codes[i] = c.allowed(auth.DescribeConfigs, auth.Topic, r.ResourceName), topicDenied
		case kmsg.ConfigResourceTypeGroupConfig:
			ok, codes[i] = c.allowed(auth.DescribeConfigs, auth.Group, r.ResourceName), groupDenied
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
			ok, codes[i] = c.allowed(auth.DescribeConfigs, auth.Cluster, auth.ClusterName), clusterDenied
		}
		if ok {
			kept = append(kept, r)
		} else {
			isDenied[i], some = true, true
		}
	}
	if !some {
		return true
	}
	req.Resources = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.DescribeConfigsResponse)
		resp.Resources = mergeBack(resp.Resources, isDenied, func(i int) kmsg.DescribeConfigsResponseResource {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = orig[i].ResourceType, orig[i].ResourceName, codes[i]
			rr.ErrorMessage = strPtr(kerr.ErrorForCode(codes[i]).Error())
			return rr
		})
	})
	return true
}

// alterConfigsDenied checks ALTER_CONFIGS on each resource of an AlterConfigs or
// IncrementalAlterConfigs (its type and name by typeName): a TOPIC on the topic, a GROUP
// on the group, a BROKER or BROKER_LOGGER on the cluster; other types are left to the
// handler. It returns which
// were denied and with what code.
func alterConfigsDenied[T any](c *Call, rs []T, typeName func(T) (kmsg.ConfigResourceType, string)) (kept []T, isDenied []bool, codes []int16, some bool) {
	isDenied, codes = make([]bool, len(rs)), make([]int16, len(rs))
	for i, r := range rs {
		typ, name := typeName(r)
		ok := true
		switch typ {
		case kmsg.ConfigResourceTypeTopic:
			ok, codes[i] = c.allowed(auth.AlterConfigs, auth.Topic, name), topicDenied
		case kmsg.ConfigResourceTypeGroupConfig:
			ok, codes[i] = c.allowed(auth.AlterConfigs, auth.Group, name), groupDenied
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
			ok, codes[i] = c.allowed(auth.AlterConfigs, auth.Cluster, auth.ClusterName), clusterDenied
		}
		if ok {
			kept = append(kept, r)
		} else {
			isDenied[i], some = true, true
		}
	}
	return kept, isDenied, codes, some
}

func checkAlterConfigs(c *Call) bool {
	req := c.Req.(*kmsg.AlterConfigsRequest)
	orig := req.Resources
	kept, isDenied, codes, some := alterConfigsDenied(c, orig, func(r kmsg.AlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
		return r.ResourceType, r.ResourceName
	})
	if !some {
		return true
	}
	req.Resources = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.AlterConfigsResponse)
		resp.Resources = mergeBack(resp.Resources, isDenied, func(i int) kmsg.AlterConfigsResponseResource {
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = orig[i].ResourceType, orig[i].ResourceName, codes[i]
			rr.ErrorMessage = strPtr(kerr.ErrorForCode(codes[i]).Error())
			return rr
		})
	})
	return true
}

func checkIncrementalAlterConfigs(c *Call) bool {
	req := c.Req.(*kmsg.IncrementalAlterConfigsRequest)
	orig := req.Resources
	kept, isDenied, codes, some := alterConfigsDenied(c, orig, func(r kmsg.IncrementalAlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
		return r.ResourceType, r.ResourceName
	})
	if !some {
		return true
	}
	req.Resources = kept
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.IncrementalAlterConfigsResponse)
		resp.Resources = mergeBack(resp.Resources, isDenied, func(i int) kmsg.IncrementalAlterConfigsResponseResource {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = orig[i].ResourceType, orig[i].ResourceName, codes[i]
			rr.ErrorMessage = strPtr(kerr.ErrorForCode(codes[i]).Error())
			return rr
		})
	})
	return true
}

func checkInitProducerID(c *Call) bool {
	req := c.Req.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		if c.allowed(auth.Write, auth.TransactionalID, *req.TransactionalID) {
			return true
		}
		resp.ErrorCode = txnDenied
		c.Respond(resp)
		return false
	}
	a := c.Env.Authorizer
	if a.Authorize(c.Principal, c.Host, auth.IdempotentWrite, auth.Cluster, auth.ClusterName) ||
		a.AnyAllowed(c.Principal, c.Host, auth.Write, auth.Topic) {
		return true
	}
	c.denied(auth.IdempotentWrite, auth.Cluster, auth.ClusterName)
	resp.ErrorCode = clusterDenied
	c.Respond(resp)
	return false
}

// checkAddPartitionsToTxn: the clients' versions need WRITE on the transactional id, then
// WRITE on every topic; a denied topic fails its partitions with 29 and the others with
// OPERATION_NOT_ATTEMPTED, nothing added (Apache's KafkaApis). The brokers' v4+ need
// CLUSTER_ACTION.
func checkAddPartitionsToTxn(c *Call) bool {
	req := c.Req.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version >= 4 {
		if c.allowed(auth.ClusterAction, auth.Cluster, auth.ClusterName) {
			return true
		}
		resp.ErrorCode = clusterDenied
		c.Respond(resp)
		return false
	}
	code := func(string) int16 { return txnDenied }
	if c.allowed(auth.Write, auth.TransactionalID, req.TransactionalID) {
		denied := map[string]bool{}
		for _, t := range req.Topics {
			if !c.allowed(auth.Write, auth.Topic, t.Topic) {
				denied[t.Topic] = true
			}
		}
		if len(denied) == 0 {
			return true
		}
		code = func(t string) int16 {
			if denied[t] {
				return kerr.TopicAuthorizationFailed.Code
			}
			return kerr.OperationNotAttempted.Code
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code(t.Topic)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	c.Respond(resp)
	return false
}

func checkAddOffsetsToTxn(c *Call) bool {
	req := c.Req.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	switch {
	case !c.allowed(auth.Write, auth.TransactionalID, req.TransactionalID):
		resp.ErrorCode = txnDenied
	case !c.allowed(auth.Read, auth.Group, req.Group):
		resp.ErrorCode = groupDenied
	default:
		return true
	}
	c.Respond(resp)
	return false
}

func checkEndTxn(c *Call) bool {
	req := c.Req.(*kmsg.EndTxnRequest)
	if c.allowed(auth.Write, auth.TransactionalID, req.TransactionalID) {
		return true
	}
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = txnDenied, -1, -1
	c.Respond(resp)
	return false
}

// checkDescribeTransactions: each id needs DESCRIBE; a denied one is answered 53 in its
// place, the others are described, without the topics the principal may not DESCRIBE
// (Apache's KafkaApis).
func checkDescribeTransactions(c *Call) bool {
	req := c.Req.(*kmsg.DescribeTransactionsRequest)
	orig := req.TransactionalIDs
	kept, isDenied, some := keep(orig, func(id string) bool {
		return c.allowed(auth.Describe, auth.TransactionalID, id)
	})
	req.TransactionalIDs = kept
	a := c.Env.Authorizer
	c.patch(func(r kmsg.Response) {
		resp := r.(*kmsg.DescribeTransactionsResponse)
		for i := range resp.TransactionStates {
			st := &resp.TransactionStates[i]
			topics := st.Topics[:0]
			for _, tp := range st.Topics {
				if a.Authorize(c.Principal, c.Host, auth.Describe, auth.Topic, tp.Topic) {
					topics = append(topics, tp)
				}
			}
			st.Topics = topics
		}
		if !some {
			return
		}
		resp.TransactionStates = mergeBack(resp.TransactionStates, isDenied, func(i int) kmsg.DescribeTransactionsResponseTransactionState {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode, st.ProducerID, st.ProducerEpoch, st.StartTimestamp = orig[i], txnDenied, -1, -1, -1
			return st
		})
	})
	return true
}

// checkDescribeCluster: anyone may describe the cluster (Apache checks nothing); the
// cluster's authorized operations, when asked, are the ACLs' for a principal that may
// DESCRIBE it, and none for one that may not (AuthHelper.computeDescribeClusterResponse).
func checkDescribeCluster(c *Call) bool {
	req := c.Req.(*kmsg.DescribeClusterRequest)
	if !req.IncludeClusterAuthorizedOperations {
		return true
	}
	ops := int32(0)
	if c.allowed(auth.Describe, auth.Cluster, auth.ClusterName) {
		ops = c.Env.Authorizer.AuthorizedOperations(c.Principal, c.Host, auth.Cluster, auth.ClusterName, clusterOperations)
	}
	c.patch(func(r kmsg.Response) {
		if resp := r.(*kmsg.DescribeClusterResponse); resp.ErrorCode == 0 {
			resp.ClusterAuthorizedOperations = ops
		}
	})
	return true
}

// checkDescribeLogDirs: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and
// no log dirs (KafkaApis.handleDescribeLogDirsRequest; v1-2 carry no error code, so
// the refusal there is the empty list).
func checkDescribeLogDirs(c *Call) bool {
	if c.allowed(auth.Describe, auth.Cluster, auth.ClusterName) {
		return true
	}
	resp := c.Req.(*kmsg.DescribeLogDirsRequest).ResponseKind().(*kmsg.DescribeLogDirsResponse)
	resp.ErrorCode = clusterDenied
	c.Respond(resp)
	return false
}

// clusterAllowed is the check of the ACL and SCRAM APIs, made in their handlers: with
// authorization off every principal may (Apache's ACL APIs then answer SECURITY_DISABLED
// themselves).
func (c *Call) clusterAllowed(op auth.Operation) bool {
	if c.Env.Authorizer == nil {
		return true
	}
	return c.allowed(op, auth.Cluster, auth.ClusterName)
}

func checkWriteTxnMarkers(c *Call) bool {
	if c.allowed(auth.ClusterAction, auth.Cluster, auth.ClusterName) {
		return true
	}
	req := c.Req.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition, rp.ErrorCode = p, clusterDenied
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	c.Respond(resp)
	return false
}

func checkDescribeProducers(c *Call) bool {
	req := c.Req.(*kmsg.DescribeProducersRequest)
	return withholdTopics(c, &req.Topics, func(t kmsg.DescribeProducersRequestTopic) bool {
		return c.allowed(auth.Read, auth.Topic, t.Topic)
	}, func(r kmsg.Response, t kmsg.DescribeProducersRequestTopic) {
		resp := r.(*kmsg.DescribeProducersResponse)
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, topicDenied
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	})
}
