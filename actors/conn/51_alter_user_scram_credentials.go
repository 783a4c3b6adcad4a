package conn

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/auth"
	"kaas/logs"
)

// AlterUserScramCredentials (key 51), v0 (KIP-554).
//
// Upsertions carry the salted password the client derived (never the password); the
// broker keeps the salt, iterations, stored key and server key in users.json, in one
// atomic rewrite that every broker takes up. One result per user: an unknown mechanism is
// UNSUPPORTED_SASL_MECHANISM, iterations outside 4096-16384 or an empty name or salt
// UNACCEPTABLE_CREDENTIAL, a user and mechanism named twice DUPLICATE_RESOURCE, a
// deletion of a credential that does not exist RESOURCE_NOT_FOUND. Needs ALTER on the
// cluster when the authorizer is on.
func init() { register(51, 0, 0, handleAlterUserScramCredentials) }

func handleAlterUserScramCredentials(c *Call) {
	req := c.Req.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	// Users in the order first named; each gets one result.
	var users []string
	codes := map[string]int16{}
	msgs := map[string]string{}
	fail := func(user string, code int16, msg string) {
		if codes[user] == 0 {
			codes[user], msgs[user] = code, msg
		}
	}
	note := func(user string) {
		if _, ok := codes[user]; !ok {
			codes[user] = 0
			users = append(users, user)
		}
	}
	type key struct {
		user string
		mech int8
	}
	seen := map[key]int{}
	for _, d := range req.Deletions {
		note(d.Name)
		seen[key{d.Name, d.Mechanism}]++
	}
	for _, u := range req.Upsertions {
		note(u.Name)
		seen[key{u.Name, u.Mechanism}]++
	}
	allowed := c.clusterAllowed(auth.Alter)
	var changes []auth.Change
	var owner []string
	check := func(name string, mech int8) (string, bool) {
		m := scramMechanismName(mech)
		switch {
		case !allowed:
			fail(name, kerr.ClusterAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Message)
		case c.Env.Credentials == nil:
			fail(name, kerr.UnsupportedSaslMechanism.Code, "no SASL users are kept by this broker")
		case name == "":
			fail(name, kerr.UnacceptableCredential.Code, "Username must not be empty")
		case m == "":
			fail(name, kerr.UnsupportedSaslMechanism.Code, "Unknown SCRAM mechanism")
		case seen[key{name, mech}] > 1:
			fail(name, kerr.DuplicateResource.Code, "A user credential cannot be altered twice in the same request")
		default:
			return m, true
		}
		return "", false
	}
	for _, d := range req.Deletions {
		if m, ok := check(d.Name, d.Mechanism); ok {
			changes = append(changes, auth.Change{User: d.Name, Mechanism: m})
			owner = append(owner, d.Name)
		}
	}
	for _, u := range req.Upsertions {
		m, ok := check(u.Name, u.Mechanism)
		if !ok {
			continue
		}
		if u.Iterations < auth.MinIterations || u.Iterations > auth.MaxIterations {
			fail(u.Name, kerr.UnacceptableCredential.Code, "Iterations must be between 4096 and 16384")
			continue
		}
		if len(u.Salt) == 0 || len(u.SaltedPassword) == 0 {
			fail(u.Name, kerr.UnacceptableCredential.Code, "Salt and salted password must not be empty")
			continue
		}
		cr, err := auth.CredentialFromSalted(m, u.Salt, u.SaltedPassword, int(u.Iterations))
		if err != nil {
			fail(u.Name, kerr.UnsupportedSaslMechanism.Code, "Unknown SCRAM mechanism")
			continue
		}
		changes = append(changes, auth.Change{User: u.Name, Mechanism: m, Credential: &cr})
		owner = append(owner, u.Name)
	}
	// A user with any failed change has none of its changes applied.
	var apply []auth.Change
	var applyOwner []string
	for i, ch := range changes {
		if codes[owner[i]] == 0 {
			apply = append(apply, ch)
			applyOwner = append(applyOwner, owner[i])
		}
	}
	build := func() kmsg.Response {
		for _, u := range users {
			r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			r.User, r.ErrorCode = u, codes[u]
			if r.ErrorCode != 0 {
				r.ErrorMessage = strPtr(msgs[u])
			}
			resp.Results = append(resp.Results, r)
		}
		return resp
	}
	if len(apply) == 0 {
		c.Respond(build())
		return
	}
	creds, log := c.Env.Credentials, c.Log()
	type altered struct {
		errs []error
		err  error
	}
	offReceive(c, func() any {
		errs, err := creds.Alter(apply)
		return &altered{errs, err}
	}, func(v any) kmsg.Response {
		a := v.(*altered)
		for i, u := range applyOwner {
			switch {
			case a.err != nil:
				fail(u, kerr.UnknownServerError.Code, "writing the users file failed")
			case errors.Is(a.errs[i], auth.ErrNoSuchCredential):
				fail(u, kerr.ResourceNotFound.Code, "Attempt to delete a user credential that does not exist")
			}
		}
		if a.err != nil {
			log.Error().Err(a.err).Msg("users_write_failed")
		} else {
			log.Info().Int("changes", len(apply)).Str("principal", logs.ID(c.Principal.String())).Msg("scram_credentials_altered")
		}
		return build()
	})
}
