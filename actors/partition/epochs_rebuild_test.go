package partition

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"kaas/storage"
)

// eventLog collects a logger's JSON lines so a test can look for an event.
type eventLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *eventLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// events are the fields of every line whose message is msg.
func (w *eventLog) events(t *testing.T, msg string) []map[string]any {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(w.b.String(), "\n") {
		if !strings.Contains(line, `"message":"`+msg+`"`) {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// writeEpochs567 writes three one-record batches of each of the leader epochs 5, 6 and 7
// (offsets 0-8) into the partition directory dir, as three leaders would have: each
// from a segment of its own.
func writeEpochs567(t *testing.T, dir string) {
	t.Helper()
	l := openEpochLog(t, dir, nil, false)
	for _, epoch := range []int32{5, 6, 7} {
		if l.active().size > 0 {
			if _, err := l.roll(l.EndOffset()); err != nil {
				t.Fatal(err)
			}
		}
		appendAt(t, l, 3, epoch)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// history567 is what the batches of writeEpochs567 say, as a rebuilt file records it.
var history567 = []epochEntry{{Epoch: 5, StartOffset: 0, Broker: -1}, {Epoch: 6, StartOffset: 3, Broker: -1}, {Epoch: 7, StartOffset: 6, Broker: -1}}

// goodEpochs567 is the file the leaders of writeEpochs567 would have written.
var goodEpochs567 = []epochEntry{{Epoch: 5, StartOffset: 0, Broker: 0}, {Epoch: 6, StartOffset: 3, Broker: 1}, {Epoch: 7, StartOffset: 6, Broker: 2}}

func writeFile(t *testing.T, dir string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, epochsName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeEntries(t *testing.T, dir string, entries []epochEntry) {
	t.Helper()
	if err := writeEpochs(storage.OSFS{}, dir, entries); err != nil {
		t.Fatal(err)
	}
}

// goodFileBytes is the file writeEpochs makes of entries.
func goodFileBytes(t *testing.T, entries []epochEntry) []byte {
	t.Helper()
	dir := t.TempDir()
	writeEntries(t, dir, entries)
	b, err := os.ReadFile(filepath.Join(dir, epochsName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// badEpochFiles are leader-epoch files that must not be trusted over the batches of
// writeEpochs567, with the newest epoch each names (-1: none can be read).
func badEpochFiles(t *testing.T) []struct {
	name   string
	write  func(t *testing.T, dir string)
	newest int32
} {
	good := goodFileBytes(t, goodEpochs567)
	return []struct {
		name   string
		write  func(t *testing.T, dir string)
		newest int32
	}{
		{"empty", func(t *testing.T, dir string) { writeFile(t, dir, nil) }, -1},
		{"truncated", func(t *testing.T, dir string) { writeFile(t, dir, good[:len(good)/2]) }, -1},
		{"garbled", func(t *testing.T, dir string) {
			b := slices.Clone(good)
			for i := 10; i < len(b); i += 7 {
				b[i] ^= 0x5a
			}
			writeFile(t, dir, b)
		}, -1},
		{"a digit flipped", func(t *testing.T, dir string) {
			// 7's start 6 read as 4: the checksum no longer matches.
			writeFile(t, dir, bytes.Replace(good, []byte(`"start_offset":6`), []byte(`"start_offset":4`), 1))
		}, -1},
		{"an epoch above its batches", func(t *testing.T, dir string) {
			writeEntries(t, dir, []epochEntry{{Epoch: 9, StartOffset: 0, Broker: 0}})
		}, 9},
		{"an epoch missing", func(t *testing.T, dir string) {
			writeEntries(t, dir, goodEpochs567[:2])
		}, 6},
		{"an epoch starting after its first batch", func(t *testing.T, dir string) {
			writeEntries(t, dir, []epochEntry{{Epoch: 5, StartOffset: 0}, {Epoch: 6, StartOffset: 3}, {Epoch: 7, StartOffset: 7}})
		}, 7},
		{"an epoch starting inside the one before", func(t *testing.T, dir string) {
			writeEntries(t, dir, []epochEntry{{Epoch: 5, StartOffset: 0}, {Epoch: 6, StartOffset: 3}, {Epoch: 7, StartOffset: 4}})
		}, 7},
		{"an epoch starting past the log end", func(t *testing.T, dir string) {
			writeEntries(t, dir, append(slices.Clone(goodEpochs567), epochEntry{Epoch: 8, StartOffset: 20, Broker: 0}))
		}, 8},
	}
}

// Recovery never drops acknowledged batches on the leader-epoch file's word: a file that
// claims an epoch began earlier than the batches show, or one that does not match them,
// cuts nothing, and the epoch history is the batches'.
func TestRecoveryKeepsBatchesABadEpochFileContradicts(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []epochEntry
	}{
		{"epoch 9 from offset 0", []epochEntry{{Epoch: 9, StartOffset: 0, Broker: 0}}},
		{"7 starting inside 6", []epochEntry{{Epoch: 5, StartOffset: 0}, {Epoch: 6, StartOffset: 3}, {Epoch: 7, StartOffset: 4}}},
		{"6 starting inside 5, 7 missing", []epochEntry{{Epoch: 5, StartOffset: 0}, {Epoch: 6, StartOffset: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeEpochs567(t, dir)
			l := openEpochLog(t, dir, c.entries, true)
			defer l.Close()
			if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8}) {
				t.Fatalf("served %v, want offsets 0-8", got)
			}
			want := []epochStart{{Epoch: 5, Offset: 0}, {Epoch: 6, Offset: 3}, {Epoch: 7, Offset: 6}}
			if !slices.Equal(l.epochs, want) {
				t.Fatalf("epoch history %+v, want %+v", l.epochs, want)
			}
			if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasSuffix(e.Name(), ".stale") }) {
				t.Fatal("a segment was moved aside as stale")
			}
		})
	}
}

// A partition whose leader-epoch file is unreadable or contradicts its batches serves
// every batch, rebuilds the history from the batches' own epochs and writes it back, and
// a new leader begins an epoch above every one the batches (and a file that decodes)
// name: epochs never go back.
func TestLeaderEpochFileRebuiltFromBatches(t *testing.T) {
	for _, c := range badEpochFiles(t) {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var leader atomic.Int32
			h := newHarness(t, dir, asBroker(0, &leader, nil))
			if ti := h.create("t", 1); ti.ErrorCode != 0 {
				t.Fatalf("create: %+v", ti)
			}
			h.stop()
			pdir := partitionDir(topicsDir(dir), "t", 0)
			writeEpochs567(t, pdir)
			c.write(t, pdir)

			logs := &eventLog{}
			h = newHarness(t, dir, func(cfg *Config) {
				asBroker(0, &leader, nil)(cfg)
				cfg.Log = zerolog.New(logs)
			})
			defer h.stop()
			r := h.produceOnceLed("t", 0, []byte("new"))
			if r.BaseOffset != 9 {
				t.Fatalf("first produce after the restart at %d, want 9", r.BaseOffset)
			}
			want := max(int32(8), c.newest+1)
			bases, epochs, _ := h.batchesFrom("t", 0, 0)
			if !slices.Equal(bases, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) ||
				!slices.Equal(epochs, []int32{5, 5, 5, 6, 6, 6, 7, 7, 7, want}) {
				t.Fatalf("served offsets %v with epochs %v, want 0-9 with 5,5,5,6,6,6,7,7,7,%d", bases, epochs, want)
			}
			if got := h.describe("t").Partitions[0].LeaderEpoch; got != want {
				t.Fatalf("Metadata leader epoch %d, want %d", got, want)
			}
			if e := h.epochEnd("t", 0, 6); e.ErrorCode != 0 || e.LeaderEpoch != 6 || e.EndOffset != 6 {
				t.Fatalf("OffsetForLeaderEpoch(6) = %+v, want epoch 6 ending at 6", e)
			}
			entries, err := readEpochs(storage.OSFS{}, pdir)
			if err != nil {
				t.Fatalf("leader-epoch file after the restart: %v", err)
			}
			wantFile := append(slices.Clone(history567), epochEntry{Epoch: want, StartOffset: 9, Broker: 0})
			if !slices.Equal(entries, wantFile) {
				t.Fatalf("leader-epoch file %+v, want %+v", entries, wantFile)
			}
			evs := logs.events(t, "partition_leader_epochs_rebuilt")
			if len(evs) != 1 || evs[0]["reason"] == "" {
				t.Fatalf("partition_leader_epochs_rebuilt logged %d times (%v), want once with a reason", len(evs), evs)
			}
		})
	}
}

// A good leader-epoch file is kept as it is (with the broker of each epoch), and nothing
// is said of a rebuild.
func TestLeaderEpochFileTrustedWhenItMatchesBatches(t *testing.T) {
	dir := t.TempDir()
	var leader atomic.Int32
	h := newHarness(t, dir, asBroker(0, &leader, nil))
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	h.stop()
	pdir := partitionDir(topicsDir(dir), "t", 0)
	writeEpochs567(t, pdir)
	writeEntries(t, pdir, goodEpochs567)
	logs := &eventLog{}
	h = newHarness(t, dir, func(cfg *Config) {
		asBroker(0, &leader, nil)(cfg)
		cfg.Log = zerolog.New(logs)
	})
	defer h.stop()
	if r := h.produceOnceLed("t", 0, []byte("new")); r.BaseOffset != 9 {
		t.Fatalf("first produce after the restart at %d, want 9", r.BaseOffset)
	}
	entries, err := readEpochs(storage.OSFS{}, pdir)
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(goodEpochs567), epochEntry{Epoch: 8, StartOffset: 9, Broker: 0})
	if !slices.Equal(entries, want) {
		t.Fatalf("leader-epoch file %+v, want %+v", entries, want)
	}
	if evs := logs.events(t, "partition_leader_epochs_rebuilt"); len(evs) != 0 {
		t.Fatalf("a good file was rebuilt: %v", evs)
	}
}

// A broker alone rebuilds a bad file too, and leads at no lower epoch than the batches
// (or a file that decodes) show.
func TestLeaderEpochFileRebuiltAlone(t *testing.T) {
	for _, c := range badEpochFiles(t) {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			h := newHarness(t, dir, nil)
			if ti := h.create("t", 1); ti.ErrorCode != 0 {
				t.Fatalf("create: %+v", ti)
			}
			h.stop()
			pdir := partitionDir(topicsDir(dir), "t", 0)
			writeEpochs567(t, pdir)
			c.write(t, pdir)
			h = newHarness(t, dir, nil)
			defer h.stop()
			if r := h.produce("t", 0, testBatch(-1, -1, -1, 1, 0, []byte("new"))); r.ErrorCode != 0 || r.BaseOffset != 9 {
				t.Fatalf("produce after the restart: %+v", r)
			}
			want := max(int32(7), c.newest)
			_, epochs, _ := h.batchesFrom("t", 0, 0)
			if !slices.Equal(epochs, []int32{5, 5, 5, 6, 6, 6, 7, 7, 7, want}) {
				t.Fatalf("served epochs %v, want 5,5,5,6,6,6,7,7,7,%d", epochs, want)
			}
			entries, err := readEpochs(storage.OSFS{}, pdir)
			if err != nil {
				t.Fatalf("leader-epoch file after the restart: %v", err)
			}
			wantFile := slices.Clone(history567)
			if want > 7 {
				wantFile = append(wantFile, epochEntry{Epoch: want, StartOffset: 9, Broker: 0})
			}
			if !slices.Equal(entries, wantFile) {
				t.Fatalf("leader-epoch file %+v, want %+v", entries, wantFile)
			}
		})
	}
}

// A broker that does not lead the partition answers Metadata with no lower epoch than
// the one its leader is about to begin, also when the file cannot be read: it looks at
// the batches instead.
func TestMetadataEpochFromBatchesWhenFileUnreadable(t *testing.T) {
	dir := t.TempDir()
	var leader atomic.Int32
	h := newHarness(t, dir, asBroker(0, &leader, nil))
	if ti := h.create("t", 1); ti.ErrorCode != 0 {
		t.Fatalf("create: %+v", ti)
	}
	h.stop()
	pdir := partitionDir(topicsDir(dir), "t", 0)
	writeEpochs567(t, pdir)
	writeFile(t, pdir, []byte(`{"epochs":[{"epoch":5,"start_of`))
	leader.Store(1) // broker 1 is about to lead it: at epoch 8
	h = newHarness(t, dir, asBroker(2, &leader, nil))
	defer h.stop()
	if got := h.describe("t").Partitions[0].LeaderEpoch; got != 8 {
		t.Fatalf("Metadata leader epoch %d on a broker that does not lead, want 8", got)
	}
}

// Even a file that matches every batch's epoch makes a batch stale only where a
// replaced leader's late write can be: not below the recovery point, and not with a
// batch of the newer epoch after it.
func TestRecoveryStaleCutNeedsALateWrite(t *testing.T) {
	for _, c := range []struct {
		name   string
		epochs []int32 // one batch each
		clean  bool    // closed cleanly: the recovery point is the log end
	}{
		// 7 began at 6 and wrote nothing; its start read as 4 would cut 4-5.
		{"below the recovery point", []int32{5, 5, 5, 6, 6, 6}, true},
		// Nothing was made durable since the start (recovery point 0), but 7 wrote at 6.
		{"followed by the newer epoch", []int32{5, 5, 5, 6, 6, 6, 7, 7, 7}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openEpochLog(t, dir, nil, false)
			for _, e := range c.epochs {
				appendAt(t, l, 1, e)
			}
			if c.clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				l.closeFiles()
			}
			file := []epochEntry{{Epoch: 5, StartOffset: 0}, {Epoch: 6, StartOffset: 3}, {Epoch: 7, StartOffset: 4}}
			l = openEpochLog(t, dir, file, true)
			defer l.Close()
			if got, n := readAll(t, l, 0), len(c.epochs); len(got) != n || got[n-1] != int64(n-1) {
				t.Fatalf("served %v, want offsets 0-%d", got, n-1)
			}
			if l.distrust == "" {
				t.Fatal("the file was trusted")
			}
		})
	}
}

// Without a file to go by, the batches alone show a replaced leader's late write: a
// newest segment whose batches are older than the epoch of a batch before it is moved
// aside, as when the file said so.
func TestRecoveryIgnoresLateSegmentByBatchEpochs(t *testing.T) {
	dir := t.TempDir()
	l := openEpochLog(t, dir, nil, false)
	appendAt(t, l, 2, 1) // 0-1 by the leader of epoch 1
	if _, err := l.roll(2); err != nil {
		t.Fatal(err)
	}
	appendAt(t, l, 2, 2) // 2-3 by the leader of epoch 2, from a segment of its own
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The former leader, paused, rolls and writes once it resumes: a segment of epoch 1
	// after one of epoch 2.
	lateWrite(t, dir, func(l *segmentLog) {
		if _, err := l.roll(l.EndOffset()); err != nil {
			t.Fatal(err)
		}
		appendAt(t, l, 1, 1)
	})
	l = openEpochLog(t, dir, nil, true)
	defer l.Close()
	if _, err := os.Stat(filepath.Join(dir, segmentName(4)+".stale")); err != nil {
		t.Fatalf("the late segment was not moved aside: %v", err)
	}
	if got := readAll(t, l, 0); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Fatalf("served %v, want [0 1 2 3]", got)
	}
}
