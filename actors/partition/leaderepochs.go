package partition

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"kaas/actors/actor"
	"kaas/storage"
)

// The leader epochs Metadata answers (epochs.go): for a partition whose actor here has
// opened its log, the epoch it leads at; for any other, the one predicted from the
// partition's leader-epoch file as last read and the leader in this broker's view. In a
// cluster the files of the partitions not led here are read again at every catalogue
// tick and after every rebalance, off the manager's mailbox. A file that cannot be read
// never lowers what is known: the last entry read stays, and before any the epoch comes
// from the batches (epochOfBatches), which is what the leader rebuilds the file from.

// knownEpoch is what the manager knows of one partition's leader epoch.
type knownEpoch struct {
	last epochEntry // the file's newest entry as last read, or this broker's own
	ok   bool       // last is set
	own  bool       // last is what a partition actor here opened at, and it still runs
}

// knownEpoch returns p's entry, growing the list with the topic.
func (t *topicState) knownEpoch(p int32) *knownEpoch {
	for int32(len(t.epochs)) <= p {
		t.epochs = append(t.epochs, knownEpoch{})
	}
	return &t.epochs[p]
}

// leaderEpoch is the leader epoch Metadata answers for (t, p) led by leader (-1: none).
func (m *manager) leaderEpoch(t *topicState, p int32, leader int32) int32 {
	base := t.meta.LeaderEpochs[p]
	k := t.knownEpoch(p)
	if k.own {
		return max(k.last.Epoch, base)
	}
	if m.cfg.Cluster == nil {
		if k.ok {
			return max(k.last.Epoch, base)
		}
		return base
	}
	return predictEpoch(k.last, k.ok, leader, base)
}

func (m *manager) onEpochOpened(e *epochOpened) {
	t := m.topics[e.topic]
	if t == nil || t.deleting || e.partition < 0 || e.partition >= int32(len(t.pids)) || t.pids[e.partition] == nil {
		return
	}
	k := t.knownEpoch(e.partition)
	*k = knownEpoch{last: epochEntry{Epoch: e.epoch, Broker: m.cfg.NodeID}, ok: true, own: true}
}

// partitionStopped forgets that (t, p) is led here: what its actor opened at stays the
// last known entry, so the epoch predicted for its next leader is the next one.
func (t *topicState) partitionStopped(p int32) {
	if p < int32(len(t.epochs)) {
		t.epochs[p].own = false
	}
}

// readEpochsOf reads the leader-epoch files of a topic this broker just learnt of, in a
// cluster, before it answers Metadata for it: a guess would be answered otherwise (the
// next epoch of a file not read), which clients take as a leader epoch and then find
// going back. One small read per partition, as the catalogue entry's own read costs.
func (m *manager) readEpochsOf(t *topicState) {
	if m.cfg.Cluster == nil {
		return
	}
	for p := int32(0); p < t.meta.Partitions; p++ {
		last, ok, _ := readLastEpoch(m.cfg.FS, partitionDir(m.root, t.meta.Name, p))
		k := t.knownEpoch(p)
		k.last, k.ok = last, ok
	}
}

// readLastEpoch is the newest entry of dir's leader-epoch file (ok false: none); when
// the file cannot be read, the newest epoch the batches show (fromBatches).
func readLastEpoch(fsys storage.FS, dir string) (last epochEntry, ok, fromBatches bool) {
	entries, err := readEpochs(fsys, dir)
	if err == nil {
		last, ok = lastEpoch(entries)
		return last, ok, false
	}
	last, ok = epochOfBatches(fsys, dir)
	return last, ok, true
}

// epochOfBatches is the newest leader epoch dir's batches show as far as one small
// read per segment tells: that of the first batch of the newest segment holding one
// (every leader appends from a segment of its own, and epochs only grow along the log).
// The broker it began on is not known (-1), so the epoch predicted for a leader is the
// next one, the one that leader begins when it rebuilds the file.
func epochOfBatches(fsys storage.FS, dir string) (epochEntry, bool) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return epochEntry{}, false
	}
	var bases []int64
	for _, e := range names {
		base, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64)
		if strings.HasSuffix(e.Name(), ".log") && err == nil && base >= 0 {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	b := make([]byte, batchHeaderSize)
	for i := len(bases) - 1; i >= 0; i-- {
		f, err := fsys.OpenFile(filepath.Join(dir, segmentName(bases[i])), os.O_RDONLY)
		if err != nil {
			continue
		}
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if n < batchHeaderSize {
			continue
		}
		if h := parseHeader(b); h.Magic == 2 && h.LeaderEpoch >= 0 && h.LeaderEpoch < math.MaxInt32 {
			return epochEntry{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset, Broker: -1}, true
		}
	}
	return epochEntry{}, false
}

// epochsRead is the result of reading the leader-epoch files of partitions not led here.
type epochsRead struct {
	reads []epochRead
}

type epochRead struct {
	topic       string
	id          TopicID
	partition   int32
	last        epochEntry
	ok          bool
	fromBatches bool // the file could not be read: last is what the batches show
}

// readEpochsOfOthers reads, off the mailbox, the leader-epoch files of the partitions no
// actor here leads (cluster), unless a read is under way.
func (m *manager) readEpochsOfOthers(ctx actor.Context) {
	if m.cfg.Cluster == nil || m.readingEpochs || m.stopping {
		return
	}
	type want struct {
		topic string
		id    TopicID
		p     int32
		dir   string
	}
	var wants []want
	for name, t := range m.topics {
		if t.deleting {
			continue
		}
		for p := int32(0); p < t.meta.Partitions; p++ {
			if int(p) < len(t.pids) && t.pids[p] != nil && t.knownEpoch(p).own {
				continue
			}
			wants = append(wants, want{topic: name, id: t.id, p: p, dir: partitionDir(m.root, name, p)})
		}
	}
	if len(wants) == 0 {
		return
	}
	m.readingEpochs = true
	fsys := m.cfg.FS
	actor.Background(ctx, func() any {
		out := &epochsRead{reads: make([]epochRead, 0, len(wants))}
		for _, w := range wants {
			last, ok, fromBatches := readLastEpoch(fsys, w.dir)
			out.reads = append(out.reads, epochRead{topic: w.topic, id: w.id, partition: w.p, last: last, ok: ok, fromBatches: fromBatches})
		}
		return out
	})
}

func (m *manager) onEpochsRead(r *epochsRead) {
	m.readingEpochs = false
	for _, e := range r.reads {
		t := m.topics[e.topic]
		if t == nil || t.id != e.id || t.deleting || e.partition >= t.meta.Partitions {
			continue
		}
		k := t.knownEpoch(e.partition)
		if k.own {
			continue
		}
		switch {
		case e.fromBatches:
			// The file is unreadable (or being replaced): the last entry read stays,
			// unless the batches show a newer epoch.
			if e.ok && (!k.ok || e.last.Epoch > k.last.Epoch) {
				k.last, k.ok = e.last, true
			}
		case e.ok || !k.ok:
			k.last, k.ok = e.last, e.ok
		}
	}
}
