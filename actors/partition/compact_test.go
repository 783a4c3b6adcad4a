package partition

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// kv is one record of a keyed test batch; tomb makes it a tombstone (null value).
type kv struct {
	k, v string
	tomb bool
}

// keyedBatch is one uncompressed batch of keyed records (kmsg encodes it).
func keyedBatch(ts int64, recs ...kv) []byte {
	var raw []byte
	for i, x := range recs {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte(x.k)}
		if !x.tomb {
			r.Value = []byte(x.v)
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		raw = r.AppendTo(raw)
	}
	return encodeBatch(&header{LeaderEpoch: -1, LastOffsetDelta: int32(len(recs) - 1), MaxTimestamp: ts,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, 0, ts, int32(len(recs)), raw)
}

func appendKeyed(t *testing.T, l *segmentLog, ts int64, recs ...kv) {
	t.Helper()
	b := keyedBatch(ts, recs...)
	h, perr := validateProduced(b, 1<<20)
	if perr != nil {
		t.Fatal(perr.msg)
	}
	if _, err := l.append(b, &h, 0); err != nil {
		t.Fatal(err)
	}
	if l.rollDue(0) {
		if _, err := l.roll(l.EndOffset()); err != nil {
			t.Fatal(err)
		}
	}
}

// logRecord is one record as read back.
type logRecord struct {
	off  int64
	k, v string
	tomb bool
}

// readRecords reads every record of the log from its start, in offset order.
func readRecords(t *testing.T, l *segmentLog) []logRecord {
	t.Helper()
	var out []logRecord
	for off := l.StartOffset(); off < l.EndOffset(); {
		b, err := l.read(off, l.EndOffset(), 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Fatalf("nothing read at %d of %d", off, l.EndOffset())
		}
		for len(b) > 0 {
			h := parseHeader(b)
			if !checkStored(b[:h.Size()]) {
				t.Fatalf("bad batch served at %d", h.BaseOffset)
			}
			recs, err := batchRecords(&h, b[:h.Size()])
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				out = append(out, logRecord{off: h.BaseOffset + int64(r.OffsetDelta), k: string(r.Key), v: string(r.Value), tomb: r.Value == nil})
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	return out
}

// cleanNow runs one pass the way the partition actor does: planned, cleaned aside,
// swapped in, installed.
func cleanNow(t *testing.T, l *segmentLog, pol cleanPolicy, dirtyFrom, nowMS int64) *cleanJob {
	t.Helper()
	j := l.planClean(pol, dirtyFrom, nowMS, -1)
	if j == nil {
		t.Fatal("no pass planned")
	}
	if err := j.run(); err != nil {
		t.Fatal(err)
	}
	if err := j.swap(); err != nil {
		t.Fatal(err)
	}
	l.installCleaned(j)
	return j
}

// writeOverwrites writes 3 keys overwritten over several segments, one key deleted.
func writeOverwrites(t *testing.T, l *segmentLog) {
	for round := 0; round < 4; round++ {
		appendKeyed(t, l, 1000, kv{k: "a", v: fmt.Sprint("a", round)}, kv{k: "b", v: fmt.Sprint("b", round)})
		appendKeyed(t, l, 1000, kv{k: "c", v: fmt.Sprint("c", round)})
	}
	appendKeyed(t, l, 1000, kv{k: "b", tomb: true})
	appendKeyed(t, l, 1000, kv{k: "a", v: "a-last"})
	appendKeyed(t, l, 1000, kv{k: "d", v: "active"}) // leaves the cleanable range behind
}

func TestCompactKeepsNewestValuePerKey(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 200)
	writeOverwrites(t, l)
	if len(l.segs) < 4 {
		t.Fatalf("%d segments, want several", len(l.segs))
	}
	end := l.EndOffset()
	pol := cleanPolicy{minDirtyRatio: 0.5, deleteRetentionMS: 100, maxKeys: 1000}
	cleanNow(t, l, pol, 0, 5000)
	got := readRecords(t, l)
	var live []logRecord
	for _, r := range got {
		if r.k != "d" {
			live = append(live, r)
		}
	}
	want := []string{"c=c3", "b=<tombstone>", "a=a-last"}
	var have []string
	for i, r := range live {
		if i > 0 && r.off <= live[i-1].off {
			t.Fatalf("offsets do not increase: %v", got)
		}
		if r.tomb {
			have = append(have, r.k+"=<tombstone>")
		} else {
			have = append(have, r.k+"="+r.v)
		}
	}
	if !slices.Equal(have, want) {
		t.Fatalf("after cleaning: %v, want %v", have, want)
	}
	if l.EndOffset() != end || l.StartOffset() != 0 {
		t.Fatalf("log now [%d, %d), want [0, %d)", l.StartOffset(), l.EndOffset(), end)
	}
	// Reopened from disk: the same records (recovery takes the gaps).
	l.Close()
	l = openTestLog(t, dir, 200)
	if again := readRecords(t, l); !slices.Equal(again, got) {
		t.Fatalf("after reopen: %v, want %v", again, got)
	}
	// The tombstone stays until delete.retention.ms after the pass that kept it.
	cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5050)
	if !slices.ContainsFunc(readRecords(t, l), func(r logRecord) bool { return r.k == "b" }) {
		t.Fatal("tombstone removed before delete.retention.ms")
	}
	cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5101)
	if slices.ContainsFunc(readRecords(t, l), func(r logRecord) bool { return r.k == "b" }) {
		t.Fatal("tombstone kept past delete.retention.ms")
	}
	if l.EndOffset() != end || l.StartOffset() != 0 {
		t.Fatalf("log now [%d, %d), want [0, %d)", l.StartOffset(), l.EndOffset(), end)
	}
	l.Close()
}

func TestCompactKeyMapBound(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 200)
	writeOverwrites(t, l)
	j := cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 2}, 0, 5000)
	if j.upTo >= l.active().base || j.upTo <= 0 {
		t.Fatalf("map ended at %d, want inside the cleanable range [0, %d)", j.upTo, l.active().base)
	}
	// Each key's newest value is still there.
	newest := map[string]string{}
	for _, r := range readRecords(t, l) {
		newest[r.k] = r.v
	}
	if newest["a"] != "a-last" || newest["c"] != "c3" || newest["b"] != "" {
		t.Fatalf("newest values %v", newest)
	}
	l.Close()
}

// TestCompactRecoversLeftovers crashes a pass at each step: the log reopened holds
// either the old segments or the cleaned one, never a mix.
func TestCompactRecoversLeftovers(t *testing.T) {
	pol := cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}
	for _, step := range []string{"cleaned", "swap_olds_there", "swap_olds_gone"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			l := openTestLog(t, dir, 1<<20) // one group holds every cleanable segment
			writeOverwrites(t, l)
			before := readRecords(t, l)
			if _, err := l.roll(l.EndOffset()); err != nil {
				t.Fatal(err)
			}
			j := l.planClean(pol, 0, 5000, -1)
			if j == nil || j.run() != nil {
				t.Fatal("no pass")
			}
			g := j.groups[0]
			swap := filepath.Join(dir, segmentName(g.base())+swapSuffix)
			switch step {
			case "swap_olds_there":
				must(t, os.Rename(j.cleanedPath(g), swap))
			case "swap_olds_gone":
				must(t, os.Rename(j.cleanedPath(g), swap))
				for _, o := range g.olds {
					must(t, os.Remove(o.path))
				}
			}
			l.Close()
			l = openTestLog(t, dir, 1<<20)
			defer l.Close()
			after := readRecords(t, l)
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if filepath.Ext(e.Name()) == swapSuffix || filepath.Ext(e.Name()) == cleanedSuffix {
					t.Fatalf("%s left after recovery", e.Name())
				}
			}
			if step == "cleaned" {
				if !slices.Equal(after, before) {
					t.Fatalf("after an interrupted pass: %v, want the old segments %v", after, before)
				}
				return
			}
			if len(after) != 4 || after[len(after)-1].v != "active" || len(l.segs) != 2 {
				t.Fatalf("after a completed swap: %v in %d segments, want the cleaned segment", after, len(l.segs))
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCompactSegmentsPastTheReadWindow: segments larger than a walk's read window are
// cleaned batch for batch intact (a batch kept as it was is copied out of the window
// before the next is read).
func TestCompactSegmentsPastTheReadWindow(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, 1<<20)
	value := func(k string, round int) string { return strings.Repeat(fmt.Sprint(k, round, ";"), 17<<10) }
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for round := 0; round < 4; round++ {
		for _, k := range keys {
			appendKeyed(t, l, 1000, kv{k: k, v: value(k, round)})
		}
	}
	appendKeyed(t, l, 1000, kv{k: "z", v: "tail"})
	if _, err := l.roll(l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	cleanNow(t, l, cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5000)
	got := readRecords(t, l)
	if len(got) != len(keys)+1 {
		t.Fatalf("%d records after cleaning, want %d", len(got), len(keys)+1)
	}
	for i, k := range keys {
		if got[i].k != k || got[i].v != value(k, 3) {
			t.Fatalf("record %d: key %s, %d bytes, want %s's newest", i, got[i].k, len(got[i].v), k)
		}
	}
	l.Close()
	l = openTestLog(t, dir, 1<<20)
	defer l.Close()
	if again := readRecords(t, l); !slices.Equal(again, got) {
		t.Fatal("records differ after reopen")
	}
}

// TestCompactKeepsProducersLastBatch: a batch whose records are all superseded is kept,
// empty, when it holds its idempotent producer's last sequence (Apache's RETAIN_EMPTY),
// and dropped otherwise.
func TestCompactKeepsProducersLastBatch(t *testing.T) {
	l := openTestLog(t, t.TempDir(), 1<<20)
	defer l.Close()
	idem := func(pid int64, seq int32, recs ...kv) {
		b := keyedBatch(1000, recs...)
		h := parseHeader(b)
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, seq
		raw, err := batchRecords(&h, b)
		if err != nil {
			t.Fatal(err)
		}
		var recBytes []byte
		for i := range raw {
			recBytes = raw[i].AppendTo(recBytes)
		}
		b = encodeBatch(&h, 0, h.BaseTimestamp, int32(len(raw)), recBytes)
		h2, perr := validateProduced(b, 1<<20)
		if perr != nil {
			t.Fatal(perr.msg)
		}
		if _, err := l.append(b, &h2, 0); err != nil {
			t.Fatal(err)
		}
	}
	idem(7, 0, kv{k: "a", v: "1"}) // offset 0: producer 7's last batch
	idem(8, 0, kv{k: "a", v: "2"}) // offset 1: producer 8's first, not its last
	idem(8, 1, kv{k: "b", v: "x"}) // offset 2
	appendKeyed(t, l, 1000, kv{k: "a", v: "3"}, kv{k: "b", v: "y"})
	if _, err := l.roll(l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	j := l.planClean(cleanPolicy{minDirtyRatio: 0, deleteRetentionMS: 100, maxKeys: 1000}, 0, 5000, -1)
	j.lastOfProducer = map[int64]int64{7: 0, 8: 2}
	if err := j.run(); err != nil {
		t.Fatal(err)
	}
	if err := j.swap(); err != nil {
		t.Fatal(err)
	}
	l.installCleaned(j)
	var got []string
	b, err := l.read(0, l.EndOffset(), 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 {
		h := parseHeader(b)
		got = append(got, fmt.Sprintf("%d:pid=%d,seq=%d,n=%d", h.BaseOffset, h.ProducerID, h.BaseSequence, h.RecordCount))
		b = b[h.Size():]
	}
	if want := []string{"0:pid=7,seq=0,n=0", "2:pid=8,seq=1,n=0", "3:pid=-1,seq=-1,n=2"}; !slices.Equal(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
