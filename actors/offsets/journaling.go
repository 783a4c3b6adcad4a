package offsets

import (
	"path/filepath"
	"strconv"
	"time"

	"kaas/actors/journal"
)

// The offsets journal is the broker's one journal actor (package actors/journal), shared
// by every group it coordinates: a group's offsets actor makes a batch durable by
// appending it there as one record (encodeRecord, keyed by the group id), answers its
// waiters when the fsync that holds it returns, and rewrites its own file later (a
// checkpoint, Config.CheckpointInterval), off its Receive. The journal reads none of
// it: what a record means is this package's, at replay (Replay) and adoption (Adopt).

// JournalDir is the offsets journal directory of node under the broker's data.dir. Each
// broker has its own, so brokers sharing a volume never write the same file.
func JournalDir(dataDir string, node int32) string {
	return filepath.Join(dataDir, "__cluster", "__offsets_journal", "node-"+strconv.Itoa(int(node)))
}

// Journal is m as the offsets journal's metrics (journal.Config.Metrics): its writes and
// quarantined segments count under the kaas_offsets_journal_* names. nil when m is nil.
func (m *Metrics) Journal() journal.Metrics {
	if m == nil {
		return nil
	}
	return journalMetrics{m}
}

type journalMetrics struct{ m *Metrics }

func (j journalMetrics) Wrote(err error, took time.Duration, records int) {
	j.m.journalWrote(err, took, records)
}

func (j journalMetrics) Quarantined() { j.m.quarantinedSegment() }
