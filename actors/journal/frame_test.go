package journal

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

// frame is a frame as the journal writes it, its first record numbered seq.
func frame(seq uint64, recs ...[]byte) []byte {
	f := StartFrame(nil)
	for _, r := range recs {
		f = AppendRecord(f, r)
	}
	FinishFrame(f, seq)
	return f
}

// oldFrame is a frame without its sequence number, as written before SeqFlag.
func oldFrame(recs ...[]byte) []byte {
	var body []byte
	for _, r := range recs {
		body = binary.BigEndian.AppendUint32(body, uint32(len(r)))
		body = append(body, r...)
	}
	h := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	h = binary.BigEndian.AppendUint32(h, Checksum(body))
	return append(h, body...)
}

var rec = []byte(`{"group":"g","ops":[{"set":[{"topic":"t","partition":0,"offset":1,"leader_epoch":-1,"metadata":"","commit_time":0,"expire_time":0}]}]}`)

// A segment of frames reads back record for record with their sequence numbers; a tail
// cut short is a tail, garbage between two valid frames is damage, zeros are the unused
// end.
func TestScanSegment(t *testing.T) {
	a, b := []byte("a"), []byte("bb")
	whole := slices.Concat(frame(5, a, b), frame(7, a), make([]byte, 32))
	sc := ScanSegment(whole, 5)
	if sc.Tail != -1 || len(sc.Damaged) != 0 || sc.Next != 8 || len(sc.Records) != 3 ||
		sc.Records[2].Seq != 7 || !bytes.Equal(sc.Records[1].Data, b) {
		t.Fatalf("whole segment: %+v", sc)
	}
	torn := slices.Concat(frame(1, a), frame(2, rec)[:20])
	if sc := ScanSegment(torn, 1); sc.Tail != len(frame(1, a)) || len(sc.Damaged) != 0 || len(sc.Records) != 1 {
		t.Fatalf("torn tail: %+v", sc)
	}
	bad := frame(2, rec, rec)
	bad[FrameHeader+seqBytes+10] ^= 1
	mid := slices.Concat(frame(1, a), bad, frame(4, b))
	sc = ScanSegment(mid, 1)
	if sc.Tail != -1 || len(sc.Damaged) != 1 || len(sc.Records) != 2 || sc.Records[1].Seq != 4 {
		t.Fatalf("damage in the middle: %+v", sc)
	}
	if d := sc.Damaged[0]; d.From != len(frame(1, a)) || d.To != d.From+len(bad) || d.Lost != 2 || d.UpTo != 4 {
		t.Fatalf("damaged range %+v", d)
	}
	legacy := slices.Concat(oldFrame(a), oldFrame(b, a), frame(4, b))
	if sc := ScanSegment(legacy, 1); len(sc.Records) != 4 || sc.Records[3].Seq != 4 || sc.Tail != -1 {
		t.Fatalf("frames without their sequence number: %+v", sc)
	}
	if recs, end := ReadFrames(mid); len(recs) != 1 || end != len(frame(1, a)) {
		t.Fatalf("ReadFrames stops at the first bad frame: %d records, end %d", len(recs), end)
	}
}

func TestSegmentName(t *testing.T) {
	if n := SegmentName(42); n != "00000000000000000042.log" {
		t.Fatal(n)
	}
	for _, c := range []struct {
		name string
		seq  uint64
		ok   bool
	}{{"00000000000000000042.log", 42, true}, {"00000000000000000000.log", 0, false}, {"42.log", 0, false}, {"0000000000000000004x.log", 0, false}, {"00000000000000000042.tmp", 0, false}} {
		if seq, ok := ParseSegmentName(c.name); seq != c.seq || ok != c.ok {
			t.Errorf("ParseSegmentName(%q) = %d, %v", c.name, seq, ok)
		}
	}
}

// FuzzScanSegment: any bytes (what a crash or a bad disk leaves) scan without a panic,
// and what is read is in order: each record's sequence number after the one before, the
// damaged ranges inside the segment, and ReadFrames reads the same records up to the
// first bad frame.
func FuzzScanSegment(f *testing.F) {
	f.Add(slices.Concat(frame(1, rec), frame(2, rec, rec), frame(4, rec)))
	f.Add(slices.Concat(frame(1, rec), []byte{0x80, 0, 0, 9, 1, 2, 3}, frame(3, rec), make([]byte, 64)))
	f.Add(slices.Concat(oldFrame(rec, rec), frame(3, rec)))
	f.Add(frame(1, rec)[:13])
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := ScanSegment(b, 1)
		last := uint64(0)
		for _, r := range sc.Records {
			if r.Seq <= last && last != 0 || len(r.Data) == 0 {
				t.Fatalf("record seq %d after %d (%d bytes)", r.Seq, last, len(r.Data))
			}
			last = r.Seq
		}
		if sc.Next < last+1 && len(sc.Records) > 0 {
			t.Fatalf("next %d, last record %d", sc.Next, last)
		}
		for _, d := range sc.Damaged {
			if d.From >= d.To || d.To > len(b) || d.UpTo < d.Lost {
				t.Fatalf("damaged range %+v in %d bytes", d, len(b))
			}
		}
		recs, end := ReadFrames(b)
		if end > len(b) || len(recs) > len(sc.Records) {
			t.Fatalf("ReadFrames: %d records to %d; ScanSegment %d", len(recs), end, len(sc.Records))
		}
		for i, r := range recs {
			if !bytes.Equal(r, sc.Records[i].Data) {
				t.Fatalf("record %d differs between ReadFrames and ScanSegment", i)
			}
		}
	})
}
