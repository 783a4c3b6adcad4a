package conn

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/cluster"
	"kaas/registry"
)

// FindCoordinator (key 10), v0–v6.
//
//	v1: key_type (0 group, 1 transaction), throttle, error_message.
//	v2: same shape (throttle behaviour after quota violation).
//	v3: flexible.
//	v4: batched coordinator_keys; one entry per key in the response (KIP-699).
//	v5: TRANSACTION_ABORTABLE may be returned.
//	v6: key_type 2 (share groups, KIP-932) — not supported here: INVALID_REQUEST.
//
// Any broker answers. The coordinator is the registry's for the key (this broker alone
// in dev mode), with its endpoint on the listener the request arrived on, so a client
// bootstrapped on one listener stays on it.
func init() { register(10, 0, 6, handleFindCoordinator) }

func handleFindCoordinator(c *Call) {
	req := c.Req.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	if c.Version < 4 {
		node, host, port, code := findCoordinator(c, req.CoordinatorType, req.CoordinatorKey)
		resp.NodeID, resp.Host, resp.Port, resp.ErrorCode = node, host, port, code
		if code != 0 {
			resp.ErrorMessage = strPtr(kerr.ErrorForCode(code).Error())
		}
		c.Respond(resp)
		return
	}
	for _, key := range req.CoordinatorKeys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		rc.NodeID, rc.Host, rc.Port, rc.ErrorCode = findCoordinator(c, req.CoordinatorType, key)
		if rc.ErrorCode != 0 {
			rc.ErrorMessage = strPtr(kerr.ErrorForCode(rc.ErrorCode).Error())
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	c.Respond(resp)
}

// findCoordinator answers one key: node -1, host "", port -1 with the error code, as
// Apache's error responses carry.
func findCoordinator(c *Call, keyType int8, key string) (node int32, host string, port int32, code int16) {
	if keyType != 0 && keyType != 1 {
		return -1, "", -1, kerr.InvalidRequest.Code
	}
	if c.Env.Registry == nil {
		return c.advertisedSelf()
	}
	var b registry.Broker
	ok := false
	if c.Env.Ownership != nil {
		// The view this broker routes by (the one its group APIs answer for).
		st := c.Env.Ownership()
		var id int32
		var s cluster.Status
		if keyType == 1 {
			id, s = st.Txn(key)
		} else {
			id, s = st.Group(key)
		}
		if s != cluster.Unavailable {
			b, ok = c.Env.Registry.Broker(id)
		}
	} else {
		b, ok = c.Env.Registry.Coordinator(key)
	}
	// Not a peer whose held connection just ended: it is killed or paused, and a client
	// sent to it would wait or fail (COORDINATOR_NOT_AVAILABLE is retried).
	if !ok || b.ID != c.Env.NodeID && c.Env.Registry.Suspect(b.ID) {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	ep, ok := b.Endpoints[c.Listener]
	if !ok {
		if b.ID != c.Env.NodeID {
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code
		}
		return c.advertisedSelf()
	}
	return b.ID, ep.Host, ep.Port, 0
}

// advertisedSelf is this broker on the request's listener, from the configuration.
func (c *Call) advertisedSelf() (int32, string, int32, int16) {
	l := c.Env.Config.Advertised(c.Listener, 0)
	if l.Port == 0 {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code
	}
	return c.Env.NodeID, l.Host, int32(l.Port), 0
}
