package offsets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"kaas/logs"
)

// A journal record is one batch of one group's changes, as the offsets actor made them
// durable. Its ops are absolute — set these offsets, remove those, replace the meta,
// forget the group — so replaying a group's records in order over its file gives the
// state the live actor had, whatever point of that sequence the file was last written
// at: a record the file already holds is set again to the same value, and every later
// record follows it.
//
//	{"group":"my-group","ops":[{"set":[{"topic":"t","partition":0,"offset":42,...}]},
//	                           {"del":[{"topic":"t","partition":1}]},
//	                           {"meta":{...},"no_create":true},{"clear":true},
//	                           {"txn_set":{"producer_id":7,"offsets":[...]}},{"txn_drop":7}]}
//
// The transactional ops keep that property: txn_set sets a producer's pending offsets,
// txn_drop forgets all of one producer's, and a commit marker is journaled as a
// txn_apply of the very offsets it applies followed by a txn_drop — never as "apply what
// is pending", which replayed over a later state would apply a later transaction's
// offsets. A set (a plain commit) and a del also forget every producer's pending offset
// of their partitions; a txn_apply sets committed offsets only.
type record struct {
	Group *jsonString `json:"group"`
	// Epoch is the group's ownership epoch its writer held (0 outside a cluster).
	Epoch uint64 `json:"epoch,omitempty"`
	Ops   []op   `json:"ops"`
}

// op is one change. Exactly one of its fields is set.
type op struct {
	// Set stores these offsets (a Commit); the group then has a file.
	Set []fileOffset `json:"set,omitempty"`
	// Del removes these partitions' offsets (OffsetDelete, DropTopics, expiry).
	Del []fileTP `json:"del,omitempty"`
	// Meta replaces the group's meta (SaveMeta), encoded as in the file; the group then
	// has a file unless NoCreate (a SaveMeta without a reply rides along with a write).
	Meta json.RawMessage `json:"meta,omitempty"`
	// Consumer changes a consumer-protocol group's state by a delta (consumer.go): the
	// meta's scalar fields, the state's header, the members set and those gone; the
	// group then has a file unless NoCreate.
	Consumer *consumerOp `json:"consumer,omitempty"`
	NoCreate bool        `json:"no_create,omitempty"`
	// Clear forgets the group: no offsets, no meta, no file (DeleteGroups, or expiry
	// emptying an Empty group).
	Clear bool `json:"clear,omitempty"`
	// TxnSet stores pending transactional offsets of one producer (TxnOffsetCommit);
	// the group then has a file.
	TxnSet *txnSet `json:"txn_set,omitempty"`
	// TxnApply sets committed offsets as a commit marker applies them (a set that leaves
	// other producers' pending offsets alone).
	TxnApply []fileOffset `json:"txn_apply,omitempty"`
	// TxnDrop forgets every pending offset of this producer id (the end of its
	// transaction: after the set that applies them on commit, alone on abort).
	TxnDrop *int64 `json:"txn_drop,omitempty"`
}

type txnSet struct {
	ProducerID int64        `json:"producer_id"`
	Offsets    []fileOffset `json:"offsets"`
}

type fileTP struct {
	Topic     jsonString `json:"topic"`
	Partition int32      `json:"partition"`
}

// recorder collects the ops of one batch while apply makes them.
type recorder struct {
	ops []op
	// metas are the meta ops' GroupMetas, in order: applyOps uses them instead of
	// decoding what encode made (megabytes for a group of 10,000 members).
	metas []GroupMeta
	cache **metaCache
	err   error
}

func (r *recorder) set(tp TopicPartition, c Committed) {
	o := fileOffset{
		Topic: jsonString(tp.Topic), Partition: tp.Partition, Offset: c.Offset,
		LeaderEpoch: c.LeaderEpoch, Metadata: jsonString(c.Metadata),
		CommitTime: c.CommitTime, ExpireTime: c.ExpireTime,
	}
	if n := len(r.ops); n > 0 && r.ops[n-1].Set != nil {
		r.ops[n-1].Set = append(r.ops[n-1].Set, o)
		return
	}
	r.ops = append(r.ops, op{Set: []fileOffset{o}})
}

func (r *recorder) del(tp TopicPartition) {
	d := fileTP{Topic: jsonString(tp.Topic), Partition: tp.Partition}
	if n := len(r.ops); n > 0 && r.ops[n-1].Del != nil {
		r.ops[n-1].Del = append(r.ops[n-1].Del, d)
		return
	}
	r.ops = append(r.ops, op{Del: []fileTP{d}})
}

func (r *recorder) meta(m GroupMeta, create bool) {
	b, err := encodeMetaCached(r.cache, m)
	if err != nil {
		r.err = errors.Join(r.err, err)
		return
	}
	r.ops = append(r.ops, op{Meta: b, NoCreate: !create})
	r.metas = append(r.metas, m)
}

func (r *recorder) consumer(m GroupMeta, d *ConsumerDelta, create bool) {
	o, err := encodeConsumerOp(m, d)
	if err != nil {
		r.err = errors.Join(r.err, err)
		return
	}
	r.ops = append(r.ops, op{Consumer: o, NoCreate: !create})
	r.metas = append(r.metas, m)
}

func (r *recorder) clear() {
	r.ops = append(r.ops, op{Clear: true})
}

func (r *recorder) txnSet(pid int64, tp TopicPartition, c Committed) {
	o := toFileOffset(tp, c)
	if n := len(r.ops); n > 0 && r.ops[n-1].TxnSet != nil && r.ops[n-1].TxnSet.ProducerID == pid {
		r.ops[n-1].TxnSet.Offsets = append(r.ops[n-1].TxnSet.Offsets, o)
		return
	}
	r.ops = append(r.ops, op{TxnSet: &txnSet{ProducerID: pid, Offsets: []fileOffset{o}}})
}

func (r *recorder) txnApply(tp TopicPartition, c Committed) {
	o := toFileOffset(tp, c)
	if n := len(r.ops); n > 0 && r.ops[n-1].TxnApply != nil {
		r.ops[n-1].TxnApply = append(r.ops[n-1].TxnApply, o)
		return
	}
	r.ops = append(r.ops, op{TxnApply: []fileOffset{o}})
}

func (r *recorder) txnDrop(pid int64) {
	r.ops = append(r.ops, op{TxnDrop: &pid})
}

// encodeRecord is the journal payload of the actor's ops: compact for a broker alone,
// the only reader of its journal; JSON in a cluster, whose peers read it when they take a
// group over and may run a version that knows only JSON (recordbin.go).
func (a *offsetsActor) encodeRecord(ops []op) ([]byte, error) {
	if a.gate == nil {
		return encodeCompactRecord(a.group, a.st.epoch, ops)
	}
	return encodeRecord(a.group, a.st.epoch, ops)
}

// encodeCompactRecord is the journal payload of group's ops in the compact format.
func encodeCompactRecord(group string, epoch uint64, ops []op) ([]byte, error) {
	b, err := appendCompactRecord(nil, group, epoch, ops)
	if err != nil {
		return nil, fmt.Errorf("encode journal record of group %q: %w", logs.ID(group), err)
	}
	return b, nil
}

// encodeRecord is the journal payload of group's ops in the JSON format.
func encodeRecord(group string, epoch uint64, ops []op) ([]byte, error) {
	g := jsonString(group)
	b, err := json.Marshal(record{Group: &g, Epoch: epoch, Ops: ops})
	if err != nil {
		return nil, fmt.Errorf("encode journal record of group %q: %w", logs.ID(group), err)
	}
	return b, nil
}

// decodeRecord parses a journal payload. Like the file reader it refuses what it does not
// fully understand.
func decodeRecord(b []byte) (string, []op, error) {
	g, _, ops, err := decodeRecordEpoch(b)
	return g, ops, err
}

// decodeRecordEpoch is decodeRecord with the record's ownership epoch. It reads both
// formats, told by the first byte.
func decodeRecordEpoch(b []byte) (string, uint64, []op, error) {
	if len(b) > 0 && b[0] == recordCompact {
		return decodeCompactRecord(b)
	}
	var r record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return "", 0, nil, fmt.Errorf("decode journal record: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", 0, nil, errors.New("decode journal record: data after the object")
	}
	if r.Group == nil {
		return "", 0, nil, errors.New("decode journal record: no group")
	}
	for i, o := range r.Ops {
		n := 0
		for _, set := range []bool{o.Set != nil, o.Del != nil, o.Meta != nil, o.Consumer != nil, o.Clear, o.TxnSet != nil, o.TxnApply != nil, o.TxnDrop != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return "", 0, nil, fmt.Errorf("decode journal record of group %q: op %d sets %d changes, not 1", logs.ID(string(*r.Group)), i, n)
		}
		// The journal never writes an empty set or del (the encoder leaves it out):
		// taken, it would make a record that encodes to one that does not decode.
		if (o.Set != nil && len(o.Set) == 0) || (o.Del != nil && len(o.Del) == 0) ||
			(o.TxnSet != nil && len(o.TxnSet.Offsets) == 0) || (o.TxnApply != nil && len(o.TxnApply) == 0) {
			return "", 0, nil, fmt.Errorf("decode journal record of group %q: op %d is empty", logs.ID(string(*r.Group)), i)
		}
	}
	return string(*r.Group), r.Epoch, r.Ops, nil
}

// replayOps applies a record's ops to a group's state as it is on disk.
func replayOps(s *state, exists *bool, ops []op) error {
	return applyOpsWith(s, exists, ops, nil, false)
}

// replayMetaOps is replayOps for a state without offsets (s.offsets nil): it makes the
// meta and whether the group exists, and checks every offset as replayOps does, without
// keeping any.
func replayMetaOps(s *state, exists *bool, ops []op) error {
	return applyOpsWith(s, exists, ops, nil, true)
}

// applyOps applies a durable batch's ops to the live state; metas are its meta ops'
// GroupMetas, in order. The ops were made by apply, so they are valid.
func applyOps(s *state, exists *bool, ops []op, metas []GroupMeta) {
	if err := applyOpsWith(s, exists, ops, metas, false); err != nil {
		panic(fmt.Errorf("apply own journal record: %w", err))
	}
}

// applyOpsWith applies ops; metas, when not nil, stand for the meta ops in order
// (otherwise each is decoded). metaOnly keeps no offsets (replayMetaOps).
func applyOpsWith(s *state, exists *bool, ops []op, metas []GroupMeta, metaOnly bool) error {
	for _, o := range ops {
		switch {
		case o.Clear:
			// A forgotten group keeps its owner's epoch.
			if metaOnly {
				*s, *exists = state{epoch: s.epoch}, false
			} else {
				*s, *exists = forgotten(*s), false
			}
		case o.Set != nil:
			for _, f := range o.Set {
				if err := f.check(); err != nil {
					return err
				}
				if metaOnly {
					continue
				}
				tp := TopicPartition{Topic: string(f.Topic), Partition: f.Partition}
				s.offsets[tp] = f.committed()
				if len(s.pending) > 0 {
					s.dropPendingTP(tp)
				}
			}
			*exists = true
		case o.TxnApply != nil:
			for _, f := range o.TxnApply {
				if err := f.check(); err != nil {
					return err
				}
				if metaOnly {
					continue
				}
				s.offsets[TopicPartition{Topic: string(f.Topic), Partition: f.Partition}] = f.committed()
			}
			*exists = true
		case o.Del != nil && metaOnly:
		case o.Del != nil:
			for _, d := range o.Del {
				tp := TopicPartition{Topic: string(d.Topic), Partition: d.Partition}
				delete(s.offsets, tp)
				s.dropPendingTP(tp)
			}
		case o.TxnSet != nil:
			for _, f := range o.TxnSet.Offsets {
				if err := f.check(); err != nil {
					return err
				}
				if metaOnly {
					continue
				}
				s.setPending(o.TxnSet.ProducerID, TopicPartition{Topic: string(f.Topic), Partition: f.Partition}, f.committed())
			}
			*exists = true
		case o.TxnDrop != nil:
			delete(s.pending, *o.TxnDrop)
		case o.Meta != nil:
			var m GroupMeta
			if metas != nil {
				m, metas = metas[0], metas[1:]
			} else {
				var err error
				if m, err = decodeMeta(o.Meta); err != nil {
					return err
				}
			}
			s.meta = m
			if !o.NoCreate {
				*exists = true
			}
		case o.Consumer != nil:
			var m GroupMeta
			if metas != nil {
				m, metas = metas[0], metas[1:]
			} else {
				var err error
				if m, err = replayConsumerOp(s.meta, o.Consumer); err != nil {
					return err
				}
			}
			s.meta = m
			if !o.NoCreate {
				*exists = true
			}
		}
	}
	return nil
}
