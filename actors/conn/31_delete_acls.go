package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/logs"
)

// DeleteAcls (key 31), v0–v3.
//
//	v1: resource_pattern_type in filters and matches (KIP-290; v0 filters are LITERAL).
//	v2: flexible. v3: USER resources (KIP-554).
//
// Every ACL a filter matches is removed from acls.json in one atomic rewrite, and listed
// under that filter. Needs ALTER on the cluster; without an authorizer, SECURITY_DISABLED.
func init() { register(31, 0, 3, handleDeleteAcls) }

func handleDeleteAcls(c *Call) {
	req := c.Req.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	for i := range resp.Results {
		resp.Results[i] = kmsg.NewDeleteACLsResponseResult()
	}
	if code, msg := aclAPIGate(c, auth.Alter); code != 0 {
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, strPtr(msg)
		}
		c.Respond(resp)
		return
	}
	var filters []auth.Filter
	var at []int
	for i, f := range req.Filters {
		af := auth.Filter{ResourceType: f.ResourceType, ResourceName: f.ResourceName, PatternType: f.ResourcePatternType,
			Principal: f.Principal, Host: f.Host, Operation: f.Operation, Permission: f.PermissionType}
		if c.Version == 0 {
			af.PatternType = auth.Literal
		}
		if err := af.Validate(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, strPtr(err.Error())
			continue
		}
		filters = append(filters, af)
		at = append(at, i)
	}
	if len(filters) == 0 {
		c.Respond(resp)
		return
	}
	authz, log := c.Env.Authorizer, c.Log()
	type deleted struct {
		matched [][]auth.ACL
		err     error
	}
	offReceive(c, func() any {
		m, err := authz.Delete(filters)
		return &deleted{m, err}
	}, func(v any) kmsg.Response {
		d := v.(*deleted)
		n := 0
		for j, i := range at {
			r := &resp.Results[i]
			if d.err != nil {
				r.ErrorCode, r.ErrorMessage = kerr.UnknownServerError.Code, strPtr("writing the ACL file failed")
				continue
			}
			for _, a := range d.matched[j] {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
				m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
				r.MatchingACLs = append(r.MatchingACLs, m)
				n++
			}
		}
		if d.err != nil {
			log.Error().Err(d.err).Msg("acls_write_failed")
		} else {
			log.Info().Int("acls", n).Str("principal", logs.ID(c.Principal.String())).Msg("acls_deleted")
		}
		return resp
	})
}
