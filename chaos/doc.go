// Package chaos is the broker's fault-injection suite: an Injector that one seed drives
// through the hooks of the actor layer (a panic or a delay in an actor's Receive, a timer
// late or twice), of storage.OSFS (a failed or slow write, fsync or rename of any file,
// or read of a partition segment) and of the connection's frame boundary (a reset
// mid-request or mid-response, a retriable error answered for a request), a Recorder of
// what clients were told, and the checks of five invariants a Kafka user relies on, run
// after every chaos run (run_test.go). Nothing in it is linked into the broker:
// production builds carry only the hooks' nil checks.
package chaos
