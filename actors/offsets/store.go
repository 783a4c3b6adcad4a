package offsets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"kaas/logs"
	"kaas/storage"
)

// The file format: one JSON object per group.
//
//	{
//	  "version": 1,
//	  "group": "my-group",
//	  "meta": {"protocol_type": "consumer", "generation": 4, "empty_since": 0},
//	  "offsets": [
//	    {"topic": "t", "partition": 0, "offset": 42, "leader_epoch": -1,
//	     "metadata": "", "commit_time": 1700000000000, "expire_time": 0}
//	  ]
//	}
//
// Version 2 adds the saved generation's protocol, leader and members to "meta" (Apache's
// GroupMetadataValue, §5.1 of the reference), so that a group loads Stable with its
// members after a restart (§5.2):
//
//	"meta": {"protocol_type": "consumer", "generation": 4, "empty_since": 0,
//	         "protocol": "range", "leader": "c-1f0e...",
//	         "members": [{"member_id": "c-1f0e...", "instance_id": "", "client_id": "c",
//	                      "client_host": "/10.0.0.7", "session_timeout_ms": 45000,
//	                      "rebalance_timeout_ms": 300000,
//	                      "subscription": "<base64>", "assignment": "<base64>"}]}
//
// A group with no members is written as version 1, exactly as before, so a broker that
// reads only version 1 still reads every group without members; the reader takes both.
//
// Offsets are sorted by topic and partition so that equal states make equal files. A
// string that is not valid UTF-8 (Kafka strings are bytes on the wire, and JSON would
// replace bad bytes) is written as {"base64": "..."} instead, so every id, topic and
// metadata round-trips exactly. A reader refuses any other version, unknown fields,
// duplicate partitions or members and trailing data: a file it does not fully
// understand is reported as corrupt, never read as empty.

const (
	fileVersion        = 1 // a group without members
	fileVersionMembers = 2 // a group saved with its members
)

// state is one group's offsets as the file holds them.
type state struct {
	meta    GroupMeta
	offsets map[TopicPartition]Committed
	// pending is where TxnOffsetCommit offsets wait for their transaction's end, per
	// producer id, invisible to Fetch (KIP-447; Apache keeps them in
	// pendingTransactionalOffsets). A producer's map is never empty.
	pending map[int64]map[TopicPartition]Committed
	// partial: offsets holds only what one batch of commits set over the state it was
	// built on (overlay), not the group's whole offsets.
	partial bool
	// epoch is the group's ownership epoch in a cluster: every broker that takes the
	// group over writes its file with a higher one before serving it, and journals its
	// changes under it, so a record or file of an older owner is known for what it is
	// (0: never owned in a cluster; the field is then left out of the file).
	epoch uint64
}

func newState() state {
	return state{offsets: map[TopicPartition]Committed{}}
}

// clone copies s so that a batch can be applied without touching the committed state.
func (s state) clone() state {
	c := state{meta: s.meta, offsets: make(map[TopicPartition]Committed, len(s.offsets)), epoch: s.epoch}
	for tp, o := range s.offsets {
		c.offsets[tp] = o
	}
	if len(s.pending) > 0 {
		c.pending = make(map[int64]map[TopicPartition]Committed, len(s.pending))
		for pid, p := range s.pending {
			cp := make(map[TopicPartition]Committed, len(p))
			for tp, o := range p {
				cp[tp] = o
			}
			c.pending[pid] = cp
		}
	}
	return c
}

// pendingCount is how many transactional offsets wait in s.
func (s *state) pendingCount() int {
	n := 0
	for _, p := range s.pending {
		n += len(p)
	}
	return n
}

// hasPending says whether some producer has a pending offset for tp.
func (s *state) hasPending(tp TopicPartition) bool {
	for _, p := range s.pending {
		if _, ok := p[tp]; ok {
			return true
		}
	}
	return false
}

// setPending stores a producer's pending offset.
func (s *state) setPending(pid int64, tp TopicPartition, c Committed) {
	if s.pending == nil {
		s.pending = map[int64]map[TopicPartition]Committed{}
	}
	p := s.pending[pid]
	if p == nil {
		p = map[TopicPartition]Committed{}
		s.pending[pid] = p
	}
	p[tp] = c
}

// dropPendingTP removes every producer's pending offset for tp (a tombstone of the
// partition does in Apache: OffsetMetadataManager.replay).
func (s *state) dropPendingTP(tp TopicPartition) {
	for pid, p := range s.pending {
		delete(p, tp)
		if len(p) == 0 {
			delete(s.pending, pid)
		}
	}
}

// overlay is an empty partial state over s, for a batch of commits: they only set
// offsets, and what they answer does not depend on what s holds.
func (s state) overlay() state {
	return state{meta: s.meta, offsets: map[TopicPartition]Committed{}, pending: s.pending, partial: true, epoch: s.epoch}
}

// setAll sets over s what the partial state o set.
func (s *state) setAll(o state) {
	for tp, c := range o.offsets {
		s.offsets[tp] = c
		if len(s.pending) > 0 {
			s.dropPendingTP(tp) // as the commits' set ops do
		}
	}
}

// commitsOnly says whether every request of q is a Commit.
func commitsOnly(q []queued) bool {
	for _, r := range q {
		if _, ok := r.msg.(*Commit); !ok {
			return false
		}
	}
	return true
}

type fileV1 struct {
	Version *int         `json:"version"`
	Epoch   uint64       `json:"epoch,omitempty"`
	Group   *jsonString  `json:"group"`
	Meta    fileMeta     `json:"meta"`
	Offsets []fileOffset `json:"offsets"`
	// Pending is the transactional offsets waiting for their transaction's end, per
	// producer (left out when there are none, so such a file is as before).
	Pending []filePending `json:"pending,omitempty"`
}

// filePending is one producer's pending transactional offsets.
type filePending struct {
	ProducerID int64        `json:"producer_id"`
	Offsets    []fileOffset `json:"offsets"`
}

// fileOut is what the writer marshals: fileV1 with the meta already encoded.
type fileOut struct {
	Version int             `json:"version"`
	Group   jsonString      `json:"group"`
	Meta    json.RawMessage `json:"meta"`
	Offsets []fileOffset    `json:"offsets"`
}

type fileMeta struct {
	ProtocolType jsonString `json:"protocol_type"`
	Generation   int32      `json:"generation"`
	EmptySince   int64      `json:"empty_since"`
	// Version 2 only.
	Protocol jsonString   `json:"protocol,omitempty"`
	Leader   jsonString   `json:"leader,omitempty"`
	Members  []fileMember `json:"members,omitempty"`
	// Consumer: a consumer-protocol group's state (GroupMeta.Consumer).
	Consumer json.RawMessage `json:"consumer,omitempty"`
}

type fileMember struct {
	MemberID           jsonString `json:"member_id"`
	InstanceID         jsonString `json:"instance_id"`
	ClientID           jsonString `json:"client_id"`
	ClientHost         jsonString `json:"client_host"`
	SessionTimeoutMs   int64      `json:"session_timeout_ms"`
	RebalanceTimeoutMs int64      `json:"rebalance_timeout_ms"`
	Subscription       []byte     `json:"subscription"`
	Assignment         []byte     `json:"assignment"`
}

type fileOffset struct {
	Topic       jsonString `json:"topic"`
	Partition   int32      `json:"partition"`
	Offset      int64      `json:"offset"`
	LeaderEpoch int32      `json:"leader_epoch"`
	Metadata    jsonString `json:"metadata"`
	CommitTime  int64      `json:"commit_time"`
	ExpireTime  int64      `json:"expire_time"`
}

// jsonString is a string that survives JSON whatever its bytes.
type jsonString string

func (s jsonString) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString([]byte(s))})
}

func (s *jsonString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var v struct {
			Base64 *string `json:"base64"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if v.Base64 == nil {
			return errors.New("string object without base64")
		}
		raw, err := base64.StdEncoding.DecodeString(*v.Base64)
		if err != nil {
			return err
		}
		*s = jsonString(raw)
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = jsonString(v)
	return nil
}

// encodeFile is the file content of group's state.
func encodeFile(group string, s state) ([]byte, error) {
	meta, err := encodeMeta(s.meta)
	if err != nil {
		return nil, fmt.Errorf("encode meta of group %q: %w", logs.ID(group), err)
	}
	return encodeFileWith(group, s, meta)
}

// encodeMeta is the "meta" object of the file. A group saved with 10,000 members has a
// meta of megabytes that changes once per generation while commits rewrite the file many
// times a second, so the offsets actor keeps what this returns (metaCache).
func encodeMeta(m GroupMeta) (json.RawMessage, error) {
	m = m.whole()
	f := fileMeta{
		ProtocolType: jsonString(m.ProtocolType),
		Generation:   m.Generation,
		EmptySince:   m.EmptySince,
		Consumer:     m.Consumer,
	}
	if len(m.Members) > 0 {
		f.Protocol = jsonString(m.Protocol)
		f.Leader = jsonString(m.Leader)
		f.Members = make([]fileMember, len(m.Members))
		for i, mm := range m.Members {
			f.Members[i] = fileMember{
				MemberID: jsonString(mm.MemberID), InstanceID: jsonString(mm.InstanceID),
				ClientID: jsonString(mm.ClientID), ClientHost: jsonString(mm.ClientHost),
				SessionTimeoutMs:   mm.SessionTimeout.Milliseconds(),
				RebalanceTimeoutMs: mm.RebalanceTimeout.Milliseconds(),
				Subscription:       nonNil(mm.Subscription), Assignment: nonNil(mm.Assignment),
			}
		}
	}
	return json.Marshal(f)
}

// encodeFileWith is the file content of group's state whose meta encodes as meta.
func encodeFileWith(group string, s state, meta json.RawMessage) ([]byte, error) {
	v := fileVersion
	if len(s.meta.Members) > 0 {
		v = fileVersionMembers
	}
	f := fileOut{
		Version: v,
		Group:   jsonString(group),
		Meta:    meta,
		Offsets: make([]fileOffset, 0, len(s.offsets)),
	}
	for tp, o := range s.offsets {
		f.Offsets = append(f.Offsets, fileOffset{
			Topic: jsonString(tp.Topic), Partition: tp.Partition,
			Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: jsonString(o.Metadata),
			CommitTime: o.CommitTime, ExpireTime: o.ExpireTime,
		})
	}
	sort.Slice(f.Offsets, func(i, j int) bool {
		a, b := f.Offsets[i], f.Offsets[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	// What json.Marshal(f) makes, without its scan of the (cached, valid) meta.
	gid, err := json.Marshal(f.Group)
	if err != nil {
		return nil, fmt.Errorf("encode group id %q: %w", logs.ID(group), err)
	}
	offsets, err := json.Marshal(f.Offsets)
	if err != nil {
		return nil, fmt.Errorf("encode offsets of group %q: %w", logs.ID(group), err)
	}
	var pending []byte
	if len(s.pending) > 0 {
		if pending, err = json.Marshal(encodePending(s.pending)); err != nil {
			return nil, fmt.Errorf("encode pending offsets of group %q: %w", logs.ID(group), err)
		}
	}
	b := make([]byte, 0, len(meta)+len(offsets)+len(gid)+48)
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(f.Version), 10)
	if s.epoch > 0 {
		b = append(b, `,"epoch":`...)
		b = strconv.AppendUint(b, s.epoch, 10)
	}
	b = append(b, `,"group":`...)
	b = append(b, gid...)
	b = append(b, `,"meta":`...)
	b = append(b, meta...)
	b = append(b, `,"offsets":`...)
	b = append(b, offsets...)
	if pending != nil {
		b = append(b, `,"pending":`...)
		b = append(b, pending...)
	}
	return append(b, "}\n"...), nil
}

// encodePending lays the pending layer out as the file holds it: producers by id, each
// one's offsets by topic and partition, so equal states make equal files.
func encodePending(pending map[int64]map[TopicPartition]Committed) []filePending {
	out := make([]filePending, 0, len(pending))
	for pid, p := range pending {
		out = append(out, filePending{ProducerID: pid, Offsets: fileOffsets(p)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out
}

// fileOffsets is m as sorted file offsets.
func fileOffsets(m map[TopicPartition]Committed) []fileOffset {
	out := make([]fileOffset, 0, len(m))
	for tp, o := range m {
		out = append(out, toFileOffset(tp, o))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out
}

func toFileOffset(tp TopicPartition, o Committed) fileOffset {
	return fileOffset{
		Topic: jsonString(tp.Topic), Partition: tp.Partition,
		Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: jsonString(o.Metadata),
		CommitTime: o.CommitTime, ExpireTime: o.ExpireTime,
	}
}

func (o fileOffset) committed() Committed {
	return Committed{
		Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: string(o.Metadata),
		CommitTime: o.CommitTime, ExpireTime: o.ExpireTime,
	}
}

// metaCache keeps the encoding of the last meta written. A GroupMeta is never changed
// once sent, and every SaveMeta brings its own Members slice, so the scalar fields and
// the identity of the Members array tell whether the meta is the same.
type metaCache struct {
	meta GroupMeta
	json json.RawMessage
}

// encodeMetaCached encodes m, through the cache *c when m has members or consumer
// state (made at its first such meta): a meta without them is a few scalars, encoded
// afresh, so a group that only commits keeps no cache (and one that went empty drops it).
func encodeMetaCached(c **metaCache, m GroupMeta) (json.RawMessage, error) {
	if len(m.Members) == 0 && len(m.Consumer) == 0 && m.parts == nil {
		*c = nil
		return encodeMeta(m)
	}
	if *c == nil {
		*c = &metaCache{}
	}
	return (*c).encode(m)
}

func (c *metaCache) encode(m GroupMeta) (json.RawMessage, error) {
	if c.json != nil && sameMeta(c.meta, m) {
		return c.json, nil
	}
	b, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	c.meta, c.json = m, b
	return b, nil
}

func sameMeta(a, b GroupMeta) bool {
	return a.ProtocolType == b.ProtocolType && a.Generation == b.Generation && a.EmptySince == b.EmptySince &&
		a.Protocol == b.Protocol && a.Leader == b.Leader && len(a.Members) == len(b.Members) &&
		(len(a.Members) == 0 || &a.Members[0] == &b.Members[0]) &&
		len(a.Consumer) == len(b.Consumer) && (len(a.Consumer) == 0 || &a.Consumer[0] == &b.Consumer[0]) &&
		a.parts == b.parts
}

// decodeFile parses a file's content into its group id and state.
func decodeFile(b []byte) (string, state, error) {
	var f fileV1
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return "", state{}, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", state{}, errors.New("decode: data after the object")
	}
	switch {
	case f.Version == nil:
		return "", state{}, errors.New("decode: no version")
	case *f.Version != fileVersion && *f.Version != fileVersionMembers:
		return "", state{}, fmt.Errorf("decode: version %d, this broker reads %d and %d", *f.Version,
			fileVersion, fileVersionMembers)
	case f.Group == nil:
		return "", state{}, errors.New("decode: no group")
	case *f.Version == fileVersion && (f.Meta.Protocol != "" || f.Meta.Leader != "" || f.Meta.Members != nil):
		return "", state{}, errors.New("decode: version 1 with members")
	case *f.Version == fileVersionMembers && len(f.Meta.Members) == 0:
		return "", state{}, errors.New("decode: version 2 without members")
	case *f.Version == fileVersionMembers && f.Meta.Protocol == "":
		return "", state{}, errors.New("decode: members without a protocol")
	}
	meta, err := f.Meta.toMeta()
	if err != nil {
		return "", state{}, fmt.Errorf("decode: %w", err)
	}
	s := state{meta: meta, offsets: make(map[TopicPartition]Committed, len(f.Offsets)), epoch: f.Epoch}
	for _, o := range f.Offsets {
		tp := TopicPartition{Topic: string(o.Topic), Partition: o.Partition}
		if err := o.check(); err != nil {
			return "", state{}, fmt.Errorf("decode: %w", err)
		}
		if _, dup := s.offsets[tp]; dup {
			return "", state{}, fmt.Errorf("decode: topic %q partition %d twice", tp.Topic, tp.Partition)
		}
		s.offsets[tp] = o.committed()
	}
	for _, p := range f.Pending {
		if len(p.Offsets) == 0 {
			return "", state{}, fmt.Errorf("decode: producer %d with no pending offsets", p.ProducerID)
		}
		if _, dup := s.pending[p.ProducerID]; dup {
			return "", state{}, fmt.Errorf("decode: pending offsets of producer %d twice", p.ProducerID)
		}
		for _, o := range p.Offsets {
			if err := o.check(); err != nil {
				return "", state{}, fmt.Errorf("decode: pending: %w", err)
			}
			tp := TopicPartition{Topic: string(o.Topic), Partition: o.Partition}
			if _, dup := s.pending[p.ProducerID][tp]; dup {
				return "", state{}, fmt.Errorf("decode: pending topic %q partition %d twice", tp.Topic, tp.Partition)
			}
			s.setPending(p.ProducerID, tp, o.committed())
		}
	}
	return string(*f.Group), s, nil
}

// check refuses what the broker never writes: a negative partition, a negative commit
// time. A file or journal record that holds one was damaged or edited, and is treated as
// corrupt rather than served. The offset and leader epoch are not checked: any int64 and
// int32 is a value a client may commit and Apache stores (kafkajs commits -2 for
// "earliest"), so only the structure of the file, and the journal frame's checksum, tell
// damage from data.
func (o fileOffset) check() error {
	switch {
	case o.Partition < 0:
		return fmt.Errorf("topic %q partition %d is negative", o.Topic, o.Partition)
	case o.CommitTime < 0:
		return fmt.Errorf("topic %q partition %d: commit time %d is negative", o.Topic, o.Partition, o.CommitTime)
	}
	return nil
}

// toMeta checks a file's meta and makes it a GroupMeta.
func (f fileMeta) toMeta() (GroupMeta, error) {
	if f.Generation < 0 || f.EmptySince < 0 {
		return GroupMeta{}, fmt.Errorf("generation %d, empty since %d: negative", f.Generation, f.EmptySince)
	}
	m := GroupMeta{
		ProtocolType: string(f.ProtocolType),
		Generation:   f.Generation,
		EmptySince:   f.EmptySince,
		Protocol:     string(f.Protocol),
		Leader:       string(f.Leader),
	}
	if len(f.Consumer) > 0 {
		m.Consumer = append(json.RawMessage(nil), f.Consumer...)
	}
	n := len(f.Members)
	if n == 0 {
		return m, nil
	}
	m.Members = make([]MemberMeta, n)
	seen := make(map[jsonString]bool, n)
	instances := map[jsonString]bool{}
	for i, mm := range f.Members {
		if seen[mm.MemberID] {
			return GroupMeta{}, fmt.Errorf("member %q twice", mm.MemberID)
		}
		seen[mm.MemberID] = true
		if mm.InstanceID != "" {
			if instances[mm.InstanceID] {
				return GroupMeta{}, fmt.Errorf("instance %q twice", mm.InstanceID)
			}
			instances[mm.InstanceID] = true
		}
		if mm.SessionTimeoutMs <= 0 || mm.RebalanceTimeoutMs <= 0 {
			return GroupMeta{}, fmt.Errorf("member %q without timeouts", mm.MemberID)
		}
		m.Members[i] = MemberMeta{
			MemberID: string(mm.MemberID), InstanceID: string(mm.InstanceID),
			ClientID: string(mm.ClientID), ClientHost: string(mm.ClientHost),
			SessionTimeout:   time.Duration(mm.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(mm.RebalanceTimeoutMs) * time.Millisecond,
			Subscription:     nonNil(mm.Subscription), Assignment: nonNil(mm.Assignment),
		}
	}
	if !seen[f.Leader] {
		return GroupMeta{}, fmt.Errorf("leader %q is not a member", f.Leader)
	}
	if f.Protocol == "" {
		return GroupMeta{}, errors.New("members without a protocol")
	}
	return m, nil
}

// decodeMeta parses a meta as encodeMeta makes it (a journal record's meta op).
func decodeMeta(b []byte) (GroupMeta, error) {
	var f fileMeta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return GroupMeta{}, fmt.Errorf("decode meta: %w", err)
	}
	m, err := f.toMeta()
	if err != nil {
		return GroupMeta{}, fmt.Errorf("decode meta: %w", err)
	}
	return m, nil
}

// nonNil makes a missing byte string empty: JSON null and "" both read as no bytes, and
// an empty assignment is written as "" rather than null.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// readGroupID reads the group id stored in a file.
func readGroupID(fsys storage.FS, path string) (string, error) {
	b, err := fsys.ReadFile(path)
	if err != nil {
		return "", err
	}
	id, _, err := decodeFile(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}
