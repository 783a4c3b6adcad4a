package conn

import (
	"net"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
)

// Handler answers one decoded request. It must complete the call exactly once: at once
// with Respond, or later through a promise made with Await and handed to another actor.
// Kafka errors are response data (resp.ErrorCode = kerr.X.Code); Fail means the client
// broke the protocol and its connection is closed.
type Handler func(c *Call)

// api is one row of the ApiVersions table.
type api struct {
	key      int16
	min, max int16
	handle   Handler
}

// apis is filled by the init functions of the NN_name.go files, one per API key, and
// never changed afterwards.
var apis = map[int16]api{}

// register adds an API to the table; each NN_name.go file calls it from init.
func register(key, min, max int16, h Handler) {
	if _, dup := apis[key]; dup {
		panic("conn: API registered twice: " + kmsg.NameForKey(key))
	}
	apis[key] = api{key: key, min: min, max: max, handle: refuseLongStrings(h)}
}

// refuseLongStrings closes the connection of a request with a string field longer than
// the protocol allows (MaxStringBytes), before its handler sees it, as Apache's readers
// do. The request header's client id is a non-compact string, at most 32,767 bytes.
func refuseLongStrings(h Handler) Handler {
	return func(c *Call) {
		if err := CheckStrings(c.Req); err != nil {
			c.Fail(err)
			return
		}
		h(c)
	}
}

// supported lists the table in key order, as ApiVersions advertises it.
func supported() []api {
	out := make([]api, 0, len(apis))
	for _, a := range apis {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// Call is one request on a connection, decoded, with what its handler may need.
type Call struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
	Req           kmsg.Request
	// Listener is the name of the listener the request arrived on (PLAINTEXT, ...).
	Listener string
	// Remote is the client's address.
	Remote net.Addr
	Env    *Env
	Log    zerolog.Logger

	conn  *connActor
	slot  *slot
	seq   uint64
	start time.Time
	done  bool
}

// Respond completes the call with resp (its version is set to the request's).
func (c *Call) Respond(resp kmsg.Response) { c.conn.complete(c, resp) }

// NoResponse completes a call that gets no answer on the wire (Produce with acks=0).
func (c *Call) NoResponse() { c.conn.complete(c, nil) }

// ResponseBudget returns want, or less when the connection or the broker holds many
// bytes of responses not yet written: the most this call's response should carry (a
// Fetch caps its max bytes with it). The bytes are promised to the call until it is
// completed.
func (c *Call) ResponseBudget(want int32) int32 { return c.conn.responseBudget(c, want) }

// Fail closes the connection: the request broke the protocol in a way that has no
// error code (reason is logged with the remote address, key and version).
func (c *Call) Fail(reason error) { c.conn.fail(c, reason) }

// Await returns a promise for another actor to resolve later; when it is resolved, the
// connection actor calls convert with the value and sends the response it returns.
// convert runs inside the connection actor and must be pure (it reads only the value and
// what it captured from the request).
func (c *Call) Await(convert func(v any) kmsg.Response) actor.Promise {
	return c.conn.await(c, convert)
}

// ClientHost is the client's address as Apache reports it in DescribeGroups ("/1.2.3.4").
func (c *Call) ClientHost() string {
	if a, ok := c.Remote.(*net.TCPAddr); ok {
		return "/" + a.IP.String()
	}
	if c.Remote == nil {
		return ""
	}
	return "/" + c.Remote.String()
}
