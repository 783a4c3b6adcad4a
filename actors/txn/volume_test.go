package txn

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/actors/offsets"
	"kaas/storage"
)

// volumeSegment writes a journal segment in dir holding metas from seq first, one frame
// each; garbage, when set, goes between the first frame and the next (a damaged range),
// tail after the last (a write still under way).
func volumeSegment(t *testing.T, dir string, first uint64, garbage, tail []byte, metas ...*Meta) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for i, m := range metas {
		if i == 1 {
			out = append(out, garbage...)
		}
		f := journal.StartFrame(nil)
		f = journal.AppendRecord(f, encode(m))
		journal.FinishFrame(f, first+uint64(i))
		out = append(out, f...)
	}
	out = append(out, tail...)
	if err := os.WriteFile(filepath.Join(dir, journal.SegmentName(first)), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// volumeMeta is a record of id at version v.
func volumeMeta(id string, v uint64, pid int64, epoch int16, st State, parts map[string][]int32) *Meta {
	return &Meta{ID: id, ProducerID: pid, PrevProducerID: noPID, NextProducerID: noPID, Epoch: epoch, LastEpoch: noEpoch,
		State: st, Partitions: parts, StartMs: -1, Version: v, CoordinatorEpoch: int32(v)}
}

// volumeFixture lays out a cluster's coordinator state on data: two brokers' journals
// and the id files.
//
//   - "a" (producer 7): its file at version 1 Empty, node 0's journal at version 2
//     Ongoing at epoch 2 with t-0 (a torn write after it).
//   - "b" (producer 9): node 0's journal at 3 Ongoing with u-0, its file at 4
//     PrepareAbort with u-0, node 1's journal at 5 CompleteAbort: ended, the newest.
//   - "c" (producer 11): node 0's journal at 2 CompleteCommit, its file at 3 Empty,
//     node 1's journal at 4 Ongoing with x-0: held, the newest.
//   - "d" (producer 13): its file at 6 Ongoing with y-0 at epoch 1, node 1's
//     journal at 5 CompleteCommit (older than the file): held.
func volumeFixture(t *testing.T) (data string, journals []string) {
	t.Helper()
	data = t.TempDir()
	fsys := storage.OSFS{}
	idir := IDsDir(data)
	if err := os.MkdirAll(idir, 0o755); err != nil {
		t.Fatal(err)
	}
	n0, n1 := NodeJournalDir(data, 0), NodeJournalDir(data, 1)
	for _, m := range []*Meta{
		volumeMeta("a", 1, 7, 2, Empty, nil),
		volumeMeta("b", 4, 9, 0, PrepareAbort, map[string][]int32{"u": {0}}),
		volumeMeta("c", 3, 11, 0, Empty, nil),
		volumeMeta("d", 6, 13, 1, Ongoing, map[string][]int32{"y": {0}}),
	} {
		if err := saveID(fsys, idir, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	volumeSegment(t, n0, 1, nil, []byte{0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
		volumeMeta("a", 2, 7, 2, Ongoing, map[string][]int32{"t": {0}}),
		volumeMeta("b", 3, 9, 0, Ongoing, map[string][]int32{"u": {0}}),
		volumeMeta("c", 2, 11, 0, CompleteCommit, nil))
	volumeSegment(t, n1, 1, nil, nil,
		volumeMeta("b", 5, 9, 0, CompleteAbort, nil),
		volumeMeta("c", 4, 11, 0, Ongoing, map[string][]int32{"x": {0}}),
		volumeMeta("d", 5, 13, 1, CompleteCommit, nil))
	return data, []string{n0, n1}
}

var volumeQuestions = []Question{
	{"t", 0, 7, 2},  // held
	{"t", 0, 7, 1},  // held: an older epoch's batch, ended by the markers at 2
	{"t", 1, 7, 2},  // not held: the partition is not in the transaction
	{"t", 0, 7, 3},  // not held: a newer epoch than the coordinator's
	{"u", 0, 9, 0},  // not held: the newest record (node 1's) ended it
	{"x", 0, 11, 0}, // held: node 1's record is newer than the file and node 0's
	{"y", 0, 13, 1}, // held: the file is newer than node 1's record
	{"t", 0, 99, 0}, // not held: no id has the producer
}

var volumeHeld = []bool{true, true, false, false, false, true, true, false}

// TestCheckVolume: the newest record of the producer's id, whichever of two journals
// and the files holds it, says whether the transaction is held; a torn write at a
// journal's end is a write under way, not damage.
func TestCheckVolume(t *testing.T) {
	data, journals := volumeFixture(t)
	got, err := CheckVolume(storage.OSFS{}, IDsDir(data), journals, volumeQuestions)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range got {
		if !a.Known || a.Held != volumeHeld[i] {
			t.Errorf("%+v: %+v, want held %v", volumeQuestions[i], a, volumeHeld[i])
		}
	}
	// NodeJournalDirs finds both journals.
	dirs, err := NodeJournalDirs(storage.OSFS{}, data)
	if err != nil || len(dirs) != 2 {
		t.Fatalf("journals %v %v", dirs, err)
	}
}

// TestCheckVolumeDamagedIsUnknown: a damaged journal range, a record that does not
// decode or an id file that cannot be read could hide the newest record of any id:
// every answer but held is unknown then, never "not held".
func TestCheckVolumeDamagedIsUnknown(t *testing.T) {
	cases := map[string]func(t *testing.T, data string){
		"damaged journal range": func(t *testing.T, data string) {
			volumeSegment(t, NodeJournalDir(data, 2), 1, []byte{0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, nil,
				volumeMeta("e", 1, 20, 0, Empty, nil), volumeMeta("e", 2, 20, 0, Empty, nil))
		},
		"undecodable record": func(t *testing.T, data string) {
			bad := volumeMeta("e", 1, 20, 0, Empty, nil)
			bad.State = 42
			volumeSegment(t, NodeJournalDir(data, 2), 1, nil, nil, bad)
		},
		"unreadable id file": func(t *testing.T, data string) {
			if err := os.WriteFile(filepath.Join(IDsDir(data), offsets.FileName("e")), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			data, _ := volumeFixture(t)
			damage(t, data)
			journals, err := NodeJournalDirs(storage.OSFS{}, data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := CheckVolume(storage.OSFS{}, IDsDir(data), journals, volumeQuestions)
			if err == nil {
				t.Fatal("no error for a volume that could not be read whole")
			}
			for i, a := range got {
				want := Answer{Held: true, Known: true}
				if !volumeHeld[i] {
					want = Answer{}
				}
				if a != want {
					t.Errorf("%+v: %+v, want %+v", volumeQuestions[i], a, want)
				}
			}
		})
	}
}

// TestOrphanCheckerAnswersFromVolume: the checker actor answers CheckTxn from the
// volume: held, not held, and nothing (ask again) once the volume cannot be read whole.
func TestOrphanCheckerAnswersFromVolume(t *testing.T) {
	data, _ := volumeFixture(t)
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(OrphanCheckerProps(OrphanCheckerConfig{Data: data, Log: zerolog.Nop()}))
	ask := func(q Question) any {
		t.Helper()
		w := sys.NewWaiter()
		sys.Send(pid, &CheckTxn{Topic: q.Topic, Partition: q.Partition, ProducerID: q.ProducerID,
			ProducerEpoch: q.ProducerEpoch, Reply: w.Promise})
		v, ok := w.Wait(10 * time.Second)
		if !ok {
			t.Fatalf("%+v: no answer", q)
		}
		return v
	}
	for i, q := range volumeQuestions {
		r, ok := ask(q).(*TxnChecked)
		if !ok || r.Held != volumeHeld[i] {
			t.Fatalf("%+v: %#v, want held %v", q, r, volumeHeld[i])
		}
	}
	if err := os.WriteFile(filepath.Join(IDsDir(data), offsets.FileName("e")), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := ask(Question{"t", 1, 7, 2}); v != nil {
		t.Fatalf("not held with an unreadable file: %#v, want no answer", v)
	}
	if r, ok := ask(Question{"t", 0, 7, 2}).(*TxnChecked); !ok || !r.Held {
		t.Fatalf("held with an unreadable file: %#v", r)
	}
	if err := sys.Stop(pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// heldFS is the OS filesystem whose first listing waits for release: a scan slow to
// read the volume.
type heldFS struct {
	storage.OSFS
	listed  chan struct{}
	release chan struct{}
	once    sync.Once
}

func (f *heldFS) ReadDirNames(dir string) ([]string, error) {
	first := false
	f.once.Do(func() { first = true })
	if first {
		close(f.listed)
		<-f.release
	}
	return f.OSFS.ReadDirNames(dir)
}

// TestOrphanCheckerBatchesWhileScanning: the questions that come while a scan runs are
// answered together by the next scan, and a question asked again meanwhile replaces the
// earlier one, which is answered nil: the queue holds one question per transaction
// however long a scan takes.
func TestOrphanCheckerBatchesWhileScanning(t *testing.T) {
	data, _ := volumeFixture(t)
	fsys := &heldFS{listed: make(chan struct{}), release: make(chan struct{})}
	sys := actor.NewSystem(zerolog.Nop())
	defer sys.Shutdown()
	pid := sys.Spawn(OrphanCheckerProps(OrphanCheckerConfig{FS: fsys, Data: data, Log: zerolog.Nop()}))
	send := func(q Question) *actor.Waiter {
		w := sys.NewWaiter()
		sys.Send(pid, &CheckTxn{Topic: q.Topic, Partition: q.Partition, ProducerID: q.ProducerID,
			ProducerEpoch: q.ProducerEpoch, Reply: w.Promise})
		return w
	}
	first := send(volumeQuestions[0])
	<-fsys.listed // the first scan runs, held
	again := send(volumeQuestions[2])
	replaced := send(volumeQuestions[5])
	later := send(volumeQuestions[5])
	if v, ok := replaced.Wait(10 * time.Second); !ok || v != nil {
		t.Fatalf("replaced question: %#v %v, want nil", v, ok)
	}
	close(fsys.release)
	for _, c := range []struct {
		w    *actor.Waiter
		held bool
	}{{first, true}, {again, false}, {later, true}} {
		v, ok := c.w.Wait(10 * time.Second)
		if r, _ := v.(*TxnChecked); !ok || r == nil || r.Held != c.held {
			t.Fatalf("answer %#v %v, want held %v", v, ok, c.held)
		}
	}
	if err := sys.Stop(pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
