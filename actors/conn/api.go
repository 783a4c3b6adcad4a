package conn

import (
	"net"
	"reflect"
	"sort"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/auth"
	"kaas/logs"
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
	// name is the API's name (the metrics label); errorField is the index of the
	// response struct's top-level ErrorCode field, -1 when it has none.
	name       string
	errorField int
	// flexibleFrom is the first version whose request header is v2 (-1: none).
	flexibleFrom int16
	// lastSize is the size of the last response encoded for this API, the starting
	// capacity of the next one's buffer (most APIs answer alike each time).
	lastSize atomic.Int32
}

// maxSizeHint bounds the buffer a response starts with: a Fetch of megabytes is not a
// reason for the next small answer to take as much.
const maxSizeHint = 64 << 10

func (a *api) sizeHint() int {
	if a == nil {
		return 64
	}
	return max(64, int(a.lastSize.Load()))
}

func (a *api) noteSize(n int) {
	if a != nil && int(a.lastSize.Load()) != n {
		a.lastSize.Store(int32(min(n, maxSizeHint)))
	}
}

// firstFlexible is the first version of key's request that is flexible (header v2),
// -1 when none is.
func firstFlexible(key int16) int16 {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return -1
	}
	for v := int16(0); v <= req.MaxVersion(); v++ {
		req.SetVersion(v)
		if req.IsFlexible() {
			return v
		}
	}
	return -1
}

// apis is filled by the init functions of the NN_name.go files, one per API key, and
// never changed afterwards.
var apis = map[int16]*api{}

// register adds an API to the table; each NN_name.go file calls it from init.
func register(key, min, max int16, h Handler) {
	if _, dup := apis[key]; dup {
		panic("conn: API registered twice: " + kmsg.NameForKey(key))
	}
	apis[key] = &api{key: key, min: min, max: max, handle: refuseLongStrings(authorizing(key, h)),
		name: kmsg.NameForKey(key), errorField: errorCodeField(key), flexibleFrom: firstFlexible(key)}
	table.Store(nil)
}

// errorCodeField finds, once per API, the index of its response's top-level ErrorCode
// field, so that labelling a response with its code reads one field.
func errorCodeField(key int16) int {
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		return -1
	}
	t := reflect.TypeOf(resp)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return -1
	}
	f, ok := t.Elem().FieldByName("ErrorCode")
	if !ok || f.Type.Kind() != reflect.Int16 || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}

// topErrorCode reads resp's top-level ErrorCode, if its API has one, for metrics.
func (a *api) topErrorCode(resp kmsg.Response) int16 {
	if a.errorField < 0 {
		return 0
	}
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct ||
		v.Elem().NumField() <= a.errorField {
		return 0
	}
	f := v.Elem().Field(a.errorField)
	if f.Kind() != reflect.Int16 {
		return 0
	}
	return int16(f.Int())
}

// refuseLongStrings closes the connection of a request with a string field longer than
// the protocol allows (MaxStringBytes), before its handler sees it, as Apache's readers
// do. The request header's client id is a non-compact string, at most 32,767 bytes.
func refuseLongStrings(h Handler) Handler {
	return func(c *Call) {
		if err := checkStrings(c.Req); err != nil {
			c.Fail(err)
			return
		}
		h(c)
	}
}

// table is the ApiVersions table in key order, made on first use after the last
// register (registration happens in init functions only). Connections on several
// listeners or brokers of one process ask for it at once, so it is published atomically.
var table atomic.Pointer[[]*api]

// supported lists the table in key order, as ApiVersions advertises it.
func supported() []*api {
	if t := table.Load(); t != nil {
		return *t
	}
	out := make([]*api, 0, len(apis))
	for _, a := range apis {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	table.Store(&out)
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
	// Principal is who sent the request, Host its address as ACLs name hosts.
	Principal auth.Principal
	Host      string

	conn  *connActor
	api   *api
	log   *zerolog.Logger // built on first use: most requests log nothing
	slot  *slot
	own   slot // what slot points to: one allocation for both
	seq   uint64
	start time.Time
	done  bool
	// patches complete the response before it is encoded: the authorization step puts
	// back the parts of the request it took out as denied (authz.go).
	patches []func(kmsg.Response)
	tear    bool // reset the connection mid-response (Intercept)
}

// Log is the connection's logger with the request's API, version and client id.
func (c *Call) Log() *zerolog.Logger {
	if c.log == nil {
		l := c.conn.log.With().Str("api", c.api.name).Int16("api_version", c.Version).
			Str("client_id", logs.ID(c.ClientID)).Logger()
		c.log = &l
	}
	return c.log
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
