package conn

import (
	"crypto/tls"
	"time"
)

// This file is the connection actor's whole protocol: every message it receives, and who
// sends it. Drain is the only one from outside the package; the rest come from the
// actor's own reader and writer goroutines, its own timers, and the broker's response
// budget. Messages are pointers and are never changed once sent.
//
// Besides these it receives the actor system's *actor.Started and *actor.Stopping, an
// *actor.Settled for each promise it awaits (a handler's Await, answered by the groups or
// topics manager; a partition's answer to a gather, route.go; a partition's answer to a
// read of a Fetch it serves), an *actor.Terminated for each partition actor it watches,
// and the partition package's fetch messages (partition.IsFetchMessage), which it hands
// to the Fetches it serves (partition.FetchRun): a partition's note that data arrived
// for a watch a FetchRun left, and the run's own max-wait and abandon timers, armed in
// this actor's context (self-messages).
//
// Sender → receiver, in short: Drain (the server) → the connection; frame, readerDone,
// tlsReady (its reader goroutine), writerDone (its writer goroutine), resume (its writer
// goroutine, or the response budget's OnFree) → the connection; authFailedClose and
// gatherExpired (its own timers, actor.After) → the connection itself.

// Drain asks the connection to stop reading, answer what it has read, then close.
// The server sends it on a graceful stop.
type Drain struct{}

// From the reader goroutine (socket.go, and handshakeTLS in sasl.go).
type (
	// frame is one request frame read from the socket (the size prefix stripped).
	frame struct {
		b    []byte
		read time.Time
	}
	// readerDone says the reader goroutine ended; err is why (io.EOF for a clean close).
	readerDone struct{ err error }
	// tlsReady tells the actor the TLS handshake is done, before any frame.
	tlsReady struct{ state tls.ConnectionState }
)

// From the writer goroutine (socket.go).
type (
	// writerDone says a socket write failed.
	writerDone struct{ err error }
)

// resume asks the connection to look at its held frames again: the writer drained (sent
// by the writer goroutine when the actor asked for a wake-up), or the broker's response
// budget has room (sent by the Budget's OnFree callback, from whichever connection
// released the bytes).
type resume struct{}

// From the actor itself, through its timers.
type (
	// authFailedClose closes a connection FailedAuthDelay after it failed authentication
	// (failAuth, sasl.go; sent at once when there is no delay).
	authFailedClose struct{}
	// gatherExpired: a gather's timeout passed (start, route.go).
	gatherExpired struct{ g *partGather }
)
