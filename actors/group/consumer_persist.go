package group

import (
	"encoding/json"
	"fmt"
	"maps"
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

// consumerDelta is what changed since the saves not yet known durable were built: the
// header, the records of the members touched since the last save and those the saves
// in flight were made for (their bytes as sent: untouched since, they are current), and
// the members gone; and the records made for this save (nil: gone). So any one save that becomes durable leaves the file whole, also when
// one before it failed (the journal is not stopped by a failed write).
func (g *groupActor) consumerDelta() (*offsets.ConsumerDelta, map[string]json.RawMessage, error) {
	cg := g.cg
	h, err := json.Marshal(g.consumerHeader())
	if err != nil {
		return nil, nil, err
	}
	recs := map[string]json.RawMessage{}
	for _, sv := range cg.saves {
		maps.Copy(recs, sv.own)
	}
	own := make(map[string]json.RawMessage, len(cg.touched))
	for id := range cg.touched {
		var r json.RawMessage
		if m := cg.members[id]; m != nil {
			if r, err = json.Marshal(g.savedMemberOf(m)); err != nil {
				return nil, nil, err
			}
		}
		own[id], recs[id] = r, r
	}
	d := &offsets.ConsumerDelta{Header: h, Set: make(map[string]json.RawMessage, len(recs))}
	for id, r := range recs {
		if r == nil {
			d.Del = append(d.Del, id)
			continue
		}
		d.Set[id] = r
	}
	sort.Strings(d.Del)
	return d, own, nil
}

// saveWaiter is what waits for the save of the group's state: the request to answer
// with an error should the group stop first, and what to run with the write's code.
type saveWaiter struct {
	client Request
	then   func(code int16)
}

// consumerSave is a save in flight: its waiters, and what it wrote: a whole state, or
// a delta with the records made for it (own; nil: a member gone), which a delta sent
// while it is in flight carries again.
type consumerSave struct {
	seq   uint64
	batch []saveWaiter
	full  bool
	own   map[string]json.RawMessage
	done  bool
	code  int16
}

// has says whether the save carries member id's record (or its removal): until it is
// durable, an answer that reports the member's state waits.
func (sv *consumerSave) has(id string) bool {
	if sv.full {
		return true
	}
	_, ok := sv.own[id]
	return ok
}

// maxConsumerSaves is how many saves of a group may be in flight at once. The second
// is journaled behind the first, so the journal is not idle while the first one's
// answer comes back; a failed save fails every save sent after it (consumerSaved).
const maxConsumerSaves = 2

// consumerFlush is sent by the group to itself when a save is due: the heartbeats
// already in its mailbox are handled first and go with the same save.
type consumerFlush struct{ cg *consumerGroup }

// checkConsumerDeltas, when set (tests), sees every save before it is sent.
var checkConsumerDeltas func(g *groupActor, meta offsets.GroupMeta, delta *offsets.ConsumerDelta)

// saveConsumer has the group's state written to its file through the offsets actor;
// then runs with 0 once it is durable, or the write's code. The save is sent once the
// messages already in the group's mailbox are handled (consumerFlush), with every
// waiter that came meanwhile, and at most maxConsumerSaves are in flight: what changes
// meanwhile is written by the next one, so a burst of heartbeats in a big group costs
// one encoding and one journal write per burst, not one per heartbeat. client, if set,
// is answered with an error should the group stop first.
func (g *groupActor) saveConsumer(ctx actor.Context, client Request, then func(code int16)) {
	cg := g.cg
	if cg == nil {
		g.publishConsumer()
		then(0)
		return
	}
	cg.waiting = append(cg.waiting, saveWaiter{client: client, then: then})
	g.scheduleConsumerFlush(ctx)
}

// scheduleConsumerFlush sends the group a consumerFlush when a save is due and may go.
func (g *groupActor) scheduleConsumerFlush(ctx actor.Context) {
	cg := g.cg
	if cg.flushQueued || len(cg.waiting) == 0 || !cg.maySave() {
		return
	}
	cg.flushQueued = true
	ctx.Send(ctx.Self(), &consumerFlush{cg: cg})
}

// maySave says whether another save may be sent now: none in flight, or fewer than
// maxConsumerSaves deltas (a whole save, the first one after a failure included, goes
// alone: a delta sent behind it could not stand without it).
func (cg *consumerGroup) maySave() bool {
	if len(cg.saves) == 0 {
		return true
	}
	if len(cg.saves) >= maxConsumerSaves || cg.full {
		return false
	}
	for _, sv := range cg.saves {
		if sv.full {
			return false
		}
	}
	return true
}

// onConsumerFlush sends the save consumerFlush was sent for.
func (g *groupActor) onConsumerFlush(ctx actor.Context, m *consumerFlush) {
	cg := g.cg
	if cg == nil || cg != m.cg {
		return // the group was reset meanwhile
	}
	cg.flushQueued = false
	if len(cg.waiting) > 0 && cg.maySave() {
		g.flushConsumer(ctx)
	}
}

// memberDurable says whether member id's saved record is durable as the group holds
// it: nothing changed it since the last save, and no save in flight carries it.
func (cg *consumerGroup) memberDurable(id string) bool {
	if cg.touched[id] || (cg.full && cg.dirty) {
		return false
	}
	for _, sv := range cg.saves {
		if sv.has(id) {
			return false
		}
	}
	return true
}

// flushConsumer writes the state as it is now for the waiters so far.
func (g *groupActor) flushConsumer(ctx actor.Context) {
	cg := g.cg
	cg.saveSeq++
	sv := &consumerSave{seq: cg.saveSeq, batch: cg.waiting, full: cg.full}
	cg.waiting = nil
	cg.dirty = false
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
		delta, sv.own, err = g.consumerDelta()
	}
	if err != nil {
		panic(fmt.Errorf("group %q: encode consumer state: %w", g.id, err)) // a broken invariant
	}
	cg.full, cg.touched = false, map[string]bool{}
	cg.saves = append(cg.saves, sv)
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
		sv.done, sv.code = true, code
		g.consumerSaved(ctx)
	})
}

// consumerSaved answers the saves whose outcome is in, oldest first. A failed save
// fails every save sent after it, whatever their own outcome: what the file holds is
// not known to be what the deltas were built on. The next heartbeat then saves the
// whole state before it is answered (a retry that changes nothing is not answered
// before what it was told is durable).
func (g *groupActor) consumerSaved(ctx actor.Context) {
	cg := g.cg
	for len(cg.saves) > 0 && cg.saves[0].done {
		sv := cg.saves[0]
		cg.saves[0] = nil
		cg.saves = cg.saves[1:]
		code := sv.code
		if code == 0 && sv.seq <= cg.failedThrough {
			code = cg.failCode
		}
		if code != 0 {
			cg.full, cg.dirty = true, true
			if cg.failedThrough < cg.saveSeq {
				cg.failedThrough, cg.failCode = cg.saveSeq, code
			}
		}
		for _, w := range sv.batch {
			if w.client != nil {
				actor.Handling(ctx, w.client)
			}
			w.then(code)
		}
		if g.cg != cg {
			return // a waiter reset the group (a downgrade)
		}
	}
	if len(cg.saves) == 0 {
		cg.saves = nil
	}
	g.scheduleConsumerFlush(ctx)
}

// takeSaveWaiters takes every waiter of the saves in flight and of the next one, oldest
// first (a stop, or a downgrade that answers them after its own save).
func (cg *consumerGroup) takeSaveWaiters() []saveWaiter {
	var out []saveWaiter
	for _, sv := range cg.saves {
		out = append(out, sv.batch...)
		sv.batch = nil
	}
	out = append(out, cg.waiting...)
	cg.waiting = nil
	return out
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
