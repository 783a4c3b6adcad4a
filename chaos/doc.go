// Package chaos is the broker's fault-injection suite: an Injector that one seed drives
// through the hooks of the actor layer (a panic or a delay in an actor's Receive, the
// transaction coordinator's id actors and journal included; a timer late or twice, its
// transaction deadlines and marker retries included), of storage.OSFS (a failed or slow
// write, fsync or rename of any file, the coordinator's journal and id files and a
// segment's aborted-transaction index included, or read of a partition segment) and of
// the connection's frame boundary (a reset mid-request or mid-response, a retriable
// error answered for a request), a Recorder of what clients were told, and the checks of
// six invariants a Kafka user relies on, run after every chaos run (run_test.go; the
// sixth, transactions', in txn_test.go). Nothing in it is linked into the broker:
// production builds carry only the hooks' nil checks.
package chaos
