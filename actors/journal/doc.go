// Package journal is kaas's append-only journal: the actor that makes its users' records
// durable (journal.go; write.go: the batched write; segments.go: segment lifetime;
// unsaved.go: the Unsaved hand-over) and the on-disk format of its segments (frame.go);
// messages.go lists what it receives. Its first user is the offsets journal, one per
// broker, shared by every group the broker coordinates (actors/offsets).
//
// Records are opaque: each is a key (for the offsets journal, a group id) and bytes the
// journal does not read. Decoding them, at replay or anywhere else, is the user's work; the
// journal only knows which key each record belongs to.
//
// Why one journal: a group file rewrite (tmp, fsync, rename, directory fsync) costs two
// commits of the filesystem's own journal, and the filesystem does about 1,600 of those a
// second however many groups write at once; an append to one file costs one fsync, and one
// fsync makes a whole batch durable. So a user makes its change durable by appending it
// here, answers its waiters when the fsync that holds it returns, and saves its state
// later, off its Receive.
//
// What the journal actor guarantees:
//
//   - Durability before the answer. It writes every Append in its mailbox with one write
//     and one fdatasync, in one frame, and answers each sender (Appended: its sequence
//     number, or the error) only once that fdatasync has returned. A failed write answers
//     the error to every record of the batch (one frame: a write cut short leaves none
//     of them readable, so a failed batch is never replayed in part), and the journal
//     goes on in a new segment. An Append may carry a second record of its key (Then),
//     written right after the first in the same frame: the two are durable together. A panic in its Receive fails the batch being
//     written instead of restarting the journal, which would lose its sequence numbers
//     and which keys pin which segment.
//   - Segment lifetime. Segments are named after the sequence number of their first record
//     and zero-filled ahead of use, on a goroutine of their own, so that an append changes
//     no file's size and its fdatasync needs no commit of the filesystem's journal. A
//     segment is deleted (a damaged one moved to QuarantineDir) once nothing pins it, and
//     always the oldest first: what is left is every record since some point, which is
//     what makes a replay right.
//   - Pinning by key. Each record pins its segment for its key until a Checkpointed of the
//     key covers its sequence number: the user tells the journal so once the key's state,
//     with that record in it, is saved elsewhere (for the offsets journal, the group file).
//   - The Unsaved hand-over. A user that cannot save its state as it stops (a full disk)
//     sends it to the journal as an Unsaved; the key's records stay pinned. The journal
//     hands it to the key's next user, which asks with a Claim before it serves anything,
//     and meanwhile retries saving it itself (Config.Save) every UnsavedRetry, so that a
//     key nobody claims does not keep every later segment on disk until the broker
//     restarts. A Claim also carries the hold markers of the key (Recovered.Held).
//
// At start the user replays what is left in the journal's directory before anything is
// served (for the offsets journal, offsets.Replay) and gives the journal what the replay
// could not finish (Recovered: the segments kept, the unsaved states, the held keys, the
// next sequence number).
//
// A segment file is named after the sequence number of its first record
// (00000000000000000001.log). A frame:
//
//	length uint32 (top bit set: SeqFlag) | crc32c(payload) uint32 | payload (length bytes)
//	payload: first record's sequence number uint64 | { record length uint32 | record } ...
//
// big-endian. Segments are zero-filled ahead of use. A frame that is empty, short or
// fails its checksum ends what is read of a segment when nothing valid follows it: the
// unused, zeroed end of the segment, the tail of a write a crash cut short, or of a write
// that failed (the writer then goes on in a new segment, so nothing valid follows a bad
// frame it wrote). A valid frame with a later sequence number after a bad one means
// damage in the middle: every valid frame is read, and the damaged ranges are reported
// (ScanSegment).
package journal
