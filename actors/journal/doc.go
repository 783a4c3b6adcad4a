// Package journal is the on-disk format of kaas's journals: append-only segments of
// checksummed frames, each frame one durable write holding a batch of records whose
// content the journal does not read (the offsets journal's records are a group's
// changes, encoded by actors/offsets). It writes frames (StartFrame, AppendRecord,
// FinishFrame) and reads segments back the way a crash leaves them (ScanSegment): a torn
// tail is told from damage in the middle.
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
// damage in the middle: every valid frame is read, and the damaged ranges are reported.
package journal
