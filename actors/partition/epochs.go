package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"kaas/storage"
)

// The leader-epoch file is Apache's leader-epoch-checkpoint, kept per partition
// directory as leader-epochs.json, plus the broker each epoch began on:
//
//	{"epochs":[{"epoch":1,"start_offset":0,"broker":0},{"epoch":2,"start_offset":120,"broker":2}]}
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
}

// readEpochs reads dir's leader-epoch file; none is an empty list. Entries must grow in
// epoch and never go back in start offset.
func readEpochs(dir string) ([]epochEntry, error) {
	b, err := os.ReadFile(filepath.Join(dir, epochsName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read leader epochs in %s: %w", dir, err)
	}
	return decodeEpochs(b, dir)
}

// decodeEpochs parses a leader-epoch file's bytes (dir names it in errors).
func decodeEpochs(b []byte, dir string) ([]epochEntry, error) {
	var f epochFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("leader epochs in %s: %w", dir, err)
	}
	for i, e := range f.Epochs {
		if e.Epoch < 0 || e.StartOffset < 0 {
			return nil, fmt.Errorf("leader epochs in %s: entry %d: negative epoch or offset", dir, i)
		}
		if i > 0 && (e.Epoch <= f.Epochs[i-1].Epoch || e.StartOffset < f.Epochs[i-1].StartOffset) {
			return nil, fmt.Errorf("leader epochs in %s: entry %d: not after the one before", dir, i)
		}
	}
	return f.Epochs, nil
}

// writeEpochs replaces dir's leader-epoch file durably (written aside, fsynced, renamed
// into place, directory fsynced).
func writeEpochs(fsys storage.FS, dir string, entries []epochEntry) error {
	if n := len(entries); n > maxEpochEntries {
		entries = entries[n-maxEpochEntries:]
	}
	b, err := json.Marshal(epochFile{Epochs: entries})
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
