package offsets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// A consumer-protocol group's state (GroupMeta.Consumer) is one JSON object that
// actors/group encodes: its own fields and a "members" array of one object per member.
// A group of 1,000 members changes a few members per heartbeat, so besides a whole meta
// (SaveMeta.Meta) the group may send a delta (SaveMeta.Consumer): the object's fields
// but members (the header, small, replaced whole), the members added or changed (their
// objects, replaced whole) and the members gone. The journal records the delta as it
// came (a "consumer" op), so a heartbeat writes what changed, not the group; the state
// kept here, and the file rewritten behind the journal, hold the whole object, in the
// very format a whole meta has (members sorted by id): a file reads the same whichever
// way its state was saved, and a file written before deltas existed loads as it is.

// ConsumerDelta changes a consumer-protocol group's state by parts. Treat it as
// immutable once sent.
type ConsumerDelta struct {
	// Header: the state's fields but "members", as a JSON object; replaces the previous.
	Header json.RawMessage
	// Set: member id → the member's JSON object, added or replacing the previous one.
	Set map[string]json.RawMessage
	// Del: the members gone.
	Del []string
}

// consumerParts is a consumer state split into its header and members (immutable: a
// delta makes a new one).
type consumerParts struct {
	header  json.RawMessage
	members map[string]json.RawMessage
	whole   json.RawMessage // blob(), once asked for
}

// consumerOp is a delta as the journal records it, with the meta's scalar fields.
type consumerOp struct {
	Meta   json.RawMessage            `json:"meta"`
	Header json.RawMessage            `json:"header"`
	Set    map[string]json.RawMessage `json:"set,omitempty"`
	Del    []jsonString               `json:"del,omitempty"`
}

// splitConsumer splits a whole consumer state into parts; an empty one has no members.
func splitConsumer(blob json.RawMessage) (*consumerParts, error) {
	p := &consumerParts{header: json.RawMessage(`{}`), members: map[string]json.RawMessage{}}
	if len(blob) == 0 {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(blob, &fields); err != nil {
		return nil, fmt.Errorf("decode consumer state: %w", err)
	}
	var members []json.RawMessage
	if raw, ok := fields["members"]; ok {
		if err := json.Unmarshal(raw, &members); err != nil {
			return nil, fmt.Errorf("decode consumer state members: %w", err)
		}
		delete(fields, "members")
	}
	h, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode consumer state header: %w", err)
	}
	p.header = h
	for i, m := range members {
		var id struct {
			ID *string `json:"member_id"`
		}
		if err := json.Unmarshal(m, &id); err != nil || id.ID == nil {
			return nil, fmt.Errorf("consumer state member %d has no member_id", i)
		}
		if _, dup := p.members[*id.ID]; dup {
			return nil, fmt.Errorf("consumer state member %q twice", *id.ID)
		}
		p.members[*id.ID] = m
	}
	return p, nil
}

// apply is p with d applied (p is left as it is).
func (p *consumerParts) apply(d *ConsumerDelta) *consumerParts {
	n := &consumerParts{header: d.Header, members: make(map[string]json.RawMessage, len(p.members)+len(d.Set))}
	maps.Copy(n.members, p.members)
	for _, id := range d.Del {
		delete(n.members, id)
	}
	maps.Copy(n.members, d.Set)
	return n
}

// blob is the whole state: the header's fields, then "members" sorted by id. It is made
// only when asked for (a file write, a Status), not with every delta.
func (p *consumerParts) blob() json.RawMessage {
	if p.whole == nil {
		p.whole = p.assemble()
	}
	return p.whole
}

func (p *consumerParts) assemble() json.RawMessage {
	ids := slices.Sorted(maps.Keys(p.members))
	size := len(p.header) + 16
	for _, id := range ids {
		size += len(p.members[id]) + 1
	}
	var b bytes.Buffer
	b.Grow(size)
	h := bytes.TrimSpace(p.header)
	b.Write(h[:len(h)-1]) // without its closing brace
	if len(bytes.TrimSpace(h[1:len(h)-1])) > 0 {
		b.WriteByte(',')
	}
	b.WriteString(`"members":[`)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p.members[id])
	}
	b.WriteString("]}")
	return b.Bytes()
}

// checkDelta refuses a delta that would not make a valid state.
func checkDelta(d *ConsumerDelta) error {
	h := bytes.TrimSpace(d.Header)
	if len(h) < 2 || h[0] != '{' || h[len(h)-1] != '}' || !json.Valid(h) {
		return errors.New("consumer delta: header is not a JSON object")
	}
	for id, m := range d.Set {
		if !json.Valid(m) {
			return fmt.Errorf("consumer delta: member %q is not JSON", id)
		}
	}
	return nil
}

// withConsumerDelta is meta (the scalar fields) carrying prev's consumer state with d
// applied.
func withConsumerDelta(prev GroupMeta, meta GroupMeta, d *ConsumerDelta) (GroupMeta, error) {
	parts := prev.parts
	if parts == nil {
		var err error
		if parts, err = splitConsumer(prev.Consumer); err != nil {
			return GroupMeta{}, err
		}
	}
	parts = parts.apply(d)
	meta.Members, meta.Protocol, meta.Leader = nil, "", ""
	meta.parts, meta.Consumer = parts, nil
	return meta, nil
}

// whole is m with its consumer state whole in Consumer (a state changed by deltas keeps
// it by parts until then).
func (m GroupMeta) whole() GroupMeta {
	if m.parts != nil && m.Consumer == nil {
		m.Consumer = m.parts.blob()
	}
	return m
}

// encodeConsumerOp is the journal form of a delta saved with meta's scalar fields.
func encodeConsumerOp(meta GroupMeta, d *ConsumerDelta) (*consumerOp, error) {
	m, err := encodeMeta(GroupMeta{ProtocolType: meta.ProtocolType, Generation: meta.Generation, EmptySince: meta.EmptySince})
	if err != nil {
		return nil, err
	}
	o := &consumerOp{Meta: m, Header: d.Header, Set: d.Set}
	for _, id := range d.Del {
		o.Del = append(o.Del, jsonString(id))
	}
	return o, nil
}

// replayConsumerOp applies a journaled delta to prev.
func replayConsumerOp(prev GroupMeta, o *consumerOp) (GroupMeta, error) {
	m, err := decodeMeta(o.Meta)
	if err != nil {
		return GroupMeta{}, err
	}
	if len(m.Members) > 0 || len(m.Consumer) > 0 {
		return GroupMeta{}, errors.New("consumer delta: its meta holds members")
	}
	d := &ConsumerDelta{Header: o.Header, Set: o.Set}
	for _, id := range o.Del {
		d.Del = append(d.Del, string(id))
	}
	if err := checkDelta(d); err != nil {
		return GroupMeta{}, err
	}
	return withConsumerDelta(prev, m, d)
}
