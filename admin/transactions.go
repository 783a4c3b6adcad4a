package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The transactions commands, after Apache's kafka-transactions.sh (KIP-664): list and
// describe ask the transaction coordinators (ListTransactions, DescribeTransactions),
// describe-producers a partition's leader (DescribeProducers), and abort writes an abort
// marker on a partition (WriteTxnMarkers to its leader), for a hanging transaction
// found with describe-producers. On kaas an abort of a transaction its coordinator holds
// Ongoing goes through that coordinator, which aborts the whole transaction and fences
// its producer (docs/transactions.md); on another broker the marker is written on the
// partition alone, as Apache's tool does.
var txnVerbs = []verb{
	{"list", "list the transactional ids and their states", listTxns},
	{"describe", "a transactional id's producer, state, timeout, start and partitions", describeTxns},
	{"describe-producers", "the producers of a partition: epoch, last sequence, the start offset of an open transaction", describeProducers},
	{"abort", "abort a partition's open transaction (by --start-offset, or --producer-id and --producer-epoch), or a transactional id's", abortTxn},
}

type listedTxnDoc struct {
	TransactionalID string `json:"transactional_id"`
	Coordinator     int32  `json:"coordinator"`
	ProducerID      int64  `json:"producer_id"`
	State           string `json:"state"`
}

func listTxns(fs *flag.FlagSet) action {
	var states, pids stringList
	fs.Var(&states, "state", "only transactions in this `state` (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence); repeatable")
	fs.Var(&pids, "producer-id", "only transactions of this producer `id`; repeatable")
	var ids []int64
	return action{
		check: func() error {
			for _, p := range pids {
				n, err := strconv.ParseInt(p, 10, 64)
				if err != nil || n < 0 {
					return fmt.Errorf("--producer-id %q: want a producer id", bounded(p))
				}
				ids = append(ids, n)
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			listed, err := c.adm.ListTransactions(ctx, ids, states)
			if err != nil && len(listed) == 0 {
				return err
			}
			if err != nil {
				c.fail("", err) // some coordinators did not answer; the others are shown
			}
			doc := struct {
				Transactions []listedTxnDoc `json:"transactions"`
			}{Transactions: []listedTxnDoc{}}
			for _, t := range listed.Sorted() {
				doc.Transactions = append(doc.Transactions, listedTxnDoc{t.TxnID, t.Coordinator, t.ProducerID, t.State})
			}
			if c.json {
				return c.document(doc)
			}
			var rows [][]string
			for _, t := range doc.Transactions {
				rows = append(rows, []string{t.TransactionalID, itoa(t.Coordinator), itoa(t.ProducerID), t.State})
			}
			c.table([]string{"TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"}, rows)
			return nil
		},
	}
}

type txnDoc struct {
	TransactionalID string     `json:"transactional_id"`
	Coordinator     int32      `json:"coordinator"`
	ProducerID      int64      `json:"producer_id"`
	ProducerEpoch   int16      `json:"producer_epoch"`
	State           string     `json:"state"`
	TimeoutMs       int32      `json:"timeout_ms"`
	StartMs         int64      `json:"start_ms"` // -1: no transaction running
	DurationMs      *int64     `json:"duration_ms"`
	Partitions      []topicDoc `json:"partitions"`
	Error           string     `json:"error,omitempty"`
}

func describeTxns(fs *flag.FlagSet) action {
	var ids stringList
	fs.Var(&ids, "transactional-id", "the transactional `id` to describe; repeatable")
	return action{
		check: func() error {
			if len(ids) == 0 {
				return errors.New("want --transactional-id")
			}
			return nil
		},
		run: func(c *cmd) error {
			ctx, cancel := c.context()
			defer cancel()
			described, err := c.adm.DescribeTransactions(ctx, ids...)
			if err != nil && len(described) == 0 {
				return err
			}
			now := time.Now().UnixMilli()
			docs := []txnDoc{}
			for _, id := range ids {
				d, ok := described[id]
				doc := txnDoc{TransactionalID: id, Partitions: []topicDoc{}}
				switch {
				case !ok:
					doc.Error = "no answer from its coordinator"
				case d.Err != nil:
					doc.Error = errText(d.Err)
				default:
					doc.Coordinator, doc.ProducerID, doc.ProducerEpoch, doc.State = d.Coordinator, d.ProducerID, d.ProducerEpoch, d.State
					doc.TimeoutMs, doc.StartMs = d.TimeoutMillis, d.StartTimestamp
					if d.StartTimestamp >= 0 {
						dur := now - d.StartTimestamp
						doc.DurationMs = &dur
					}
					for _, tp := range d.Topics.Sorted() {
						doc.Partitions = append(doc.Partitions, topicDoc{tp.Topic, tp.Partitions})
					}
				}
				if doc.Error != "" {
					c.fail(bounded(id), errors.New(doc.Error))
				}
				docs = append(docs, doc)
			}
			if c.json {
				return c.document(struct {
					Transactions []txnDoc `json:"transactions"`
				}{docs})
			}
			var rows [][]string
			for _, d := range docs {
				if d.Error != "" {
					continue
				}
				start, dur := "-", "-"
				if d.DurationMs != nil {
					start, dur = itoa(d.StartMs), itoa(*d.DurationMs)
				}
				rows = append(rows, []string{d.TransactionalID, itoa(d.Coordinator), itoa(d.ProducerID), itoa(d.ProducerEpoch),
					d.State, itoa(d.TimeoutMs), start, dur, dash(txnPartitionsText(d.Partitions))})
			}
			c.table([]string{"TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
				"START-MS", "DURATION-MS", "PARTITIONS"}, rows)
			return nil
		},
	}
}

// txnPartitionsText is a transaction's partitions as one cell: topic-p,topic-p (Apache's tool).
func txnPartitionsText(ts []topicDoc) string {
	var parts []string
	for _, t := range ts {
		for _, p := range t.Partitions {
			parts = append(parts, t.Topic+"-"+itoa(p))
		}
	}
	return strings.Join(parts, ",")
}

type producerDoc struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	Leader           int32  `json:"leader"`
	ProducerID       int64  `json:"producer_id"`
	ProducerEpoch    int16  `json:"producer_epoch"`
	LastSequence     int32  `json:"last_sequence"`
	LastTimestamp    int64  `json:"last_timestamp"`
	CoordinatorEpoch int32  `json:"coordinator_epoch"`
	TxnStartOffset   int64  `json:"txn_start_offset"` // -1: no open transaction
}

// partitionFlags are --topic and --partition, naming one partition.
type partitionFlags struct {
	topic     string
	partition int
}

func (p *partitionFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&p.topic, "topic", "", "the partition's `topic`")
	fs.IntVar(&p.partition, "partition", -1, "the partition `number`")
}

func (p *partitionFlags) check() error {
	if p.topic == "" || p.partition < 0 {
		return errors.New("want --topic and --partition")
	}
	return nil
}

func (p *partitionFlags) set() kadm.TopicsSet {
	s := kadm.TopicsSet{}
	s.Add(p.topic, int32(p.partition))
	return s
}

func (p *partitionFlags) name() string { return bounded(p.topic) + "-" + itoa(p.partition) }

// producersOf describes the producers of one partition.
func (c *cmd) producersOf(p *partitionFlags) ([]producerDoc, error) {
	ctx, cancel := c.context()
	defer cancel()
	described, err := c.adm.DescribeProducers(ctx, p.set())
	if err != nil && len(described) == 0 {
		return nil, err
	}
	dp, ok := described[p.topic].Partitions[int32(p.partition)]
	switch {
	case !ok:
		if err == nil {
			err = errors.New("no answer from its leader")
		}
		return nil, err
	case dp.Err != nil:
		return nil, withMessage(dp.Err, dp.ErrMessage)
	}
	out := []producerDoc{}
	for _, d := range dp.ActiveProducers.Sorted() {
		out = append(out, producerDoc{d.Topic, d.Partition, d.Leader, d.ProducerID, d.ProducerEpoch, d.LastSequence,
			d.LastTimestamp, d.CoordinatorEpoch, d.CurrentTxnStartOffset})
	}
	return out, nil
}

func describeProducers(fs *flag.FlagSet) action {
	var p partitionFlags
	p.declare(fs)
	return action{
		check: p.check,
		run: func(c *cmd) error {
			docs, err := c.producersOf(&p)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name(), err)
			}
			if c.json {
				return c.document(struct {
					Producers []producerDoc `json:"producers"`
				}{docs})
			}
			var rows [][]string
			for _, d := range docs {
				start := "-"
				if d.TxnStartOffset >= 0 {
					start = itoa(d.TxnStartOffset)
				}
				rows = append(rows, []string{d.Topic, itoa(d.Partition), itoa(d.ProducerID), itoa(d.ProducerEpoch),
					itoa(d.LastSequence), itoa(d.LastTimestamp), itoa(d.CoordinatorEpoch), start})
			}
			c.table([]string{"TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
				"COORDINATOR-EPOCH", "TXN-START-OFFSET"}, rows)
			return nil
		},
	}
}

type abortDoc struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int16  `json:"producer_epoch"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
}

func abortTxn(fs *flag.FlagSet) action {
	var p partitionFlags
	p.declare(fs)
	var startOffset, producerID int64
	var producerEpoch, coordEpoch int
	var txnID string
	fs.Int64Var(&startOffset, "start-offset", -1, "abort the partition's transaction that begins at this `offset` (describe-producers shows it)")
	fs.Int64Var(&producerID, "producer-id", -1, "abort this producer's transaction on the partition (with --producer-epoch)")
	fs.IntVar(&producerEpoch, "producer-epoch", -1, "the producer's `epoch` (with --producer-id)")
	fs.IntVar(&coordEpoch, "coordinator-epoch", -1, "the coordinator `epoch` the marker carries (default: the partition's, from describe-producers)")
	fs.StringVar(&txnID, "transactional-id", "", "abort this transactional `id`'s running transaction on every one of its partitions")
	return action{
		check: func() error {
			byOffset, byProducer := startOffset >= 0, producerID >= 0 || producerEpoch >= 0
			switch {
			case txnID != "" && (p.topic != "" || p.partition >= 0 || byOffset || byProducer):
				return errors.New("--transactional-id excludes --topic, --partition, --start-offset and --producer-id")
			case txnID != "":
				return nil
			case p.check() != nil:
				return errors.New("want --topic and --partition (or --transactional-id)")
			case byOffset == byProducer:
				return errors.New("want either --start-offset or --producer-id with --producer-epoch")
			case byProducer && (producerID < 0 || producerEpoch < 0 || producerEpoch > 32767):
				return errors.New("--producer-id and --producer-epoch go together")
			case coordEpoch < -1:
				return fmt.Errorf("--coordinator-epoch %d: want 0 or more", coordEpoch)
			}
			return nil
		},
		run: func(c *cmd) error {
			var markers []kadm.TxnMarkers
			coordinator := int32(-1)
			if txnID != "" {
				m, coord, err := c.txnMarker(txnID)
				if err != nil {
					return fmt.Errorf("%s: %w", bounded(txnID), err)
				}
				markers, coordinator = append(markers, m), coord
			} else {
				m := kadm.TxnMarkers{ProducerID: producerID, ProducerEpoch: int16(producerEpoch), CoordinatorEpoch: int32(coordEpoch),
					Topics: p.set()}
				if startOffset >= 0 || coordEpoch < 0 {
					producers, err := c.producersOf(&p)
					if err != nil {
						return fmt.Errorf("%s: %w", p.name(), err)
					}
					found := false
					for _, d := range producers {
						if startOffset >= 0 && d.TxnStartOffset == startOffset || startOffset < 0 && d.ProducerID == producerID {
							found = true
							if startOffset >= 0 {
								m.ProducerID, m.ProducerEpoch = d.ProducerID, d.ProducerEpoch
							}
							if coordEpoch < 0 {
								m.CoordinatorEpoch = max(d.CoordinatorEpoch, 0)
							}
						}
					}
					switch {
					case !found && startOffset >= 0:
						return fmt.Errorf("%s: no open transaction starts at offset %d", p.name(), startOffset)
					case !found:
						m.CoordinatorEpoch = 0
					}
				}
				markers, coordinator = append(markers, m), c.coordinatorOfProducer(m.ProducerID)
			}
			return c.writeAborts(markers, coordinator)
		},
	}
}

// txnMarker is the abort marker of a transactional id's running transaction: its
// producer and epoch, its partitions, and the highest coordinator epoch they know; and
// the broker that coordinates the id.
func (c *cmd) txnMarker(id string) (kadm.TxnMarkers, int32, error) {
	ctx, cancel := c.context()
	defer cancel()
	described, err := c.adm.DescribeTransactions(ctx, id)
	if err != nil && len(described) == 0 {
		return kadm.TxnMarkers{}, -1, err
	}
	d, err := described.On(id, nil)
	switch {
	case err != nil:
		return kadm.TxnMarkers{}, -1, err
	case d.Err != nil:
		return kadm.TxnMarkers{}, -1, d.Err
	case d.State != "Ongoing" || len(d.Topics) == 0:
		return kadm.TxnMarkers{}, -1, fmt.Errorf("no transaction to abort: the id is %s with %d partitions", d.State, len(d.Topics.Sorted()))
	}
	m := kadm.TxnMarkers{ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch, Topics: d.Topics}
	described2, err := c.adm.DescribeProducers(ctx, d.Topics)
	if err == nil {
		described2.EachPartition(func(dp kadm.DescribedProducersPartition) {
			for _, p := range dp.ActiveProducers {
				if p.ProducerID == d.ProducerID {
					m.CoordinatorEpoch = max(m.CoordinatorEpoch, p.CoordinatorEpoch)
				}
			}
		})
	}
	return m, d.Coordinator, nil
}

// coordinatorOfProducer is the broker whose coordinator holds producer pid's running
// transaction (ListTransactions, asked of every broker), or -1: none does, or the
// cluster cannot tell.
func (c *cmd) coordinatorOfProducer(pid int64) int32 {
	ctx, cancel := c.context()
	defer cancel()
	listed, _ := c.adm.ListTransactions(ctx, []int64{pid}, []string{"Ongoing"})
	for _, l := range listed.Sorted() {
		if l.ProducerID == pid {
			return l.Coordinator
		}
	}
	return -1
}

// writeAborts sends the abort markers and reports each partition's outcome. With the
// broker that coordinates the producer's transactional id known (coordinator >= 0), the
// markers go to it first: a kaas broker then aborts the transaction through its
// coordinator (its state and every partition of it agree, and the producer is fenced,
// wherever its partitions are led); a partition that broker does not lead and did not
// end (NOT_LEADER_OR_FOLLOWER, as Apache answers) goes to its leader, as Apache's tool
// sends every one.
func (c *cmd) writeAborts(markers []kadm.TxnMarkers, coordinator int32) error {
	ctx, cancel := c.context()
	defer cancel()
	resps := kadm.TxnMarkersResponses{}
	rest := markers
	if coordinator >= 0 {
		rest = c.abortAtCoordinator(ctx, markers, coordinator, resps)
	}
	var err error
	if len(rest) > 0 {
		var more kadm.TxnMarkersResponses
		more, err = c.adm.WriteTxnMarkers(ctx, rest...)
		if err != nil && len(more) == 0 && len(resps) == 0 {
			return err
		}
		for pid, m := range more {
			for t, tr := range m.Topics {
				for p, pr := range tr.Partitions {
					putMarkerResponse(resps, pid, t, p, pr)
				}
			}
		}
	}
	var docs []abortDoc
	for _, m := range markers {
		for _, t := range m.Topics.Sorted() {
			for _, p := range t.Partitions {
				doc := abortDoc{Topic: t.Topic, Partition: p, ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Status: "aborted"}
				r, ok := resps[m.ProducerID].Topics[t.Topic].Partitions[p]
				switch {
				case !ok:
					doc.Status, doc.Error = "failed", "no answer from its leader"
					if err != nil {
						doc.Error = errText(err)
					}
				case r.Err != nil:
					doc.Status, doc.Error = "failed", errText(r.Err)
				}
				if doc.Error != "" {
					c.fail(bounded(t.Topic)+"-"+itoa(p), errors.New(doc.Error+hint(r.Err)))
				}
				docs = append(docs, doc)
			}
		}
	}
	sort.SliceStable(docs, func(i, j int) bool {
		return docs[i].Topic < docs[j].Topic || docs[i].Topic == docs[j].Topic && docs[i].Partition < docs[j].Partition
	})
	if c.json {
		return c.document(struct {
			Partitions []abortDoc `json:"partitions"`
		}{docs})
	}
	var rows [][]string
	for _, d := range docs {
		rows = append(rows, []string{d.Topic, itoa(d.Partition), itoa(d.ProducerID), itoa(d.ProducerEpoch), d.Status})
	}
	c.table([]string{"TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "STATUS"}, rows)
	return nil
}

// abortAtCoordinator sends markers to broker coordinator, records in resps every
// partition it answered other than NOT_LEADER_OR_FOLLOWER, and returns the markers of
// the partitions left (every one when the broker could not be asked).
func (c *cmd) abortAtCoordinator(ctx context.Context, markers []kadm.TxnMarkers, coordinator int32, resps kadm.TxnMarkersResponses) []kadm.TxnMarkers {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	for _, m := range markers {
		rm := kmsg.NewWriteTxnMarkersRequestMarker()
		rm.ProducerID, rm.ProducerEpoch, rm.Committed, rm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
		for _, t := range m.Topics.Sorted() {
			rt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			rt.Topic, rt.Partitions = t.Topic, t.Partitions
			rm.Topics = append(rm.Topics, rt)
		}
		req.Markers = append(req.Markers, rm)
	}
	r, err := req.RequestWith(ctx, c.cl.Broker(int(coordinator)))
	if err != nil {
		return markers
	}
	var rest []kadm.TxnMarkers
	for _, m := range markers {
		left := kadm.TxnMarkers{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit,
			CoordinatorEpoch: m.CoordinatorEpoch, Topics: kadm.TopicsSet{}}
		answered := map[string]map[int32]int16{}
		for _, rm := range r.Markers {
			if rm.ProducerID != m.ProducerID {
				continue
			}
			for _, rt := range rm.Topics {
				for _, rp := range rt.Partitions {
					if answered[rt.Topic] == nil {
						answered[rt.Topic] = map[int32]int16{}
					}
					answered[rt.Topic][rp.Partition] = rp.ErrorCode
				}
			}
		}
		for _, t := range m.Topics.Sorted() {
			for _, p := range t.Partitions {
				code, ok := answered[t.Topic][p]
				if !ok || code == kerr.NotLeaderForPartition.Code {
					left.Topics.Add(t.Topic, p)
					continue
				}
				putMarkerResponse(resps, m.ProducerID, t.Topic, p, kadm.TxnMarkersPartitionResponse{
					NodeID: coordinator, ProducerID: m.ProducerID, Topic: t.Topic, Partition: p, Err: kerr.ErrorForCode(code)})
			}
		}
		if len(left.Topics) > 0 {
			rest = append(rest, left)
		}
	}
	return rest
}

func putMarkerResponse(resps kadm.TxnMarkersResponses, pid int64, topic string, p int32, pr kadm.TxnMarkersPartitionResponse) {
	m, ok := resps[pid]
	if !ok {
		m = kadm.TxnMarkersResponse{ProducerID: pid, Topics: kadm.TxnMarkersTopicResponses{}}
		resps[pid] = m
	}
	t, ok := m.Topics[topic]
	if !ok {
		t = kadm.TxnMarkersTopicResponse{ProducerID: pid, Topic: topic, Partitions: kadm.TxnMarkersPartitionResponses{}}
		m.Topics[topic] = t
	}
	t.Partitions[p] = pr
}

// hint explains the codes an abort may meet.
func hint(err error) string {
	switch {
	case errors.Is(err, kerr.ConcurrentTransactions):
		return " (the transaction's commit is decided and being written; it ends on its own)"
	case errors.Is(err, kerr.InvalidProducerEpoch):
		return " (the producer has a newer epoch on the partition: its transaction there is not this one)"
	case errors.Is(err, kerr.TransactionCoordinatorFenced):
		return " (the partition has seen a newer coordinator epoch: pass --coordinator-epoch)"
	}
	return ""
}
