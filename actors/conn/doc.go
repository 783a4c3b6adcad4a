// Package conn is the Kafka wire: one actor per TCP connection, and a handler per API.
//
// A connection has a reader goroutine, which reads size-prefixed frames (growing its
// buffer as bytes arrive, within the broker-wide queued.max.request.bytes and a deadline
// for each frame) and hands them to the connection actor, and a writer goroutine, which
// writes finished responses; the actor starts both and both end with it (socket.go). On
// a TLS listener the reader completes the handshake first, so the actor knows the client
// certificate's principal before any request; on a SASL listener the actor holds the
// SASL exchange and handles nothing but ApiVersions and the SASL APIs until it succeeds
// (sasl.go). The actor decodes each request with kmsg, checks the API and version
// against the table (ApiVersions advertises exactly what is registered), checks its
// access when an authorizer is set (authz.go), and calls the API's handler: NN_name.go, NN
// being the API key, registered from its init. A handler completes its *Call once, with
// Respond, or with Await, whose promise another actor (the groups or topics manager, a
// group, a partition) resolves later. The partitions of a Produce, a ListOffsets and an
// OffsetForLeaderEpoch are asked of their partition actors directly, and a Fetch is served
// in the connection actor: that is the only data route (route.go).
//
// Responses leave in request order, as Kafka clients require: each request has a slot,
// and a response is written once every earlier one is (order.go). Back-pressure bounds
// what one client can pin: connection.max.inflight.requests requests read ahead, and
// connection.max.queued.response.bytes of responses built but not written (past it the
// connection holds the requests it reads, in order, until its writer drains); a Fetch
// also waits while the broker's queued.max.response.bytes are spent (hold.go).
//
// A connection closes in one place, with a reason from a closed set (close.go): the
// reason is the close's one log line and, for a client that broke the protocol, the
// label it is counted under. Bad input never reaches an actor's state: a frame that
// breaks the protocol (oversized, an unknown key or version, an undecodable body, a
// string longer than the protocol allows) closes the connection; a panic in a handler
// closes only its connection. A failed SASL authentication, and the broker's graceful
// stop (Drain), drain the connection instead: it stops reading, writes the answers it
// owes, then closes. messages.go lists every message the actor receives and who sends
// it; intercept.go is the chaos suite's hook at the frame boundary. See
// docs/architecture.md, "How a request travels".
package conn
