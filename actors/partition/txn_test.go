package partition

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The marker is Apache's EndTxnMarker control batch: kmsg, which follows Apache's
// schemas, reads it back, and so does parseMarker.
func TestMarkerBatchEncoding(t *testing.T) {
	for _, commit := range []bool{false, true} {
		b := markerBatch(77, 3, commit, 9, 1234)
		if !checkStored(b) {
			t.Fatal("marker batch fails its CRC or length")
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		if rb.Attributes != 0x30 || rb.ProducerID != 77 || rb.ProducerEpoch != 3 || rb.NumRecords != 1 || rb.LastOffsetDelta != 0 ||
			rb.FirstSequence != -1 || rb.FirstTimestamp != 1234 {
			t.Fatalf("batch header %+v", rb)
		}
		var r kmsg.Record
		if err := r.ReadFrom(rb.Records); err != nil {
			t.Fatal(err)
		}
		var key kmsg.ControlRecordKey
		if err := key.ReadFrom(r.Key); err != nil {
			t.Fatal(err)
		}
		var val kmsg.EndTxnMarker
		if err := val.ReadFrom(r.Value); err != nil {
			t.Fatal(err)
		}
		wantType := kmsg.ControlRecordKeyTypeAbort
		if commit {
			wantType = kmsg.ControlRecordKeyTypeCommit
		}
		if key.Version != 0 || key.Type != wantType || val.Version != 0 || val.CoordinatorEpoch != 9 {
			t.Fatalf("key %+v value %+v", key, val)
		}
		gotCommit, coord, ok := parseMarker(b)
		if !ok || gotCommit != commit || coord != 9 {
			t.Fatalf("parseMarker: %v %d %v", gotCommit, coord, ok)
		}
	}
	if _, _, ok := parseMarker(keyedBatch(1, kv{k: "a", v: "b"})); ok {
		t.Fatal("a data batch read as a marker")
	}
}

// The cleaner never cleans at or past the first unstable offset: a segment is
// cleanable only when it ends at or before it.
func TestCompactStopsAtFirstUnstableOffset(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 200)
	writeOverwrites(t, l)
	if len(l.segs) < 4 {
		t.Fatalf("%d segments, want several", len(l.segs))
	}
	pol := cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}
	all := l.planClean(pol, 0, 5000, -1)
	if all == nil || len(all.segs) != len(l.segs)-1 {
		t.Fatalf("without a transaction every segment but the active one is cleanable")
	}
	fuo := l.segs[2].base + 1 // inside the third segment
	j := l.planClean(pol, 0, 5000, fuo)
	if j == nil || len(j.segs) != 2 {
		t.Fatalf("cleanable segments with a transaction open at %d: %v", fuo, j)
	}
	for _, s := range j.segs {
		if s.next > fuo {
			t.Fatalf("segment [%d, %d) reaches past the first unstable offset %d", s.base, s.next, fuo)
		}
	}
	if j := l.planClean(pol, 0, 5000, l.segs[0].base); j != nil {
		t.Fatalf("a transaction open at the log start leaves nothing cleanable, got %d segments", len(j.segs))
	}
}
