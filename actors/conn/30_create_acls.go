package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/logs"
)

// CreateAcls (key 30), v0–v3.
//
//	v1: resource_pattern_type (KIP-290; v0 creations are LITERAL). v2: flexible.
//	v3: USER resources (KIP-554; refused here: INVALID_REQUEST).
//
// Valid creations are added to <data.dir>/__cluster/acls.json in one atomic rewrite,
// which every broker takes up; an invalid one gets INVALID_REQUEST with the reason. Needs
// ALTER on the cluster; without an authorizer, SECURITY_DISABLED.
func init() { register(30, 0, 3, handleCreateAcls) }

func handleCreateAcls(c *Call) {
	req := c.Req.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewCreateACLsResponseResult()
	}
	if code, msg := aclAPIGate(c, auth.Alter); code != 0 {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, strPtr(msg)
		}
		c.Respond(resp)
		return
	}
	var acls []auth.ACL
	var at []int
	for i, cr := range req.Creations {
		a := auth.ACL{ResourceType: cr.ResourceType, ResourceName: cr.ResourceName, PatternType: cr.ResourcePatternType,
			Principal: cr.Principal, Host: cr.Host, Operation: cr.Operation, Permission: cr.PermissionType}
		if c.Version == 0 {
			a.PatternType = auth.Literal
		}
		if err := a.Validate(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, strPtr(err.Error())
			continue
		}
		acls = append(acls, a)
		at = append(at, i)
	}
	if len(acls) == 0 {
		c.Respond(resp)
		return
	}
	authz, log := c.Env.Authorizer, c.Log()
	offReceive(c, func() any { return authz.Create(acls) }, func(v any) kmsg.Response {
		if err, _ := v.(error); err != nil {
			log.Error().Err(err).Msg("acls_write_failed")
			for _, i := range at {
				resp.Results[i].ErrorCode = kerr.UnknownServerError.Code
				resp.Results[i].ErrorMessage = strPtr("writing the ACL file failed")
			}
			return resp
		}
		log.Info().Int("acls", len(acls)).Str("principal", logs.ID(c.Principal.String())).Msg("acls_created")
		return resp
	})
}
