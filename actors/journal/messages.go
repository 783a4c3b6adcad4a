package journal

// Every message the journal actor receives, sender → receiver. The types are defined in
// journal.go, beside the code that handles them.
//
// Requests, from the journal's users (for the offsets journal, the offsets actors) and
// from tests:
//
//	Append        a user → the journal; Reply: *Appended, after the fdatasync that holds it
//	Checkpointed  a user → the journal: key saved elsewhere up to Seq; no reply
//	Unsaved       a user that stops or restarts → the journal: state it could not save;
//	              no reply
//	Claim         a user that starts → the journal; Reply: *Claimed
//	Stat          tests and diagnostics → the journal; Reply: *Status
//
// Its own messages:
//
//	journalFlush  the journal → itself, after the first Append of a batch: write the
//	              batch once the Appends already in the mailbox have joined it
//	spareReady    the zero-fill of the next segment (actor.Background) → the journal
//	retryUnsaved  the journal's timer (actor.After) → itself: retry saving what users
//	              left unsaved
//	unsavedRound  a retry round's writes (actor.Background) → the journal: their outcome
//
// And the actor system's *actor.Started and *actor.Stopping.
