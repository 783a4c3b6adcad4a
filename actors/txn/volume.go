package txn

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"kaas/actors/actor"
	"kaas/actors/journal"
	"kaas/logs"
	"kaas/storage"
)

// The orphan check in a cluster (issue 27). A partition does not know which broker
// coordinates a producer id (coordinators are chosen by transactional id, which batches
// do not carry), so it asks the coordinators' durable state on the shared volume instead:
// the id files (IDsDir) and every broker's journal (NodeJournalDirs). A coordinator
// writes, and fdatasyncs, the record that adds a partition to a transaction before it
// answers, and the partition only has the transaction's batch after that answer; so the
// newest record of the producer's id on the volume, read after the batch was written,
// is that record or a later one. No transition leaves a transaction's partition out of
// a later record before its markers are written (Prepare* keeps them, Complete* follows
// the markers, a fence is a PrepareAbort at a bumped epoch), so that newest record says
// whether a coordinator will still end the transaction: it holds it iff it is Ongoing or
// Prepare* with the producer id, the batch's epoch or a newer one, and the partition.
//
// The journals are read first, then the files: a segment a broker removes between the
// two had every record saved to its id's file before it went. The newest record of an
// id is the one with the highest Meta.Version, whichever journal or file holds it.
// Anything that cannot be read (a damaged segment, a record or file that does not
// decode, a directory that cannot be listed) could hide the newest record of any id, so
// it leaves every answer but "held" unknown: the partition asks again later, and never
// aborts a transaction on a guess.

// Question is a partition's question about a transaction it recovered open (CheckTxn's
// fields).
type Question struct {
	Topic         string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int16
}

// Answer is what the volume says of a Question: Held, a coordinator will end the
// transaction; Known false, the volume could not say (ask again later).
type Answer struct {
	Held  bool
	Known bool
}

// holds says whether m is a running transaction of producer pid, at epoch or a newer
// one, with partition p of topic t: the coordinator holding m will write its markers.
func (m *Meta) holds(t string, p int32, pid int64, epoch int16) bool {
	return m != nil && m.ProducerID == pid && m.State.open() && m.has(t, p) && m.Epoch >= epoch
}

// CheckVolume answers qs from one scan of the coordinators' durable state: the brokers'
// journals in journalDirs, then the id files in idsDir. The error, when not nil, says
// what could not be read; every answer not Held is then unknown.
func CheckVolume(fsys storage.FS, idsDir string, journalDirs []string, qs []Question) ([]Answer, error) {
	if fsys == nil {
		fsys = storage.OSFS{}
	}
	want := make(map[int64]bool, len(qs))
	for _, q := range qs {
		want[q.ProducerID] = true
	}
	v := &volumeScan{want: want, latest: map[string]*Meta{}, byProducer: map[int64]map[string]bool{}}
	for _, dir := range journalDirs {
		v.readJournal(fsys, dir)
	}
	v.readFiles(fsys, idsDir)
	doubt := errors.Join(v.doubts...)
	out := make([]Answer, len(qs))
	for i, q := range qs {
		held := false
		for id := range v.byProducer[q.ProducerID] {
			if v.latest[id].holds(q.Topic, q.Partition, q.ProducerID, q.ProducerEpoch) {
				held = true
				break
			}
		}
		out[i] = Answer{Held: held, Known: held || doubt == nil}
	}
	return out, doubt
}

// volumeScan is one CheckVolume's findings: the newest record of every id that ever
// held a producer asked about, and what could not be read.
type volumeScan struct {
	want       map[int64]bool
	latest     map[string]*Meta
	byProducer map[int64]map[string]bool // producer id → the ids whose records name it
	doubts     []error
}

// maxDoubts bounds the errors a scan keeps (one is enough to doubt; a few tell why).
const maxDoubts = 4

func (v *volumeScan) doubt(err error) {
	if len(v.doubts) < maxDoubts {
		v.doubts = append(v.doubts, err)
	}
}

// take keeps m when it is the newest record of its id seen so far; it is kept for every
// id, as an id's newest record may name another producer than the one asked about.
func (v *volumeScan) take(m *Meta) {
	if v.want[m.ProducerID] {
		ids := v.byProducer[m.ProducerID]
		if ids == nil {
			ids = map[string]bool{}
			v.byProducer[m.ProducerID] = ids
		}
		ids[m.ID] = true
	}
	if cur := v.latest[m.ID]; cur == nil || m.Version > cur.Version {
		v.latest[m.ID] = m
	}
}

func (v *volumeScan) readJournal(fsys storage.FS, dir string) {
	segs, err := segments(fsys, dir)
	if err != nil {
		v.doubt(err)
		return
	}
	for _, s := range segs {
		path := filepath.Join(dir, s.name)
		b, err := fsys.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // dropped by its broker since it was listed: the files, read next, hold it
		}
		if err != nil {
			v.doubt(fmt.Errorf("read %s: %w", path, err))
			continue
		}
		sc := journal.ScanSegment(b, s.first)
		if len(sc.Damaged) > 0 {
			v.doubt(fmt.Errorf("%s: %d damaged ranges", path, len(sc.Damaged)))
		}
		for _, r := range sc.Records {
			m, err := decode(r.Data)
			if err != nil {
				v.doubt(fmt.Errorf("%s, record %d: %w", path, r.Seq, err))
				continue
			}
			v.take(m)
		}
	}
}

func (v *volumeScan) readFiles(fsys storage.FS, dir string) {
	names, err := fsys.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		v.doubt(fmt.Errorf("list %s: %w", dir, err))
		return
	}
	for _, name := range names {
		if strings.HasSuffix(name, storage.TmpSuffix) {
			continue
		}
		f, err := readID(fsys, dir, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // an expired id's file removed since it was listed
		}
		if err != nil {
			v.doubt(err)
			continue
		}
		v.take(f.Meta)
	}
}

// OrphanCheckerConfig is what the orphan checker needs.
type OrphanCheckerConfig struct {
	FS storage.FS
	// Data is the shared data directory: IDsDir and NodeJournalDirs of it are read.
	Data string
	Log  zerolog.Logger
}

// OrphanCheckerProps makes the orphan checker of a broker of a cluster: it answers every
// CheckTxn (with *TxnChecked, or nil when the volume cannot say) from the volume
// (CheckVolume), off its Receive; the questions that come while a scan runs are answered
// together by the next one.
func OrphanCheckerProps(cfg OrphanCheckerConfig) *actor.Props {
	if cfg.FS == nil {
		cfg.FS = storage.OSFS{}
	}
	log := cfg.Log.With().Str("actor", "transactions_orphans").Logger()
	return actor.PropsOf(func() actor.Actor { return &orphanChecker{cfg: cfg, log: log} })
}

type orphanChecker struct {
	cfg OrphanCheckerConfig
	log zerolog.Logger
	// waiting are the questions for the next scan; scanning those of the scan running.
	waiting  []*CheckTxn
	scanning []*CheckTxn
}

// volumeChecked is a scan's answers to the questions it was given (batch).
type volumeChecked struct {
	batch   []*CheckTxn
	answers []Answer
	err     error
}

func (c *orphanChecker) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *CheckTxn:
		actor.HandedOn(ctx) // answered by a scan, or with nil when the checker stops
		c.wait(m)
		c.scan(ctx)
	case *volumeChecked:
		c.onChecked(ctx, m)
	case *actor.Stopping, *actor.Restarting:
		for _, q := range append(c.scanning, c.waiting...) {
			q.Reply.Resolve(nil)
		}
		c.scanning, c.waiting = nil, nil
	}
}

// wait queues m for the next scan. A partition asks again when no answer came in time
// (a scan slow to read the volume): its earlier question is answered nil (it no longer
// waits for it), so the queue holds one question per transaction however long a scan
// takes.
func (c *orphanChecker) wait(m *CheckTxn) {
	for i, q := range c.waiting {
		if q.Topic == m.Topic && q.Partition == m.Partition && q.ProducerID == m.ProducerID && q.ProducerEpoch == m.ProducerEpoch {
			q.Reply.Resolve(nil)
			c.waiting[i] = m
			return
		}
	}
	c.waiting = append(c.waiting, m)
}

// scan starts a scan of the waiting questions unless one runs.
func (c *orphanChecker) scan(ctx actor.Context) {
	if c.scanning != nil || len(c.waiting) == 0 {
		return
	}
	c.scanning, c.waiting = c.waiting, nil
	qs := make([]Question, len(c.scanning))
	for i, m := range c.scanning {
		qs[i] = Question{Topic: m.Topic, Partition: m.Partition, ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch}
	}
	fsys, data, batch := c.cfg.FS, c.cfg.Data, c.scanning
	actor.Background(ctx, func() (out any) {
		defer func() {
			if r := recover(); r != nil { // damaged state must not take the broker down
				out = &volumeChecked{batch: batch, err: fmt.Errorf("scan panicked: %s", logs.ID(fmt.Sprint(r)))}
			}
		}()
		dirs, err := NodeJournalDirs(fsys, data)
		if err != nil {
			return &volumeChecked{batch: batch, err: err}
		}
		answers, err := CheckVolume(fsys, IDsDir(data), dirs, qs)
		return &volumeChecked{batch: batch, answers: answers, err: err}
	})
}

// onChecked answers a scan's questions. A scan of an incarnation that restarted since
// answers its own questions (already answered nil: a promise answers once) and leaves
// the running scan's alone.
func (c *orphanChecker) onChecked(ctx actor.Context, m *volumeChecked) {
	qs := m.batch
	if len(qs) > 0 && len(c.scanning) > 0 && c.scanning[0] == qs[0] {
		c.scanning = nil
	}
	if m.err != nil {
		c.log.Warn().Err(m.err).Int("questions", len(qs)).Msg("transaction_orphan_check_unanswered")
	}
	for i, q := range qs {
		if i >= len(m.answers) || !m.answers[i].Known {
			q.Reply.Resolve(nil)
			continue
		}
		if !m.answers[i].Held {
			c.log.Info().Str("topic", logs.ID(q.Topic)).Int32("partition", q.Partition).Int64("producer_id", q.ProducerID).
				Int16("epoch", q.ProducerEpoch).Msg("transaction_orphan_found")
		}
		q.Reply.Resolve(&TxnChecked{Held: m.answers[i].Held})
	}
	c.scan(ctx)
}
