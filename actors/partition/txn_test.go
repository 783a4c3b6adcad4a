package partition

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/actors/actor"
	"kaas/storage"
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

// The LSO moves past a transaction only once its marker is durable (KAFKA-5121): while
// the marker's fsync is held, a read_committed read still stops at the transaction's
// first offset, and the marker is not answered.
func TestTxnLSOWaitsForTheMarkersFsync(t *testing.T) {
	dir := t.TempDir()
	fsys := storage.NewFaultFS(nil)
	hold := newFirstHold()
	fsys.SetBefore(func(op storage.Op, path string) error {
		if op == storage.OpSync && strings.HasSuffix(path, ".log") {
			hold.at()
		}
		return nil
	})
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(PartitionProps(PartitionConfig{Dir: dir, Topic: "t", SegmentBytes: 1 << 20, FlushMessages: 1,
		Log: zerolog.Nop(), FS: fsys}))
	wait := func(w *actor.Waiter) any {
		t.Helper()
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatal("not answered")
		}
		return v
	}
	lso := func() int64 {
		t.Helper()
		w := sys.NewWaiter()
		sys.Send(pid, &readLog{committed: true, offset: 0, maxBytes: 1 << 20, minOne: true, currentEpoch: -1, reply: w.Promise})
		switch v := wait(w).(type) {
		case *Fetched:
			return v.LastStableOffset
		case *readPlan:
			defer dropRead(v)
			return v.out.LastStableOffset
		default:
			t.Fatalf("read answered %T", v)
			return 0
		}
	}
	raw := testBatch(5, 0, 0, 1, 0, []byte("t"))
	binary.BigEndian.PutUint16(raw[offAttributes:], attrTransactional)
	binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], crc32c))
	b, perr := validateBatch(raw, 1<<20)
	if perr != nil {
		t.Fatal(perr.msg)
	}
	w := sys.NewWaiter()
	sys.Send(pid, VerifiedAppendMessage(b, 0, false, w.Promise))
	if r := wait(w).(*Produced); r.ErrorCode != 0 {
		t.Fatalf("transactional append: %+v", r)
	}
	if got := lso(); got != 0 {
		t.Fatalf("open transaction: lso %d, want 0", got)
	}
	hold.arm()
	mw := sys.NewWaiter()
	sys.Send(pid, markerMessage(&WriteTxnMarker{Topic: "t", ProducerID: 5, ProducerEpoch: 0, Commit: true, CoordinatorEpoch: 1, Reply: mw.Promise}, 0))
	<-hold.held
	if got := lso(); got != 0 {
		t.Fatalf("marker written, not yet durable: lso %d, want 0", got)
	}
	select {
	case <-mw.C:
		t.Fatal("the marker was answered before its fsync")
	default:
	}
	close(hold.release)
	if r := wait(mw).(*TxnMarkerWritten); r.ErrorCode != 0 {
		t.Fatalf("marker: %+v", r)
	}
	if got := lso(); got != 2 {
		t.Fatalf("marker durable: lso %d, want 2", got)
	}
}

// Compaction follows Apache's rules for transactions: an aborted transaction's records
// are dropped and never replace an older value; a committed transaction's records are
// cleaned as any (they shadow older values and are shadowed by newer ones); markers are
// kept, and the abort entries of the segments it replaces go to the new segment and its
// .txnindex file.
func TestCompactTransactions(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 200)
	txnWrite := func(pid int64, commit bool, recs ...kv) (first, marker int64) {
		t.Helper()
		raw := keyedBatch(1000, recs...)
		binary.BigEndian.PutUint64(raw[offProducerID:], uint64(pid))
		binary.BigEndian.PutUint16(raw[offProducerEpoch:], 0)
		binary.BigEndian.PutUint32(raw[offBaseSequence:], 0)
		binary.BigEndian.PutUint16(raw[offAttributes:], attrTransactional)
		binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], crc32c))
		h := parseHeader(raw)
		first, err := l.append(raw, &h, 0)
		if err != nil {
			t.Fatal(err)
		}
		mk := markerBatch(pid, 0, commit, 1, 1000)
		mh := parseHeader(mk)
		marker, err = l.append(mk, &mh, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !commit {
			s := l.active()
			s.aborted = append(s.aborted, abortedTxn{producerID: pid, first: first, last: marker, lso: marker + 1})
			if err := l.writeAborted(s); err != nil {
				t.Fatal(err)
			}
		}
		return first, marker
	}
	appendKeyed(t, l, 1000, kv{k: "z", v: "committed"}, kv{k: "w", v: "plain"})
	first, last := txnWrite(9, false, kv{k: "z", v: "aborted"}, kv{k: "gone", v: "aborted"})
	txnWrite(10, true, kv{k: "y", v: "txn-old"})
	appendKeyed(t, l, 1000, kv{k: "y", v: "newer"})
	txnWrite(11, true, kv{k: "w", v: "txn-newest"})
	writeOverwrites(t, l)
	cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5000)
	kept := map[string][]string{}
	for _, r := range readRecords(t, l) {
		kept[r.k] = append(kept[r.k], r.v)
	}
	for k, want := range map[string][]string{"z": {"committed"}, "y": {"newer"}, "w": {"txn-newest"}, "gone": nil} {
		if !slices.Equal(kept[k], want) {
			t.Errorf("records of key %s kept: %v, want %v", k, kept[k], want)
		}
	}
	markers := 0
	for off := l.StartOffset(); off < l.EndOffset(); {
		b, err := l.read(off, l.EndOffset(), 1<<20, true)
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d: %v", off, err)
		}
		for len(b) > 0 {
			h := parseHeader(b)
			if h.Attributes&attrControl != 0 {
				markers++
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	if markers != 3 {
		t.Fatalf("%d markers after compaction, want the 3 written", markers)
	}
	got := l.abortedIn(0, l.EndOffset())
	if len(got) != 1 || got[0] != (AbortedTxn{ProducerID: 9, FirstOffset: first}) {
		t.Fatalf("aborted after compaction: %+v", got)
	}
	var holder *segment
	for _, s := range l.segs {
		if len(s.aborted) > 0 {
			holder = s
		}
	}
	raw, err := os.ReadFile(txnIndexPath(holder.path))
	if err != nil || len(raw) != txnIndexEntrySize || int64(binary.BigEndian.Uint64(raw[18:])) != last {
		t.Fatalf("the new segment's .txnindex: %d bytes, %v", len(raw), err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.txnindex"))
	if len(names) != 1 {
		t.Fatalf(".txnindex files after compaction: %v", names)
	}
	// Recovered by a partition actor, the log has no transaction left open: each
	// marker whose records went closes nothing.
	end := l.EndOffset()
	l.Close()
	solo := startSolo(t, PartitionConfig{Dir: dir})
	defer solo.stop()
	if lso, _ := solo.committed(); lso != end {
		t.Fatalf("LSO after recovery %d, want the log end %d", lso, end)
	}
}

// transactional makes a test batch transactional.
func transactional(raw []byte) []byte {
	binary.BigEndian.PutUint16(raw[offAttributes:], attrTransactional)
	binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], crc32c))
	return raw
}

// The LSO is never below the log start: DeleteRecords may take an open transaction's
// first batches (Apache's updateFirstUnstableOffset).
func TestTxnLSONotBelowLogStart(t *testing.T) {
	h := newHarness(t, t.TempDir(), nil)
	defer h.stop()
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("a"))); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	b, perr := validateBatch(transactional(testBatch(8, 0, 0, 1, 0, []byte("t"))), 1<<20)
	if perr != nil {
		t.Fatal(perr.msg)
	}
	r := h.ask("t", 0, DefaultRequestTimeout, func(p actor.Promise) any { return VerifiedAppendMessage(b, 0, false, p) },
		func(code int16) any { return &Produced{ErrorCode: code} }).(*Produced)
	if r.ErrorCode != 0 || r.BaseOffset != 1 {
		t.Fatalf("transactional append: %+v", r)
	}
	if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("b"))); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	if r := h.produce("t", 0, transactional(testBatch(8, 0, 1, 1, 0, []byte("t2")))); r.ErrorCode != 0 || r.BaseOffset != 3 {
		t.Fatalf("the transaction's second batch: %+v", r)
	}
	committed := func(offset int64) *Fetched {
		f := oneFetch("t", 0, offset, 0, 0, -1)
		f.ReadCommitted = true
		return h.fetchRequest(f).Topics[0].Partitions[0]
	}
	if got := committed(0); got.LastStableOffset != 1 || got.HighWatermark != 4 {
		t.Fatalf("open transaction at 1: lso %d hw %d", got.LastStableOffset, got.HighWatermark)
	}
	if d := h.deleteRecords(2); d.ErrorCode != 0 {
		t.Fatalf("delete records: %+v", d)
	}
	if got := committed(2); got.ErrorCode != 0 || got.LastStableOffset != 2 {
		t.Fatalf("after DeleteRecords to 2: lso %d (error %d), want the log start 2", got.LastStableOffset, got.ErrorCode)
	}
}
