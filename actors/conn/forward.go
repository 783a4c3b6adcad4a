package conn

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/cluster"
	"kaas/peer"
)

// Forwarding. In a cluster one broker writes the topic catalogue (the owner of the
// partition key ("", -1); Metadata names it controller). A CreateTopics, DeleteTopics,
// CreatePartitions, AlterConfigs or IncrementalAlterConfigs of topics or groups (or of
// the dynamic broker configs, kept with the catalogue) asked of another broker is
// authorized here first, every check as on any request (authz.go), checked as
// far as it can be without the catalogue (the handler's own validation), and then sent
// to the writer over the inter-broker client (package peer) as this broker, in the
// writer's answer's place: the client gets the writer's answer. Apache forwards as the
// original principal inside an Envelope request; kaas has the forwarding broker decide
// and the writer trust the broker (CLUSTER_ACTION on the cluster, docs/security.md).
//
// A request that came from a peer (its client id starts with peer.ClientIDPrefix) is
// never forwarded again: a writer that has just lost the catalogue answers it
// NOT_CONTROLLER. When the writer cannot be reached (it was killed, the request timed
// out, too many are in flight), the request goes to this broker's own topics manager as
// it did before forwarding existed, which answers NOT_CONTROLLER, or handles it if this
// broker has become the writer meanwhile: clients retry NOT_CONTROLLER.

// catalogueWriter is the broker requests of the catalogue are forwarded to: another
// broker that writes it, when this one may forward (ok).
func catalogueWriter(c *Call) (int32, bool) {
	if c.Env.Peers == nil || c.Env.Ownership == nil || strings.HasPrefix(c.ClientID, peer.ClientIDPrefix) {
		return 0, false
	}
	writer, st := c.Env.Ownership().Catalogue()
	return writer, st == cluster.Elsewhere
}

// askWriter sends msg, whose Reply is reply, to the topics manager, unless another
// broker writes the catalogue: then it sends req (the request to forward, its own
// copy: the client sets its version) to that broker, and resolves reply with
// result(writer's response). The convert of reply's Await must take both kinds of
// value. The send and the wait run on the inter-broker client's goroutines, never in
// the connection's Receive.
func askWriter(c *Call, msg any, reply actor.Promise, req kmsg.Request, result func(kmsg.Response) any) {
	writer, ok := catalogueWriter(c)
	if !ok {
		askTopics(c, msg)
		return
	}
	env := c.Env
	c.Log().Debug().Int32("writer", writer).Msg("topic_request_forwarded")
	env.Peers.Send(writer, req, func(resp kmsg.Response, err error) {
		if err != nil {
			// The client logged why (inter_broker_request_failed).
			env.System.Send(env.Topics, msg) // NOT_CONTROLLER, as without forwarding
			return
		}
		reply.Resolve(result(resp))
	})
}
