package group

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"kaas/actors/actor"
	"kaas/actors/offsets"
)

// A consumer-protocol group's state is durable the way a classic group's generation
// is: the group file's meta (offsets.GroupMeta.Consumer, written through the offsets
// journal before the heartbeat that changed it is answered). It holds the group epoch,
// the target assignment and its epoch, and every member with its epoch, previous epoch,
// state, subscription, assignor, rebalance timeout, assigned and revoking partitions and
// the epochs they were given at. Sessions are not: after a load every member's session
// starts afresh, so members that keep heartbeating carry on at their epochs and the others
// expire and are fenced (as Apache does after a coordinator load).

// savedConsumer is the JSON form (version 1).
//
// The offsets actor keeps it by parts (offsets.ConsumerDelta): the fields but members
// (savedHeader) and one record per member. A save writes the whole state the first time
// after the group is made or loaded, after a failed write, and while classic members
// are in the group; otherwise it writes a delta: the header and the records of the
// members that changed (consumerGroup.touched) or are gone. The file, rewritten behind
// the journal, always holds the whole state in this form.
type savedConsumer struct {
	Version     int   `json:"version"`
	Epoch       int32 `json:"group_epoch"`
	TargetEpoch int32 `json:"target_epoch"`
	// Topics: the subscribed topics' partition counts the target was computed with.
	Topics  map[string]int32 `json:"topic_partitions"`
	Members []savedMember    `json:"members"`
}

type savedMember struct {
	ID                 string             `json:"member_id"`
	InstanceID         string             `json:"instance_id,omitempty"`
	RackID             string             `json:"rack_id,omitempty"`
	ClientID           string             `json:"client_id"`
	ClientHost         string             `json:"client_host"`
	Epoch              int32              `json:"member_epoch"`
	PrevEpoch          int32              `json:"previous_member_epoch"`
	State              string             `json:"state"`
	RebalanceTimeoutMs int64              `json:"rebalance_timeout_ms"`
	Subscribed         []string           `json:"subscribed_topics"`
	Assignor           string             `json:"server_assignor,omitempty"`
	Regex              string             `json:"subscribed_topic_regex,omitempty"`
	Resolved           []string           `json:"regex_topics,omitempty"`
	Assigned           assignment         `json:"assigned"`
	Revoking           assignment         `json:"revoking,omitempty"`
	Target             assignment         `json:"target"`
	Since              map[string][]int32 `json:"assigned_epochs,omitempty"` // topic → partition, epoch pairs
	// Classic: a member speaking the classic protocol (version 2).
	Classic *savedClassic `json:"classic,omitempty"`
}

// savedClassic is a classic member's session timeout and protocols, in its preference
// order (metadata as base64).
type savedClassic struct {
	SessionTimeoutMs int64           `json:"session_timeout_ms"`
	Protocols        []savedProtocol `json:"protocols"`
}

type savedProtocol struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata"`
}

// savedConsumerVersion is written for a group of consumer-protocol members only; a
// group with classic members (a mixed group) is written as version 2, which a broker
// without online migration refuses rather than mistaking them for consumer-protocol
// members.
const (
	savedConsumerVersion = 1
	savedMixedVersion    = 2
)

// savedHeader is savedConsumer without its members: what a delta carries whole.
type savedHeader struct {
	Version     int              `json:"version"`
	Epoch       int32            `json:"group_epoch"`
	TargetEpoch int32            `json:"target_epoch"`
	Topics      map[string]int32 `json:"topic_partitions"`
}

// consumerHeader is the state's header as savedConsumer encodes it.
func (g *groupActor) consumerHeader() savedHeader {
	cg := g.cg
	h := savedHeader{Version: savedConsumerVersion, Epoch: cg.epoch, TargetEpoch: cg.targetEpoch, Topics: cg.topicParts}
	for _, m := range cg.members {
		if m.classic != nil {
			h.Version = savedMixedVersion
			break
		}
	}
	return h
}

// savedMemberOf is m's record.
func (g *groupActor) savedMemberOf(m *cMember) savedMember {
	sm := savedMember{
		ID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
		Epoch: m.epoch, PrevEpoch: m.prevEpoch, State: m.state.String(),
		RebalanceTimeoutMs: m.rebalanceTimeout.Milliseconds(), Subscribed: m.subscribed, Assignor: m.assignor,
		Regex: m.regex, Resolved: m.resolved,
		Assigned: m.assigned, Revoking: m.revoking, Target: g.cg.target[m.id],
	}
	if sm.Subscribed == nil {
		sm.Subscribed = []string{}
	}
	if c := m.classic; c != nil {
		sm.Classic = &savedClassic{SessionTimeoutMs: c.sessionTimeout.Milliseconds()}
		for _, p := range c.protocols {
			sm.Classic.Protocols = append(sm.Classic.Protocols, savedProtocol{Name: p.Name, Metadata: p.Metadata})
		}
	}
	if sm.Target == nil {
		sm.Target = assignment{}
	}
	if len(m.since) > 0 {
		sm.Since = map[string][]int32{}
		m.assigned.each(func(t string, p int32) {
			if e, ok := m.since[topicPartition{t, p}]; ok {
				sm.Since[t] = append(sm.Since[t], p, e)
			}
		})
		m.revoking.each(func(t string, p int32) {
			if e, ok := m.since[topicPartition{t, p}]; ok {
				sm.Since[t] = append(sm.Since[t], p, e)
			}
		})
	}
	return sm
}

// consumerBlob is the whole state (savedConsumer), members sorted by id.
func (g *groupActor) consumerBlob() (json.RawMessage, error) {
	cg := g.cg
	h := g.consumerHeader()
	s := savedConsumer{Version: h.Version, Epoch: h.Epoch, TargetEpoch: h.TargetEpoch, Topics: h.Topics,
		Members: make([]savedMember, 0, len(cg.members))}
	ids := make([]string, 0, len(cg.members))
	for id := range cg.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.Members = append(s.Members, g.savedMemberOf(cg.members[id]))
	}
	return json.Marshal(s)
}

// consumerDelta is what changed since the last save: the header, the touched members'
// records and the touched members that are gone.
func (g *groupActor) consumerDelta() (*offsets.ConsumerDelta, error) {
	cg := g.cg
	h, err := json.Marshal(g.consumerHeader())
	if err != nil {
		return nil, err
	}
	d := &offsets.ConsumerDelta{Header: h, Set: make(map[string]json.RawMessage, len(cg.touched))}
	for id := range cg.touched {
		m := cg.members[id]
		if m == nil {
			d.Del = append(d.Del, id)
			continue
		}
		if d.Set[id], err = json.Marshal(g.savedMemberOf(m)); err != nil {
			return nil, err
		}
	}
	sort.Strings(d.Del)
	return d, nil
}

// saveWaiter is what waits for the save of the group's state: the request to answer
// with an error should the group stop first, and what to run with the write's code.
type saveWaiter struct {
	client Request
	then   func(code int16)
}

// checkConsumerDeltas, when set (tests), sees every save before it is sent.
var checkConsumerDeltas func(g *groupActor, meta offsets.GroupMeta, delta *offsets.ConsumerDelta)

// saveConsumer has the group's state written to its file through the offsets actor;
// then runs with 0 once it is durable, or the write's code. One save is in flight at a
// time: what changes meanwhile is written by the next one, with every waiter that came
// in between, so a burst of heartbeats in a big group costs one encoding and one
// journal write per round, not one per heartbeat. client, if set, is answered with an
// error should the group stop first.
func (g *groupActor) saveConsumer(ctx actor.Context, client Request, then func(code int16)) {
	cg := g.cg
	if cg == nil {
		g.publishConsumer()
		then(0)
		return
	}
	cg.waiting = append(cg.waiting, saveWaiter{client: client, then: then})
	if !cg.saving {
		g.flushConsumer(ctx)
	}
}

// flushConsumer writes the state as it is now for the waiters so far.
func (g *groupActor) flushConsumer(ctx actor.Context) {
	cg := g.cg
	batch := cg.waiting
	cg.waiting, cg.inflight = nil, batch
	cg.dirty, cg.saving = false, true
	// The gauges follow the state once per save, not per change: what changes while a
	// save is in flight is published with the next.
	g.publishConsumer()
	g.generation = cg.epoch
	meta := offsets.GroupMeta{ProtocolType: consumerProtocol, Generation: cg.epoch}
	if len(cg.members) == 0 {
		meta.EmptySince = cg.emptySince.UnixMilli()
	}
	var delta *offsets.ConsumerDelta
	var err error
	if cg.full {
		meta.Consumer, err = g.consumerBlob()
	} else {
		delta, err = g.consumerDelta()
	}
	if err != nil {
		panic(fmt.Errorf("group %q: encode consumer state: %w", g.id, err)) // a broken invariant
	}
	cg.full, cg.touched = false, map[string]bool{}
	if checkConsumerDeltas != nil {
		checkConsumerDeltas(g, meta, delta)
	}
	g.ask(ctx, nil, func(p actor.Promise) any { return &offsets.SaveMeta{Meta: meta, Consumer: delta, Reply: p} }, func(v any) {
		code := notAvailable
		if r, ok := v.(*offsets.Result); ok {
			code = r.ErrorCode
		}
		if g.cg != cg {
			return // the group was reset meanwhile; shutdownConsumer answered the waiters
		}
		cg.saving, cg.inflight = false, nil
		if code != 0 {
			// What the file holds is not known to be what the deltas were built on: the
			// next heartbeat saves, and writes the whole state (a retry that changes
			// nothing is not answered before what it was told is durable).
			cg.full, cg.dirty = true, true
		}
		for _, w := range batch {
			if w.client != nil {
				actor.Handling(ctx, w.client)
			}
			w.then(code)
		}
		if len(cg.waiting) > 0 {
			g.flushConsumer(ctx)
		}
	})
}

// loadConsumer brings a consumer-protocol group back from its file: every member at its
// epoch with its assignment, on a fresh session timer, and its rebalance timer again if
// it was revoking.
func (g *groupActor) loadConsumer(ctx actor.Context, meta offsets.GroupMeta) error {
	var s savedConsumer
	var err error
	if err = json.Unmarshal(meta.Consumer, &s); err != nil {
		return fmt.Errorf("decode consumer state: %w", err)
	}
	if s.Version != savedConsumerVersion && s.Version != savedMixedVersion {
		return fmt.Errorf("consumer state version %d, this broker reads %d and %d", s.Version, savedConsumerVersion, savedMixedVersion)
	}
	cg := newConsumerGroup()
	cg.epoch, cg.targetEpoch = s.Epoch, s.TargetEpoch
	if meta.EmptySince > 0 {
		cg.emptySince = time.UnixMilli(meta.EmptySince)
	}
	g.cg = cg
	now := time.Now()
	for _, sm := range s.Members {
		m := &cMember{
			id: sm.ID, instanceID: sm.InstanceID, rackID: sm.RackID, clientID: sm.ClientID, clientHost: sm.ClientHost,
			epoch: sm.Epoch, prevEpoch: sm.PrevEpoch, rebalanceTimeout: time.Duration(sm.RebalanceTimeoutMs) * time.Millisecond,
			subscribed: sm.Subscribed, assignor: sm.Assignor, assigned: orEmptyAssignment(sm.Assigned),
			regex: sm.Regex, resolved: sm.Resolved,
			revoking: orEmptyAssignment(sm.Revoking), since: map[topicPartition]int32{},
		}
		if sc := sm.Classic; sc != nil {
			if sc.SessionTimeoutMs <= 0 || len(sc.Protocols) == 0 {
				return fmt.Errorf("member %q: classic member without session timeout or protocols", sm.ID)
			}
			m.classic = &classicMember{sessionTimeout: time.Duration(sc.SessionTimeoutMs) * time.Millisecond}
			for _, p := range sc.Protocols {
				m.classic.protocols = append(m.classic.protocols, Protocol{Name: p.Name, Metadata: p.Metadata})
			}
		}
		m.deadline = now.Add(g.sessionTimeoutOf(m))
		switch sm.State {
		case memberUnrevoked.String():
			m.state = memberUnrevoked
		case memberUnreleased.String():
			m.state = memberUnreleased
		}
		for t, pe := range sm.Since {
			for i := 0; i+1 < len(pe); i += 2 {
				m.since[topicPartition{t, pe[i]}] = pe[i+1]
			}
		}
		cg.members[m.id] = m
		cg.target[m.id] = orEmptyAssignment(sm.Target)
		if m.instanceID != "" {
			cg.instances[m.instanceID] = m.id
		}
		if m.regex != "" {
			// Resolved again once the member heartbeats with its describe rights.
			if m.re, err = compileRegex(m.regex); err != nil {
				return fmt.Errorf("member %q: %w", m.id, err)
			}
		}
		for _, t := range m.topics() {
			cg.subscribed[t]++
		}
		for _, a := range []assignment{m.assigned, m.revoking} {
			a.each(func(t string, p int32) { cg.owner[topicPartition{t, p}] = m.id })
		}
		g.armConsumerSession(ctx, m)
		if m.state == memberUnrevoked {
			g.armRebalance(ctx, m)
		}
	}
	// The partition counts the target was made with: the first heartbeat compares them
	// with the catalogue and bumps the epoch if a subscribed topic changed meanwhile.
	for t, n := range s.Topics {
		cg.topicParts[t] = n
	}
	g.protocolType = consumerProtocol
	g.generation = cg.epoch
	g.publishConsumer()
	g.log().Info().Int32("group_epoch", cg.epoch).Int32("target_epoch", cg.targetEpoch).Int("members", len(cg.members)).
		Msg("consumer_group_loaded_with_its_members")
	return nil
}

func orEmptyAssignment(a assignment) assignment {
	if a == nil {
		return assignment{}
	}
	return a
}

// savedConsumerMembers is how many members a saved consumer-protocol state holds (0 for
// none or one that does not decode): ListGroups lists a group whose actor is not running
// from its file.
func savedConsumerMembers(blob json.RawMessage) int {
	if len(blob) == 0 {
		return 0
	}
	var s struct {
		Members []json.RawMessage `json:"members"`
	}
	if json.Unmarshal(blob, &s) != nil {
		return 0
	}
	return len(s.Members)
}
