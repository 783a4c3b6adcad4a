package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

const (
	// SegmentSuffix ends a segment file's name.
	SegmentSuffix = ".log"
	// FrameHeader is the length word and the checksum before a frame's payload.
	FrameHeader = 8
	// SeqFlag, set in a frame's length word, says that the payload starts with the
	// sequence number of the frame's first record (uint64, covered by the checksum).
	// Every frame is written so; frames without it (written before) are read in order,
	// their sequence numbers counted from the segment's name. The number is what tells
	// rot in the middle of a segment from a torn tail: after a bad frame, a valid frame
	// with a later sequence number proves that the bad one was not the last write.
	SeqFlag = 1 << 31
	// seqBytes is the sequence number at the start of a flagged frame's payload.
	seqBytes = 8
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Checksum is a frame's checksum of its payload p (CRC-32C).
func Checksum(p []byte) uint32 { return crc32.Checksum(p, crcTable) }

// SegmentName is the file name of the segment whose first record is first.
func SegmentName(first uint64) string {
	return fmt.Sprintf("%020d%s", first, SegmentSuffix)
}

// ParseSegmentName is the first sequence number of a segment file name.
func ParseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, SegmentSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil && n > 0
}

// StartFrame begins a frame in buf (its content dropped): room for the header and the
// sequence number, which FinishFrame fills.
func StartFrame(buf []byte) []byte {
	return append(buf[:0], make([]byte, FrameHeader+seqBytes)...)
}

// AppendRecord adds a record (not empty) to the frame being built.
func AppendRecord(frame, rec []byte) []byte {
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(rec)))
	return append(frame, rec...)
}

// FinishFrame completes a frame whose first record has sequence number first: the
// sequence number, the length word and the checksum.
func FinishFrame(frame []byte, first uint64) {
	binary.BigEndian.PutUint64(frame[FrameHeader:], first)
	binary.BigEndian.PutUint32(frame[0:4], uint32(len(frame)-FrameHeader)|SeqFlag)
	binary.BigEndian.PutUint32(frame[4:8], Checksum(frame[FrameHeader:]))
}

// ReadFrames returns the records of a segment's frames up to the first bad one, in
// order, and where that is (len(b) when the segment is whole).
func ReadFrames(b []byte) (records [][]byte, end int) {
	expect := uint64(1)
	for end < len(b) {
		seq, recs, n, ok := parseFrame(b[end:], expect, false, 0)
		if !ok {
			return records, end
		}
		records = append(records, recs...)
		expect = seq + uint64(len(recs))
		end += n
	}
	return records, end
}

// parseFrame reads the frame at the start of b: the sequence number of its first record
// (expect for a frame without one), its records and its length. A frame is valid when its
// length fits, its checksum matches, its records fill it exactly and its sequence number
// is not before expect. flagged accepts only frames that carry their sequence number, at
// most maxSeq (a scan past a bad frame, where the count of records in between is unknown
// but no more than the bytes in between: the bound rejects almost every position of
// garbage before its checksum is computed).
func parseFrame(b []byte, expect uint64, flagged bool, maxSeq uint64) (seq uint64, recs [][]byte, size int, ok bool) {
	if len(b) < FrameHeader {
		return 0, nil, 0, false
	}
	word := binary.BigEndian.Uint32(b[0:4])
	hasSeq := word&SeqFlag != 0
	n := int(word &^ SeqFlag)
	if flagged && !hasSeq {
		return 0, nil, 0, false
	}
	if n == 0 || n > len(b)-FrameHeader || (hasSeq && n <= seqBytes) {
		// No frame is empty: zeros are the unused end of a preallocated segment.
		return 0, nil, 0, false
	}
	p := b[FrameHeader : FrameHeader+n]
	seq = expect
	if hasSeq {
		seq = binary.BigEndian.Uint64(p)
		if seq < expect || (flagged && seq > maxSeq) {
			return 0, nil, 0, false
		}
	}
	if Checksum(p) != binary.BigEndian.Uint32(b[4:8]) {
		return 0, nil, 0, false
	}
	if hasSeq {
		p = p[seqBytes:]
	}
	recs, ok = splitRecords(p)
	if !ok {
		return 0, nil, 0, false
	}
	return seq, recs, FrameHeader + n, true
}

// Record is one record of a segment and its sequence number.
type Record struct {
	Data []byte
	Seq  uint64
}

// Damaged is a part of a segment that holds no valid frame and is followed by a valid
// one with a later sequence number: not a torn write (that can only be the last frame)
// but damage to bytes that were once a durable write. Records from Lost up to the next
// valid frame's are gone, each of them acknowledged to a client.
type Damaged struct {
	From, To   int    // bytes [From, To) of the segment
	Lost, UpTo uint64 // the records [Lost, UpTo) are in it
}

// Scanned is a segment as read by ScanSegment.
type Scanned struct {
	Records []Record
	Next    uint64 // the sequence number after the last valid record
	Tail    int    // where a torn tail starts (bytes neither zero nor followed by a valid frame); -1 when none
	Damaged []Damaged
}

// ScanSegment reads every valid frame of a segment whose first record is first. At a bad
// frame it looks further for a valid frame with a later sequence number: one found means
// the bytes in between are damaged (the frames after them are read on); none found, the
// bad frame is the tail of the last write, cut short by a crash or failed, and the
// segment ends there. A bad frame followed by zeros alone is such a tail too, also when a
// bit flipped in what was the last frame: that cannot be told from a torn write.
func ScanSegment(b []byte, first uint64) Scanned {
	sc := Scanned{Next: first, Tail: -1}
	for pos := 0; pos < len(b); {
		seq, recs, n, ok := parseFrame(b[pos:], sc.Next, false, 0)
		if ok {
			for i, r := range recs {
				sc.Records = append(sc.Records, Record{Data: r, Seq: seq + uint64(i)})
			}
			sc.Next = seq + uint64(len(recs))
			pos += n
			continue
		}
		if AllZero(b[pos:]) {
			break
		}
		q, qseq := findFrame(b, pos, sc.Next)
		if q < 0 {
			sc.Tail = pos
			break
		}
		sc.Damaged = append(sc.Damaged, Damaged{From: pos, To: q, Lost: sc.Next, UpTo: qseq})
		sc.Next = qseq
		pos = q
	}
	return sc
}

// findFrame is the first position after bad, where a frame failed, at which a frame with
// its sequence number is valid, and that number; -1 when there is none. The number is not
// before expect, and at most expect plus the bytes from bad: every record lost in between
// took more than a byte.
func findFrame(b []byte, bad int, expect uint64) (int, uint64) {
	for q := bad + 1; q+FrameHeader <= len(b); q++ {
		if b[q]&0x80 == 0 {
			// Not a flagged length word: zeros and JSON text are passed over at once.
			continue
		}
		if seq, _, _, ok := parseFrame(b[q:], expect, true, expect+uint64(q-bad)); ok {
			return q, seq
		}
	}
	return -1, 0
}

// splitRecords splits a frame's payload into its records.
func splitRecords(p []byte) ([][]byte, bool) {
	var recs [][]byte
	for len(p) > 0 {
		if len(p) < 4 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint32(p))
		if n == 0 || n > len(p)-4 {
			return nil, false
		}
		recs = append(recs, p[4:4+n])
		p = p[4+n:]
	}
	return recs, len(recs) > 0
}

// AllZero reports whether b is the unused, zero-filled end of a preallocated segment.
func AllZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
