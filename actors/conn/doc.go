// Package conn is the Kafka wire: one actor per TCP connection, and a handler per API.
//
// A connection has a reader goroutine, which reads size-prefixed frames (growing its
// buffer as bytes arrive, within the broker-wide queued.max.request.bytes and a deadline
// for each frame) and hands them to the connection actor, and a writer goroutine, which
// writes finished responses. The actor decodes each request with kmsg, checks the API
// and version against the table (ApiVersions advertises exactly what is registered),
// and calls the API's handler: NN_name.go, NN being the API key, registered from its
// init. A handler completes its *Call once, with Respond, or with Await, whose promise
// another actor (the groups or topics manager, a group, a partition) resolves later.
//
// Responses leave in request order, as Kafka clients require: each request has a slot,
// and a response is written once every earlier one is. Back-pressure bounds what one
// client can pin: connection.max.inflight.requests requests read ahead, and
// connection.max.queued.response.bytes of responses built but not written (past it the
// connection holds the requests it reads, in order, until its writer drains).
//
// Bad input never reaches an actor's state: a frame that breaks the protocol (oversized,
// an unknown key or version, an undecodable body, a string longer than the protocol
// allows) closes the connection with one log line; a panic in a handler closes only its
// connection. See docs/architecture.md, "How a request travels".
package conn
