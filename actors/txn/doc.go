// Package txn is kaas's transaction coordinator: a transactions manager (manager.go) and
// under it one actor per transactional id (txn.go), whose state (state.go) is made
// durable through a journal of its own (actors/journal, under <data.dir>/transactions)
// before any answer or side effect, saved per id off the actor's turn (store.go), and
// replayed at start before anything is served. The state machine itself (logic.go) is
// plain functions after Apache's TransactionCoordinator; markers and pending offsets are
// ended through the Config's Sides (sides.go).
package txn
