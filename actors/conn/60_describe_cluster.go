package conn

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster (key 60), v0–v2 (KIP-700).
//
//	v1: endpoint_type (KIP-919: 1 brokers, 2 controllers). v2: include_fenced_brokers,
//	    is_fenced per broker (KIP-1073).
//
// The brokers are Metadata's (listedBrokers): the live view, each with its endpoint on
// the request's listener. With include_fenced_brokers, the registry's brokers that the
// view leaves out (a lapsed lease, a peer just gone) are listed too, fenced, as an Apache
// controller lists the brokers it has fenced.
//
// kaas has no controller. An Apache KRaft broker asked for its brokers answers a live
// broker as controller_id (KafkaApis: a random alive broker id, -1 if it is not among the
// brokers listed); kaas answers the lowest live broker id, so that every broker with the
// same view names the same one. It is not the broker that writes the topic catalogue
// (Metadata's controller_id): no request here depends on which broker that is.
//
// An endpoint type other than brokers is refused as Apache's brokers refuse it:
// MISMATCHED_ENDPOINT_TYPE for controllers, UNSUPPORTED_ENDPOINT_TYPE for an unknown one
// (v0 cannot ask for either). cluster_authorized_operations, when asked, is every CLUSTER
// operation with authorization off (Apache with no authorizer); with it on, the ACLs'
// answer for a principal that may DESCRIBE the cluster and 0 for one that may not (authz.go).
func init() { register(60, 0, 2, handleDescribeCluster) }

const (
	endpointBrokers     = 1
	endpointControllers = 2
)

// clusterAuthorizedOperations is Apache's answer with no authorizer: every CLUSTER
// operation (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
// IDEMPOTENT_WRITE: bits 4, 7, 8, 9, 10, 11, 12).
const clusterAuthorizedOperations = 1<<4 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12

func handleDescribeCluster(c *Call) {
	req := c.Req.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if req.EndpointType != endpointBrokers {
		resp.ErrorCode = kerr.InvalidRequest.Code
		msg := "Unsupported endpoint type " + strconv.Itoa(int(req.EndpointType))
		switch {
		case c.Version == 0:
		case req.EndpointType == endpointControllers:
			resp.ErrorCode = kerr.MismatchedEndpointType.Code
			msg = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
		default:
			resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		}
		resp.ErrorMessage = &msg
		resp.ControllerID = -1
		c.Respond(resp)
		return
	}
	resp.EndpointType = endpointBrokers
	resp.ClusterID = c.Env.ClusterID
	resp.ControllerID = -1
	for _, b := range listedBrokers(c, c.Version >= 2 && req.IncludeFencedBrokers) {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack, rb.IsFenced = b.id, b.host, b.port, b.rack, b.fenced
		resp.Brokers = append(resp.Brokers, rb)
		if !b.fenced && (resp.ControllerID < 0 || b.id < resp.ControllerID) {
			resp.ControllerID = b.id
		}
	}
	resp.ClusterAuthorizedOperations = int32Min
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = clusterAuthorizedOperations
	}
	c.Respond(resp)
}
