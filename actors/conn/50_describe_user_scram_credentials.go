package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
)

// DescribeUserScramCredentials (key 50), v0 (KIP-554).
//
// Each user's SCRAM mechanisms and iterations from users.json (never a salt or key): all
// users when none is named; a named user without credentials is RESOURCE_NOT_FOUND, one
// named twice DUPLICATE_RESOURCE. Needs DESCRIBE on the cluster when the authorizer is on
// (top-level CLUSTER_AUTHORIZATION_FAILED).
func init() { register(50, 0, 0, handleDescribeUserScramCredentials) }

func handleDescribeUserScramCredentials(c *Call) {
	req := c.Req.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !c.clusterAllowed(auth.Describe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		resp.ErrorMessage = strPtr(kerr.ClusterAuthorizationFailed.Message)
		c.Respond(resp)
		return
	}
	creds := c.Env.Credentials
	if creds == nil {
		c.Respond(resp)
		return
	}
	var names []string
	count := map[string]int{}
	if len(req.Users) > 0 {
		for _, u := range req.Users {
			if count[u.Name]++; count[u.Name] == 1 {
				names = append(names, u.Name)
			}
		}
	}
	for _, um := range creds.Describe(names) {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = um.User
		switch {
		case count[um.User] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
			r.ErrorMessage = strPtr("Cannot describe SCRAM credentials for the same user twice in a single request: " + um.User)
		case len(um.Mechanisms) == 0:
			r.ErrorCode = kerr.ResourceNotFound.Code
			r.ErrorMessage = strPtr("Attempt to describe a user credential that does not exist: " + um.User)
		}
		for i, m := range um.Mechanisms {
			ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			ci.Mechanism, ci.Iterations = scramMechanismCode(m), int32(um.Iterations[i])
			r.CredentialInfos = append(r.CredentialInfos, ci)
		}
		resp.Results = append(resp.Results, r)
	}
	c.Respond(resp)
}

// scramMechanismCode is a mechanism's number on the wire (1 SCRAM-SHA-256, 2
// SCRAM-SHA-512); scramMechanismName the reverse, "" for an unknown number.
func scramMechanismCode(m string) int8 {
	for i, n := range auth.ScramMechanisms {
		if n == m {
			return int8(i + 1)
		}
	}
	return 0
}

func scramMechanismName(code int8) string {
	if code < 1 || int(code) > len(auth.ScramMechanisms) {
		return ""
	}
	return auth.ScramMechanisms[code-1]
}
