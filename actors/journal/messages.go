package journal

import (
	"fmt"

	"kaas/actors/actor"
)

// Every message the journal actor receives, sender → receiver. The code that handles them:
// journal.go (Receive, the lifecycle, Stat), write.go (the batch of Appends), segments.go
// (segment lifetime, Checkpointed, spareReady), unsaved.go (Unsaved, Claim, the retries).
//
// Requests, from the journal's users (for the offsets journal, the offsets actors) and
// from tests:
//
//	Append        a user → the journal: one record, or two of one key in one frame (Then);
//	              Reply: *Appended, after the fdatasync that holds it
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

// Append asks the journal to make one record of key durable. Reply: *Appended, once the
// fsync that holds it returns or the write fails. A sender's Appends are answered in the
// order it sent them; a sender that may need the answer while it stops makes Reply with
// actor.NewWaitable.
type Append struct {
	// Key is whose record it is (for the offsets journal, a group id): the record pins
	// its segment until a Checkpointed of the key covers it.
	Key string
	// Data is the record, not empty; the journal does not read it.
	Data []byte
	// Then, when not empty, is a second record of Key written right after Data in the
	// same frame: both are durable, or neither is (a failed write fails the frame).
	Then  []byte
	Reply actor.Promise
	// Answer, when set, is called on the journal's goroutine with the outcome before
	// Reply is resolved, and what it returns is called right after: a user that answers
	// its own clients from what it decided before the write (the offsets actor's
	// commits) does so one hop sooner, and its own mailbox already holds the outcome,
	// ahead of anything those clients send next. Answer may set Appended.Refused.
	// Neither may block, touch the user's state or send to the journal.
	Answer func(*Appended) func()
}

// answer resolves a's Reply with done, running a's Answer around it.
func (a *Append) answer(done *Appended) {
	if a.Answer == nil {
		a.Reply.Resolve(done)
		return
	}
	resolved := false
	defer func() {
		if !resolved { // Answer panicked: the user still learns the outcome
			a.Reply.Resolve(done)
		}
	}()
	then := a.Answer(done)
	resolved = true
	a.Reply.Resolve(done)
	if then != nil {
		then()
	}
}

// records is how many records a holds.
func (a *Append) records() int {
	if len(a.Then) > 0 {
		return 2
	}
	return 1
}

// Appended is the outcome of an Append: its sequence number once durable (ThenSeq:
// Then's, when it had one), or the error.
type Appended struct {
	Seq     uint64
	ThenSeq uint64
	Err     error
	// Refused: the Append's Answer did not acknowledge the durable record to its
	// clients (for the offsets journal, the group's gate had closed).
	Refused bool
}

// AnswerCrash answers an Append the journal panicked on before it queued it
// (actor.Request): a write that failed, since no segment holds it.
func (m *Append) AnswerCrash(c *actor.Crashed) {
	m.answer(&Appended{Err: fmt.Errorf("offsets journal panic: %s", c.Panic)})
}

// Checkpointed tells the journal that key's state is now saved elsewhere (for the offsets
// journal, the group file) with every record of key up to Seq, so segments holding only
// such records can go.
type Checkpointed struct {
	Key string
	Seq uint64
}

// Claim asks the journal, as a key's user starts (for the offsets journal, a group's
// offsets actor), for the state an earlier user of key could not save. Reply: *Claimed.
type Claim struct {
	Key   string
	Reply actor.Promise
}

// Claimed answers a Claim: Unsaved is nil unless the key's saved state is behind the
// journal. Hold lists the hold markers naming the key (Recovered.Held: a damaged segment
// may have held acknowledged records of it), which the user checks itself.
type Claimed struct {
	Unsaved *Unsaved
	Hold    []string
}

// Unsaved is a key's state that its user could not save as it stopped or restarted (a
// full disk, say): every change in it is in the journal, whose records of the key stay
// pinned. The journal keeps it until a Checkpointed of the key covers Seq, and hands it
// to the key's next user (Claim), which serves it instead of the older saved state. The
// journal does not read Data: it hands it on, and retries saving it with Config.Save.
// Not changed once sent.
type Unsaved struct {
	Key string
	// Seq is the key's last record that Data holds.
	Seq uint64
	// Data is the state, in its user's encoding (for the offsets journal, the group
	// file's content; nil when the group has no file).
	Data []byte
	// Encode, when set, makes Data instead (Data is then nil): the replay at start leaves
	// each group's state so, and the encoding is paid by whoever needs the bytes (the
	// group's actor as it claims them, a round of saves off the journal's Receive), not
	// by the start. It only reads what it captured, so it may run on any goroutine.
	Encode func() ([]byte, error)
	// Replayed: the replay at start left it to be written behind (Config.Recovered,
	// offsets.ReplayConfig.Behind), not a failed save. The journal writes it in rounds of
	// WriteBehindBatch keys, WriteBehindPause apart, instead of every UnsavedRetry.
	Replayed bool
}

// Stat asks the journal for its segments (tests and diagnostics). Reply: *Status.
type Stat struct{ Reply actor.Promise }

// Status lists the journal's segment files, oldest first, and the keys that still pin
// them (whose records there are not checkpointed yet).
type Status struct {
	Segments []string
	Pinned   map[string][]string // segment → keys
}

type journalFlush struct{}

// spareReady is a spare segment's preparation finishing.
type spareReady struct {
	path string
	err  error
}

type retryUnsaved struct{}

// unsavedRound is a retry round's outcome: errs[i] is the write of round[i].
type unsavedRound struct {
	round []*Unsaved
	errs  []error
}

// Bytes is u's state in its user's encoding: Data, or what Encode makes.
func (u *Unsaved) Bytes() ([]byte, error) {
	if u.Encode != nil {
		return u.Encode()
	}
	return u.Data, nil
}
