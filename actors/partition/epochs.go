package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"path/filepath"

	"kaas/storage"
)

// The leader-epoch file is Apache's leader-epoch-checkpoint, kept per partition
// directory as leader-epochs.json, plus the broker each epoch began on:
//
//	{"epochs":[{"epoch":1,"start_offset":0,"broker":0},{"epoch":2,"start_offset":120,"broker":2}],"sum":1234567890}
//
// (sum: epochsSum of the entries; a file of a version before it has none.)
//
// In a cluster a broker that starts leading a partition another broker led last (whether
// it took that broker's lock or broke it) begins a new epoch at the log end found by
// recovery: it writes the
// file (atomically, fsynced) before it appends anything, and stamps every batch it writes
// with that epoch. The file is what makes a former leader's late write detectable: a
// batch at or past an epoch's start offset that carries an older epoch was written by a
// leader that had already been replaced, and recovery never serves it (log.go). A broker
// that leads the partition again after a restart keeps the epoch it began (a broker id is
// one process at a time: the fence refuses a second), so only a move changes it.
//
// The file is a cache of what the batches say, never an authority over them, as Apache's
// checkpoint is. Recovery checks it against every batch it walks; one that cannot be
// read or decoded, fails its checksum or its order, or does not match the batches (an
// epoch a batch carries that no entry begins at or before it, an entry that would make
// a batch stale where no late write can be, an entry past the log end) is not trusted:
// the history is rebuilt from the batches' own epochs, the first offset of each, with
// broker -1 (not known), written back, and logged once (partition_leader_epochs_rebuilt).
// A leader never begins an epoch at or below one the batches, or any file that decodes,
// name; in a cluster, after a rebuild, it always begins a new one.
//
// Every broker also reads the files of the partitions it does not lead, for the leader
// epoch its Metadata answers: the last entry's epoch when its broker is the leader in
// this broker's view, else that epoch + 1 (the one the new leader is about to begin), so
// that brokers agree on it before the new leader has even written it.
const (
	epochsName = "leader-epochs.json"
	// maxEpochEntries bounds the file: only the newest entries are kept (an
	// OffsetForLeaderEpoch for an epoch older than every kept one answers with the first
	// kept start, as Apache's cache does after truncation).
	maxEpochEntries = 1000
)

// epochEntry is one line of the leader-epoch file.
type epochEntry struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"start_offset"`
	Broker      int32 `json:"broker"`
}

type epochFile struct {
	Epochs []epochEntry `json:"epochs"`
	// Sum is epochsSum(Epochs) (nil in a file of a version before it).
	Sum *uint32 `json:"sum,omitempty"`
}

// epochsSum is the checksum of a file's entries: CRC-32C of their JSON encoding, so a
// flipped digit is caught however the file is laid out.
func epochsSum(entries []epochEntry) uint32 {
	if entries == nil {
		entries = []epochEntry{}
	}
	b, _ := json.Marshal(entries)
	return crc32.Checksum(b, crc32c)
}

// Why a leader-epoch file that exists is not read (besides an I/O error).
var (
	errEpochsGarbled  = errors.New("not a leader-epoch file")
	errEpochsChecksum = errors.New("checksum mismatch")
	errEpochsOrder    = errors.New("entries out of order")
)

// readEpochs reads dir's leader-epoch file; none is an empty list. Entries must grow in
// epoch and never go back in start offset.
func readEpochs(fsys storage.FS, dir string) ([]epochEntry, error) {
	entries, _, err := readEpochFile(fsys, dir)
	return entries, err
}

// readEpochFile reads dir's leader-epoch file; found is false when there is none.
func readEpochFile(fsys storage.FS, dir string) (entries []epochEntry, found bool, err error) {
	b, err := fsys.ReadFile(filepath.Join(dir, epochsName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("read leader epochs in %s: %w", dir, err)
	}
	entries, err = decodeEpochs(b, dir)
	return entries, true, err
}

// decodeEpochs parses a leader-epoch file's bytes (dir names it in errors).
func decodeEpochs(b []byte, dir string) ([]epochEntry, error) {
	var f epochFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("leader epochs in %s: %w: %w", dir, errEpochsGarbled, err)
	}
	if f.Sum != nil && *f.Sum != epochsSum(f.Epochs) {
		return nil, fmt.Errorf("leader epochs in %s: %w", dir, errEpochsChecksum)
	}
	for i, e := range f.Epochs {
		// The largest epoch would leave none for the next leader to begin.
		if e.Epoch < 0 || e.Epoch == math.MaxInt32 || e.StartOffset < 0 {
			return nil, fmt.Errorf("leader epochs in %s: entry %d: %w: epoch or offset out of range", dir, i, errEpochsOrder)
		}
		if i > 0 && (e.Epoch <= f.Epochs[i-1].Epoch || e.StartOffset < f.Epochs[i-1].StartOffset) {
			return nil, fmt.Errorf("leader epochs in %s: entry %d: %w: not after the one before", dir, i, errEpochsOrder)
		}
	}
	return f.Epochs, nil
}

// epochsReason is the word the rebuild's log gives for a file that could not be read.
func epochsReason(err error) string {
	switch {
	case errors.Is(err, errEpochsGarbled):
		return "garbled"
	case errors.Is(err, errEpochsChecksum):
		return "checksum"
	case errors.Is(err, errEpochsOrder):
		return "out_of_order"
	}
	return "unreadable"
}

// writeEpochs replaces dir's leader-epoch file durably (written aside, fsynced, renamed
// into place, directory fsynced).
func writeEpochs(fsys storage.FS, dir string, entries []epochEntry) error {
	if n := len(entries); n > maxEpochEntries {
		entries = entries[n-maxEpochEntries:]
	}
	sum := epochsSum(entries)
	b, err := json.Marshal(epochFile{Epochs: entries, Sum: &sum})
	if err != nil {
		return err
	}
	if err := storage.WriteFileAtomic(fsys, dir, epochsName, b); err != nil {
		return fmt.Errorf("write leader epochs: %w", err)
	}
	return nil
}

// epochAt is the epoch in force at offset by entries: that of the last entry starting
// at or before it (-1: none).
func epochAt(entries []epochEntry, offset int64) int32 {
	ep := int32(-1)
	for _, e := range entries {
		if e.StartOffset > offset {
			break
		}
		ep = e.Epoch
	}
	return ep
}

// describes says whether entries account for a batch of epoch at offset: an entry of
// that epoch begins at or before it, or the batch is older than every entry kept (older
// epoch, lower offset than the first).
func describes(entries []epochEntry, epoch int32, offset int64) bool {
	if len(entries) > 0 && epoch < entries[0].Epoch && offset < entries[0].StartOffset {
		return true
	}
	for _, e := range entries {
		if e.Epoch == epoch {
			return e.StartOffset <= offset
		}
	}
	return false
}

// epochsOf is the history the batches show (the first offset of each epoch), as a
// rebuilt file records it: the broker each epoch began on is not known (-1).
func epochsOf(starts []epochStart) []epochEntry {
	out := make([]epochEntry, 0, len(starts))
	for _, s := range starts {
		out = append(out, epochEntry{Epoch: s.Epoch, StartOffset: s.Offset, Broker: -1})
	}
	return out
}

// clip cuts s to at most n bytes (a log field of bounded size).
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// lastEpoch is the newest entry (ok false: none).
func lastEpoch(entries []epochEntry) (epochEntry, bool) {
	if len(entries) == 0 {
		return epochEntry{}, false
	}
	return entries[len(entries)-1], true
}

// predictEpoch is the leader epoch Metadata answers for a partition whose file's newest
// entry is last (ok false: none) and whose leader is leader in this broker's view, given
// base (the catalogue's epoch): the last epoch when that broker began it, else the one
// the leader will begin when it opens the partition.
func predictEpoch(last epochEntry, ok bool, leader, base int32) int32 {
	if !ok {
		if leader < 0 {
			return base
		}
		return base + 1
	}
	ep := max(last.Epoch, base)
	if leader >= 0 && leader != last.Broker {
		ep++
	}
	return ep
}
