package offsets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"
)

// The file format, version 1: one JSON object per group.
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
// Offsets are sorted by topic and partition so that equal states make equal files. A
// string that is not valid UTF-8 (Kafka strings are bytes on the wire, and JSON would
// replace bad bytes) is written as {"base64": "..."} instead, so every id, topic and
// metadata round-trips exactly. A reader refuses any other version, unknown fields,
// duplicate partitions and trailing data: a file it does not fully understand is
// reported as corrupt, never read as empty.

const fileVersion = 1

// state is one group's offsets as the file holds them.
type state struct {
	meta    GroupMeta
	offsets map[TopicPartition]Committed
	// pending is where TxnOffsetCommit offsets will wait for their transaction's end,
	// invisible to Fetch (KIP-98; Apache keeps them in pendingTransactionalOffsetCommits).
	// Nothing fills it yet.
	pending map[int64]map[TopicPartition]Committed
}

func newState() state {
	return state{offsets: map[TopicPartition]Committed{}}
}

// clone copies s so that a batch can be applied without touching the committed state.
func (s state) clone() state {
	c := state{meta: s.meta, offsets: make(map[TopicPartition]Committed, len(s.offsets)), pending: s.pending}
	for tp, o := range s.offsets {
		c.offsets[tp] = o
	}
	return c
}

type fileV1 struct {
	Version *int         `json:"version"`
	Group   *jsonString  `json:"group"`
	Meta    fileMeta     `json:"meta"`
	Offsets []fileOffset `json:"offsets"`
}

type fileMeta struct {
	ProtocolType jsonString `json:"protocol_type"`
	Generation   int32      `json:"generation"`
	EmptySince   int64      `json:"empty_since"`
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
	v := fileVersion
	g := jsonString(group)
	f := fileV1{
		Version: &v,
		Group:   &g,
		Meta: fileMeta{
			ProtocolType: jsonString(s.meta.ProtocolType),
			Generation:   s.meta.Generation,
			EmptySince:   s.meta.EmptySince,
		},
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
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode offsets of group %q: %w", group, err)
	}
	return append(b, '\n'), nil
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
	case *f.Version != fileVersion:
		return "", state{}, fmt.Errorf("decode: version %d, this broker reads %d", *f.Version, fileVersion)
	case f.Group == nil:
		return "", state{}, errors.New("decode: no group")
	}
	s := state{
		meta: GroupMeta{
			ProtocolType: string(f.Meta.ProtocolType),
			Generation:   f.Meta.Generation,
			EmptySince:   f.Meta.EmptySince,
		},
		offsets: make(map[TopicPartition]Committed, len(f.Offsets)),
	}
	for _, o := range f.Offsets {
		tp := TopicPartition{Topic: string(o.Topic), Partition: o.Partition}
		if o.Partition < 0 {
			return "", state{}, fmt.Errorf("decode: topic %q partition %d is negative", tp.Topic, tp.Partition)
		}
		if _, dup := s.offsets[tp]; dup {
			return "", state{}, fmt.Errorf("decode: topic %q partition %d twice", tp.Topic, tp.Partition)
		}
		s.offsets[tp] = Committed{
			Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: string(o.Metadata),
			CommitTime: o.CommitTime, ExpireTime: o.ExpireTime,
		}
	}
	return string(*f.Group), s, nil
}

// readGroupID reads the group id stored in a file.
func readGroupID(fsys FS, path string) (string, error) {
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
