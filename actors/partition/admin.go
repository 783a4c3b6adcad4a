package partition

import (
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"

	"kaas/actors/actor"
)

// The catalogue's requests: CreateTopics, DeleteTopics, CreatePartitions, describing
// topics, and the producer ids of InitProducerId. Writes are queued off Receive
// (catalogqueue.go).

func (m *manager) handleDescribe(ctx actor.Context, d *Describe) {
	if d.All {
		m.readOnListing(ctx)
	} else {
		m.readOnMiss(ctx, d.Names, d.IDs, false)
	}
	if d.Fresh {
		m.refreshEntries(ctx, d.Names)
	}
	out := &Described{}
	if len(d.Groups) > 0 {
		m.refreshGroupConfigs()
		out.Groups = make([]map[string]string, len(d.Groups))
		for i, g := range d.Groups {
			out.Groups[i] = maps.Clone(m.groupCfgs[g])
		}
	}
	if d.All {
		names := make([]string, 0, len(m.topics))
		for n := range m.topics {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out.Topics = append(out.Topics, m.info(m.topics[n]))
		}
		m.answerDescribe(ctx, d, out)
		return
	}
	out.Topics = make([]TopicInfo, 0, len(d.Names)+len(d.IDs))
	w := newWaitAll(func() { m.answerDescribe(ctx, d, out) })
	for _, name := range d.Names {
		if t := m.topics[name]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
			continue
		}
		if err := ValidateTopicName(name); err != nil {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.InvalidTopicException.Code, ErrorMessage: err.Error()})
			continue
		}
		if !d.AutoCreate || !m.cfg.Broker.AutoCreateTopics || (m.cfg.Cluster != nil && !m.cfg.Cluster.Catalogue()) {
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.UnknownTopicOrPartition.Code})
			continue
		}
		if m.creating[name] {
			// Being created by another request: retriable, as Apache answers a topic
			// whose creation has not finished.
			out.Topics = append(out.Topics, TopicInfo{Name: name, ErrorCode: kerr.LeaderNotAvailable.Code})
			continue
		}
		i := len(out.Topics)
		out.Topics = append(out.Topics, TopicInfo{Name: name})
		w.add()
		m.create(ctx, NewTopic{Name: name, Partitions: -1, ReplicationFactor: -1}, false, func(ti TopicInfo) {
			out.Topics[i] = ti
			w.done()
		})
	}
	for _, id := range d.IDs {
		if t := m.byID[id]; t != nil {
			out.Topics = append(out.Topics, m.info(t))
		} else {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code})
		}
	}
	w.done()
}

func failed(name string, code int16, msg string) TopicInfo {
	return TopicInfo{Name: name, ErrorCode: code, ErrorMessage: msg}
}

// notWriter reports whether, in a cluster, another broker writes the catalogue: then
// a create, delete or grow is answered NOT_CONTROLLER and the client sends it to the
// controller Metadata names.
func (m *manager) notWriter() bool {
	return m.cfg.Cluster != nil && !m.cfg.Cluster.Catalogue()
}

const notControllerMsg = "This is not the correct controller for this cluster."

// topicNames lists the names of a request's topics.
func topicNames[T any](topics []T, name func(T) string) []string {
	out := make([]string, len(topics))
	for i, t := range topics {
		out[i] = name(t)
	}
	return out
}

// writerChecks starts a CreateTopics or CreatePartitions of the topics named: a broker
// that does not write the catalogue answers every one NOT_CONTROLLER (ok false); else
// count says how often each name is given (Apache fails every entry of a name given
// twice), and out is the answer to fill, an entry per name.
func (m *manager) writerChecks(names []string, reply actor.Promise) (count map[string]int, out *Created, ok bool) {
	if m.notWriter() {
		out := &Created{}
		for _, n := range names {
			out.Topics = append(out.Topics, failed(n, kerr.NotController.Code, notControllerMsg))
		}
		reply.Resolve(out)
		return nil, nil, false
	}
	count = map[string]int{}
	for _, n := range names {
		count[n]++
	}
	return count, &Created{Topics: make([]TopicInfo, len(names))}, true
}

func (m *manager) handleCreateTopics(ctx actor.Context, c *CreateTopics) {
	count, out, ok := m.writerChecks(topicNames(c.Topics, func(t NewTopic) string { return t.Name }), c.Reply)
	if !ok {
		return
	}
	w := newWaitAll(func() { c.Reply.Resolve(out) })
	for i, t := range c.Topics {
		if count[t.Name] > 1 {
			// Apache: every entry of a name given twice fails.
			out.Topics[i] = failed(t.Name, kerr.InvalidRequest.Code, "Create topics request from client contains multiple entries for the same topic")
			continue
		}
		w.add()
		m.create(ctx, t, c.ValidateOnly, func(ti TopicInfo) {
			out.Topics[i] = ti
			w.done()
		})
	}
	w.done()
}

// create checks a new topic as Apache's ReplicationControlManager.createTopic does and,
// unless validateOnly, queues its catalogue entry's write; once written, it starts the
// topic's partitions. answer gets the outcome, at once or from the Receive that applies
// the write.
func (m *manager) create(ctx actor.Context, t NewTopic, validateOnly bool, answer func(TopicInfo)) {
	ti, meta := m.checkNew(t)
	if meta == nil || validateOnly {
		answer(ti)
		return
	}
	m.creating[t.Name] = true
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error {
		err := saveMeta(fsys, root, meta)
		if err != nil {
			_ = fsys.RemoveAll(filepath.Join(root, meta.Name))
		}
		return err
	}, func(ctx actor.Context, err error) {
		delete(m.creating, meta.Name)
		if err != nil {
			m.log.Error().Err(err).Str("topic", meta.Name).Msg("topic_create_failed")
			answer(failed(meta.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
			return
		}
		m.log.Info().Str("topic", meta.Name).Int32("partitions", meta.Partitions).Str("topic_id", meta.ID).Msg("topic_created")
		if m.stopping {
			answer(m.info(&topicState{meta: meta, id: meta.id()}))
			return
		}
		st := m.add(ctx, meta)
		m.publish()
		answer(m.info(st))
	})
}

// checkNew validates a new topic; meta is nil when it fails (ti says why). For a valid
// one, ti is what validate-only answers and meta the entry to write.
func (m *manager) checkNew(t NewTopic) (TopicInfo, *topicMeta) {
	if err := ValidateTopicName(t.Name); err != nil {
		return failed(t.Name, kerr.InvalidTopicException.Code, err.Error()), nil
	}
	if m.topics[t.Name] != nil || m.creating[t.Name] {
		return failed(t.Name, kerr.TopicAlreadyExists.Code, fmt.Sprintf("Topic '%s' already exists.", t.Name)), nil
	}
	brokers := m.brokers()
	if len(t.Assignment) > 0 {
		if t.Partitions != -1 || t.ReplicationFactor != -1 {
			return failed(t.Name, kerr.InvalidRequest.Code, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."), nil
		}
		if err := checkAssignment(t.Assignment, brokers); err != nil {
			return failed(t.Name, kerr.InvalidReplicaAssignment.Code, err.Error()), nil
		}
		t.Partitions, t.ReplicationFactor = int32(len(t.Assignment)), int16(len(t.Assignment[0]))
	}
	if t.Partitions == -1 {
		t.Partitions = m.cfg.Broker.NumPartitions
	}
	if t.ReplicationFactor == -1 {
		t.ReplicationFactor = m.cfg.Broker.DefaultReplicationFactor
	}
	switch {
	case t.Partitions < 1:
		return failed(t.Name, kerr.InvalidPartitions.Code, "Number of partitions was set to an invalid non-positive value."), nil
	case t.Partitions > maxPartitionsPerTopic:
		return failed(t.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic)), nil
	case t.ReplicationFactor < 1:
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, "Replication factor must be larger than 0, or -1 to use the default value."), nil
	case int(t.ReplicationFactor) > len(brokers):
		return failed(t.Name, kerr.InvalidReplicationFactor.Code, fmt.Sprintf(
			"Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.",
			t.ReplicationFactor, t.ReplicationFactor, len(brokers))), nil
	}
	if err := validateTopicConfigs(t.Configs); err != nil {
		return failed(t.Name, kerr.InvalidConfig.Code, err.Error()), nil
	}
	meta := &topicMeta{
		Version: 1, Name: t.Name, ID: uuid.NewString(), Partitions: t.Partitions,
		ReplicationFactor: t.ReplicationFactor, LeaderEpochs: make([]int32, t.Partitions), Configs: t.Configs,
	}
	if len(meta.Configs) == 0 {
		meta.Configs = nil
	}
	ti := m.info(&topicState{meta: meta})
	ti.ID = TopicID{}
	return ti, meta
}

// checkAssignment accepts replica lists that are non-empty, of one length, without
// duplicates and naming known brokers.
func checkAssignment(a [][]int32, brokers []int32) error {
	known := map[int32]bool{}
	for _, b := range brokers {
		known[b] = true
	}
	if len(a) > maxPartitionsPerTopic {
		return fmt.Errorf("too many partitions in the assignment")
	}
	for i, replicas := range a {
		if len(replicas) == 0 || len(replicas) != len(a[0]) {
			return fmt.Errorf("partition %d: all partitions must have the same, non-zero number of replicas", i)
		}
		seen := map[int32]bool{}
		for _, r := range replicas {
			if seen[r] {
				return fmt.Errorf("partition %d: duplicate replica %d", i, r)
			}
			if !known[r] {
				return fmt.Errorf("partition %d: replica %d is not a registered broker", i, r)
			}
			seen[r] = true
		}
	}
	return nil
}

func (m *manager) handleDeleteTopics(ctx actor.Context, d *DeleteTopics) {
	out := &Deleted{}
	if m.notWriter() {
		for _, name := range d.Names {
			out.Topics = append(out.Topics, failed(name, kerr.NotController.Code, notControllerMsg))
		}
		for _, id := range d.IDs {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.NotController.Code, ErrorMessage: notControllerMsg})
		}
		d.Reply.Resolve(out)
		return
	}
	seen := map[*topicState]int{}
	type entry struct {
		t   *topicState
		out int
	}
	var doomed []entry
	unknown := func(t *topicState) bool { return t == nil || t.deleting }
	for _, name := range d.Names {
		t := m.topics[name]
		if unknown(t) {
			out.Topics = append(out.Topics, failed(name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition."))
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: name, ID: t.id})
	}
	for _, id := range d.IDs {
		t := m.byID[id]
		if unknown(t) {
			out.Topics = append(out.Topics, TopicInfo{ID: id, ErrorCode: kerr.UnknownTopicID.Code, ErrorMessage: "This server does not host this topic ID."})
			continue
		}
		seen[t]++
		doomed = append(doomed, entry{t, len(out.Topics)})
		out.Topics = append(out.Topics, TopicInfo{Name: t.meta.Name, ID: t.id})
	}
	var deleted []string
	w := newWaitAll(func() {
		if len(deleted) > 0 {
			m.log.Info().Strs("topics", deleted).Msg("topics_deleted")
			if m.cfg.TopicsDeleted != nil {
				m.cfg.TopicsDeleted(deleted)
			}
		}
		d.Reply.Resolve(out)
	})
	for _, e := range doomed {
		if seen[e.t] > 1 {
			// Apache: a topic named twice (or by name and id) is INVALID_REQUEST.
			out.Topics[e.out].ErrorCode = kerr.InvalidRequest.Code
			out.Topics[e.out].ErrorMessage = "Duplicate topic in request."
			continue
		}
		e := e
		w.add()
		m.remove(ctx, e.t, func(err error) {
			if err != nil {
				m.log.Error().Err(err).Str("topic", e.t.meta.Name).Msg("topic_delete_failed")
				out.Topics[e.out].ErrorCode = kerr.KafkaStorageError.Code
			} else {
				deleted = append(deleted, e.t.meta.Name)
			}
			w.done()
		})
	}
	w.done()
}

// filesRemoved is a deleted topic's files gone from disk (nothing waits for it).
type filesRemoved struct{}

// remove deletes a topic: it leaves the published catalogue at once (new requests get
// UNKNOWN_TOPIC_OR_PARTITION, as for a topic Apache marked for deletion), its partitions
// stop (after what their mailboxes hold), and only once every one has stopped is the
// directory moved aside, a queued catalogue write; the files are then removed in the
// background. No partition ever reads or writes a directory that was moved, and a topic
// of the same name is refused until the move is written.
func (m *manager) remove(ctx actor.Context, t *topicState, answer func(error)) {
	t.deleting = true
	m.publish()
	root, name, fsys := m.root, t.meta.Name, m.cfg.FS
	t.afterStop = func(ctx actor.Context, err error) {
		if err != nil { // the manager is stopping
			answer(err)
			return
		}
		var aside string
		m.enqueue(ctx, func() (err error) {
			aside, err = deleteTopicDir(fsys, root, name)
			return err
		}, func(ctx actor.Context, err error) {
			if err != nil {
				// The files stay where they were: serve them again.
				t.deleting, t.pids = false, nil
				if !m.stopping {
					m.spawnPartitions(ctx, t)
				}
				m.publish()
				answer(err)
				return
			}
			delete(m.topics, name)
			delete(m.byID, t.id)
			log := m.log
			actor.Background(ctx, func() any {
				if err := fsys.RemoveAll(aside); err != nil {
					log.Warn().Err(err).Str("dir", aside).Msg("topic_files_remove_failed")
				}
				return &filesRemoved{}
			})
			answer(nil)
		})
	}
	t.stopping = map[string]bool{}
	for _, pid := range t.pids {
		if pid == nil {
			continue // led by another broker
		}
		t.stopping[pid.Id] = true
		ctx.Watch(pid)
		ctx.Poison(pid)
	}
	m.partitionsStopped(ctx, t)
}

func (m *manager) handleCreatePartitions(ctx actor.Context, c *CreatePartitions) {
	count, out, ok := m.writerChecks(topicNames(c.Topics, func(t PartitionsIncrease) string { return t.Name }), c.Reply)
	if !ok {
		return
	}
	w := newWaitAll(func() { c.Reply.Resolve(out) })
	for i, inc := range c.Topics {
		t := m.topics[inc.Name]
		if t != nil && t.deleting {
			t = nil
		}
		cur := int32(0)
		if t != nil {
			cur = t.meta.Partitions
			if t.growTo > 0 {
				cur = t.growTo
			}
		}
		switch {
		case count[inc.Name] > 1:
			out.Topics[i] = failed(inc.Name, kerr.InvalidRequest.Code, "Duplicate topic in request.")
		case t == nil:
			out.Topics[i] = failed(inc.Name, kerr.UnknownTopicOrPartition.Code, "This server does not host this topic-partition.")
		case inc.Count < cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code,
				fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", cur, inc.Count))
		case inc.Count == cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Topic already has %d partitions.", cur))
		case inc.Count > maxPartitionsPerTopic:
			out.Topics[i] = failed(inc.Name, kerr.InvalidPartitions.Code, fmt.Sprintf("Number of partitions is above the limit of %d.", maxPartitionsPerTopic))
		case inc.Assignment != nil && int32(len(inc.Assignment)) != inc.Count-cur:
			out.Topics[i] = failed(inc.Name, kerr.InvalidReplicaAssignment.Code,
				fmt.Sprintf("Increasing the number of partitions by %d but %d assignments provided.", inc.Count-cur, len(inc.Assignment)))
		default:
			if inc.Assignment != nil {
				if err := checkAssignment(inc.Assignment, m.brokers()); err != nil {
					out.Topics[i] = failed(inc.Name, kerr.InvalidReplicaAssignment.Code, err.Error())
					continue
				}
			}
			if c.ValidateOnly {
				out.Topics[i] = TopicInfo{Name: inc.Name, ID: t.id}
				continue
			}
			w.add()
			m.grow(ctx, t, inc.Count, func(ti TopicInfo) {
				out.Topics[i] = ti
				w.done()
			})
		}
	}
	w.done()
}

// grow queues the write of t's catalogue entry with count partitions (built on the
// last one queued, so increases queued together add up); once written, the new
// partitions start.
func (m *manager) grow(ctx actor.Context, t *topicState, count int32, answer func(TopicInfo)) {
	base := t.latest()
	meta := *base
	meta.Partitions = count
	meta.LeaderEpochs = append(append([]int32(nil), base.LeaderEpochs...), make([]int32, count-base.Partitions)...)
	t.growTo, t.queued = count, &meta
	root, fsys := m.root, m.cfg.FS
	m.enqueue(ctx, func() error { return saveMeta(fsys, root, &meta) }, func(ctx actor.Context, err error) {
		if t.queued == &meta {
			t.growTo, t.queued = 0, nil
		}
		if err != nil {
			m.log.Error().Err(err).Str("topic", meta.Name).Msg("partitions_create_failed")
			answer(failed(meta.Name, kerr.KafkaStorageError.Code, "the topic could not be written to disk"))
			return
		}
		m.applyMeta(ctx, t, &meta)
		m.log.Info().Str("topic", meta.Name).Int32("partitions", meta.Partitions).Msg("partitions_created")
		answer(TopicInfo{Name: meta.Name, ID: t.id})
	})
}

// handleInitProducerID hands out ids from a block reserved on disk, so an id is never
// reused after a restart (Apache allocates blocks through the controller likewise).
// When the block is used up, requests wait (in order) for the next one to be written.
func (m *manager) handleInitProducerID(ctx actor.Context, r *InitProducerID) {
	if len(m.idWaiters) == 0 && m.nextProducerID < m.producerIDLimit {
		r.Reply.Resolve(m.takeProducerID())
		return
	}
	m.idWaiters = append(m.idWaiters, r.Reply)
	m.reserveIDs(ctx)
}

func (m *manager) takeProducerID() *ProducerID {
	id := m.nextProducerID
	m.nextProducerID++
	if c := m.cfg.Cluster; c != nil && c.Size > 0 {
		// Each broker its own residue class, from its own block file.
		id = id*int64(c.Size) + int64(m.cfg.NodeID)
	}
	return &ProducerID{ID: id, Epoch: 0}
}

// reserveIDs queues the write of the next block of producer ids, unless one is queued.
func (m *manager) reserveIDs(ctx actor.Context) {
	if m.reserving {
		return
	}
	m.reserving = true
	root, fsys := m.root, m.cfg.FS
	var next int64
	name := producerIDFile
	if m.cfg.Cluster != nil {
		name = producerIDFileOf(m.cfg.NodeID)
	}
	m.enqueue(ctx, func() (err error) {
		next, err = reserveProducerIDs(fsys, root, name)
		return err
	}, func(ctx actor.Context, err error) {
		m.reserving = false
		waiters := m.idWaiters
		m.idWaiters = nil
		if err != nil {
			m.log.Error().Err(err).Msg("producer_id_reserve_failed")
			for _, w := range waiters {
				w.Resolve(&ProducerID{ErrorCode: kerr.CoordinatorNotAvailable.Code, ID: -1, Epoch: -1})
			}
			return
		}
		m.nextProducerID, m.producerIDLimit = next, next+producerIDBlock
		for i, w := range waiters {
			if m.nextProducerID >= m.producerIDLimit {
				m.idWaiters = waiters[i:]
				m.reserveIDs(ctx)
				return
			}
			w.Resolve(m.takeProducerID())
		}
	})
}

// heldDescribe is a Describe whose answer waits for a partition's leader, until.
type heldDescribe struct {
	d     *Describe
	out   *Described
	until time.Time
}

// describeAgain looks at the held Describes again.
type describeAgain struct{}

// leaderRecheck is how often a held Describe looks for its partitions' leaders.
const leaderRecheck = 25 * time.Millisecond

// answerDescribe answers d with out, or, in a cluster, holds it while a partition of a
// topic it found has no leader and d.WaitLeader allows (Describe.WaitLeader).
func (m *manager) answerDescribe(ctx actor.Context, d *Describe, out *Described) {
	if m.cfg.Cluster == nil || d.WaitLeader <= 0 || m.stopping || !leaderless(out) {
		d.Reply.Resolve(out)
		return
	}
	m.held = append(m.held, heldDescribe{d: d, out: out, until: m.cfg.Now().Add(d.WaitLeader)})
	if len(m.held) == 1 {
		actor.After(ctx, leaderRecheck, &describeAgain{})
	}
}

// onDescribeAgain answers each held Describe whose partitions all have a leader now, or
// whose wait is over, with its topics as they are now; the others wait on.
func (m *manager) onDescribeAgain(ctx actor.Context) {
	now := m.cfg.Now()
	kept := m.held[:0]
	for _, h := range m.held {
		for i, ti := range h.out.Topics {
			if ti.ErrorCode != 0 {
				continue
			}
			if t := m.topics[ti.Name]; t != nil && t.id == ti.ID {
				h.out.Topics[i] = m.info(t)
			}
		}
		if leaderless(h.out) && now.Before(h.until) && !m.stopping {
			kept = append(kept, h)
			continue
		}
		h.d.Reply.Resolve(h.out)
	}
	clear(m.held[len(kept):])
	m.held = kept
	if len(m.held) > 0 {
		actor.After(ctx, leaderRecheck, &describeAgain{})
	}
}

// answerHeld answers every held Describe as it stands (the manager is stopping).
func (m *manager) answerHeld() {
	for _, h := range m.held {
		h.d.Reply.Resolve(h.out)
	}
	m.held = nil
}

// leaderless reports whether a topic found has a partition no broker leads.
func leaderless(out *Described) bool {
	for _, ti := range out.Topics {
		if ti.ErrorCode != 0 {
			continue
		}
		for _, p := range ti.Partitions {
			if p.Leader < 0 {
				return true
			}
		}
	}
	return false
}
