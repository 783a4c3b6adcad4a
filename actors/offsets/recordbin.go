package offsets

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"kaas/logs"
)

// The compact record format. A record's first byte tells its format: '{' is the JSON of
// record (what older versions wrote, and what this one still writes in a cluster, whose
// peers may run an older version), recordCompact this binary form, which a broker alone
// writes: decoding it costs a small part of what the JSON does, and a start replays
// every record of the journal. A version that does not know the format refuses the
// record (its JSON decoder fails on the first byte), and with it the start, as for any
// record it does not understand: it never serves without it.
//
//	record   = 0x01 | str group | uvarint epoch | uvarint len(ops) | op...
//	op       = kind byte (set 1, del 2, meta 3, consumer 4, clear 5, txn_set 6,
//	           txn_apply 7, txn_drop 8) | body
//	  set, txn_apply:  uvarint n | offset * n          (n > 0)
//	  del:             uvarint n | (str topic | varint partition) * n   (n > 0)
//	  meta:            flag byte (1: no_create) | str JSON (the meta)
//	  consumer:        str JSON (the op, {"consumer":{...},"no_create":...}, as in JSON)
//	  clear:           nothing
//	  txn_set:         varint producer id | uvarint n | offset * n      (n > 0)
//	  txn_drop:        varint producer id
//	offset   = str topic | varint partition | varint offset | varint leader epoch |
//	           str metadata | varint commit time | varint expire time
//	str      = uvarint length | bytes
//
// varint is zigzag (encoding/binary). Nothing may follow the last op.
const recordCompact = 0x01

// The op kinds of the compact format.
const (
	opSet byte = iota + 1
	opDel
	opMeta
	opConsumer
	opClear
	opTxnSet
	opTxnApply
	opTxnDrop
)

// appendCompactRecord appends the compact encoding of group's ops to b.
func appendCompactRecord(b []byte, group string, epoch uint64, ops []op) ([]byte, error) {
	b = append(b, recordCompact)
	b = appendStr(b, group)
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, o := range ops {
		switch {
		case o.Set != nil:
			b = appendOffsets(append(b, opSet), o.Set)
		case o.Del != nil:
			b = binary.AppendUvarint(append(b, opDel), uint64(len(o.Del)))
			for _, d := range o.Del {
				b = appendStr(b, string(d.Topic))
				b = binary.AppendVarint(b, int64(d.Partition))
			}
		case o.Meta != nil:
			b = append(b, opMeta, flag(o.NoCreate))
			b = appendStr(b, string(o.Meta))
		case o.Consumer != nil:
			// A delta of JSON values, and rare (a consumer-protocol group's change of
			// members): the op's JSON, the same text as in a JSON record.
			j, err := json.Marshal(op{Consumer: o.Consumer, NoCreate: o.NoCreate})
			if err != nil {
				return nil, fmt.Errorf("encode consumer op: %w", err)
			}
			b = append(b, opConsumer)
			b = appendStr(b, string(j))
		case o.Clear:
			b = append(b, opClear)
		case o.TxnSet != nil:
			b = binary.AppendVarint(append(b, opTxnSet), o.TxnSet.ProducerID)
			b = appendOffsets(b, o.TxnSet.Offsets)
		case o.TxnApply != nil:
			b = appendOffsets(append(b, opTxnApply), o.TxnApply)
		case o.TxnDrop != nil:
			b = binary.AppendVarint(append(b, opTxnDrop), *o.TxnDrop)
		default:
			return nil, errors.New("encode journal record: an op with no change")
		}
	}
	return b, nil
}

func flag(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendOffsets(b []byte, fs []fileOffset) []byte {
	b = binary.AppendUvarint(b, uint64(len(fs)))
	for _, f := range fs {
		b = appendStr(b, string(f.Topic))
		b = binary.AppendVarint(b, int64(f.Partition))
		b = binary.AppendVarint(b, f.Offset)
		b = binary.AppendVarint(b, int64(f.LeaderEpoch))
		b = appendStr(b, string(f.Metadata))
		b = binary.AppendVarint(b, f.CommitTime)
		b = binary.AppendVarint(b, f.ExpireTime)
	}
	return b
}

// compactReader reads a compact record; the first error sticks and every later read
// gives zero values.
type compactReader struct {
	b     []byte
	err   error
	topic string // the last topic read: a batch names the same topic again and again
}

func (r *compactReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad %s", what)
	}
	r.b = nil
}

func (r *compactReader) byte(what string) byte {
	if len(r.b) == 0 {
		r.fail(what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *compactReader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *compactReader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *compactReader) int32(what string) int32 {
	v := r.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(what)
		return 0
	}
	return int32(v)
}

func (r *compactReader) bytes(what string) []byte {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *compactReader) str(what string) string {
	return string(r.bytes(what))
}

func (r *compactReader) topicName() jsonString {
	b := r.bytes("topic")
	if string(b) != r.topic { // no allocation for the comparison
		r.topic = string(b)
	}
	return jsonString(r.topic)
}

// count reads a count of items of at least min bytes each: more than the bytes left
// could hold is damage (and would make a huge allocation).
func (r *compactReader) count(what string, min int) int {
	n := r.uvarint(what)
	if n == 0 || n > uint64(len(r.b)/min) {
		r.fail(what)
		return 0
	}
	return int(n)
}

func (r *compactReader) offsets() []fileOffset {
	n := r.count("offset count", 7) // the smallest offset takes 7 bytes
	if r.err != nil {
		return nil
	}
	fs := make([]fileOffset, n)
	for i := range fs {
		f := &fs[i]
		f.Topic = r.topicName()
		f.Partition = r.int32("partition")
		f.Offset = r.varint("offset")
		f.LeaderEpoch = r.int32("leader epoch")
		f.Metadata = jsonString(r.str("metadata"))
		f.CommitTime = r.varint("commit time")
		f.ExpireTime = r.varint("expire time")
	}
	return fs
}

func (r *compactReader) noCreate() bool {
	switch r.byte("flags") {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("flags")
	return false
}

// decodeCompactRecord decodes a record of the compact format (b[0] is recordCompact).
// Like the JSON decoder it refuses anything it does not fully understand.
func decodeCompactRecord(b []byte) (string, uint64, []op, error) {
	r := &compactReader{b: b[1:]}
	group := r.str("group")
	epoch := r.uvarint("epoch")
	n := r.uvarint("op count")
	if n > uint64(len(r.b)) { // each op takes a byte at least
		r.fail("op count")
		n = 0
	}
	var ops []op
	if r.err == nil {
		ops = make([]op, n)
	}
	for i := 0; i < int(n) && r.err == nil; i++ {
		o := &ops[i]
		switch kind := r.byte("op kind"); kind {
		case opSet:
			o.Set = r.offsets()
		case opTxnApply:
			o.TxnApply = r.offsets()
		case opDel:
			m := r.count("del count", 2)
			if r.err != nil {
				break
			}
			o.Del = make([]fileTP, m)
			for k := range o.Del {
				o.Del[k] = fileTP{Topic: r.topicName(), Partition: r.int32("partition")}
			}
		case opMeta:
			o.NoCreate = r.noCreate()
			m := r.bytes("meta")
			if r.err == nil && !json.Valid(m) {
				r.fail("meta")
			}
			o.Meta = json.RawMessage(bytes.Clone(m))
		case opConsumer:
			j := r.bytes("consumer op")
			if r.err != nil {
				break
			}
			var c op
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				r.fail("consumer op")
				break
			}
			if _, err := dec.Token(); err != io.EOF {
				r.fail("consumer op")
				break
			}
			if c.Consumer == nil || c.Set != nil || c.Del != nil || c.Meta != nil || c.Clear ||
				c.TxnSet != nil || c.TxnApply != nil || c.TxnDrop != nil {
				r.fail("consumer op")
				break
			}
			*o = c
		case opClear:
			o.Clear = true
		case opTxnSet:
			pid := r.varint("producer id")
			o.TxnSet = &txnSet{ProducerID: pid, Offsets: r.offsets()}
		case opTxnDrop:
			pid := r.varint("producer id")
			o.TxnDrop = &pid
		default:
			r.err = fmt.Errorf("unknown op kind %d", kind)
		}
		if r.err != nil {
			r.err = fmt.Errorf("op %d: %w", i, r.err)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = errors.New("data after the last op")
	}
	if r.err != nil {
		if group != "" {
			return "", 0, nil, fmt.Errorf("decode journal record of group %q: %w", logs.ID(group), r.err)
		}
		return "", 0, nil, fmt.Errorf("decode journal record: %w", r.err)
	}
	return group, epoch, ops, nil
}
