package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
)

// DescribeAcls (key 29), v0–v3.
//
//	v1: resource_pattern_type (KIP-290; v0 filters are LITERAL). v2: flexible. v3: USER
//	    resources (KIP-554).
//
// The ACLs the filter matches, grouped by resource pattern. Needs DESCRIBE on the
// cluster (CLUSTER_AUTHORIZATION_FAILED); without an authorizer, SECURITY_DISABLED.
func init() { register(29, 0, 3, handleDescribeAcls) }

func handleDescribeAcls(c *Call) {
	req := c.Req.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	code, msg := aclAPIGate(c, auth.Describe)
	if code != 0 {
		resp.ErrorCode, resp.ErrorMessage = code, strPtr(msg)
		c.Respond(resp)
		return
	}
	f := auth.Filter{ResourceType: req.ResourceType, ResourceName: req.ResourceName, PatternType: req.ResourcePatternType,
		Principal: req.Principal, Host: req.Host, Operation: req.Operation, Permission: req.PermissionType}
	if c.Version == 0 {
		f.PatternType = auth.Literal
	}
	if err := f.Validate(); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, strPtr(err.Error())
		c.Respond(resp)
		return
	}
	type pattern struct {
		t    auth.ResourceType
		name string
		pat  auth.PatternType
	}
	at := map[pattern]int{}
	for _, a := range c.Env.Authorizer.Rules().ACLs() {
		if !f.Matches(a) {
			continue
		}
		k := pattern{a.ResourceType, a.ResourceName, a.PatternType}
		i, ok := at[k]
		if !ok {
			r := kmsg.NewDescribeACLsResponseResource()
			r.ResourceType, r.ResourceName, r.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
			resp.Resources = append(resp.Resources, r)
			i = len(resp.Resources) - 1
			at[k] = i
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host, e.Operation, e.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, e)
	}
	c.Respond(resp)
}

// aclAPIGate is the ACL APIs' first check: an authorizer must be on, and the principal
// may do op on the cluster.
func aclAPIGate(c *Call, op auth.Operation) (int16, string) {
	if c.Env.Authorizer == nil {
		return kerr.SecurityDisabled.Code, "no authorizer is configured (--authorizer=simple)"
	}
	if !c.clusterAllowed(op) {
		return kerr.ClusterAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Message
	}
	return 0, ""
}
